"""confluent-kafka messages -> one Arrow record batch in the source's output schema.

Hot path, measured in ``benchmarks/read_throughput.py``: each column is ``map`` of a C method
of confluent's ``Message`` over the batch (no Python bytecode per message), constant columns
are built by Arrow, and timestamps are scaled by Arrow compute rather than in Python.

Values follow Spark's ``KafkaRecordToRowConverter``: ``headers`` is NULL for a record
without headers, and a timestamp whose microseconds do not fit a Spark timestamp fails the
read naming the record (Spark's ``KAFKA_MALFORMED_RECORD_TIMESTAMP``) instead of wrapping.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from confluent_kafka import Message

from backlog_source.core.errors import MalformedRecordError
from backlog_source.core.schema import arrow_schema

# librdkafka timestamp types (the index) -> Kafka's TimestampType ids that Spark reports:
# NOT_AVAILABLE 0 -> -1, CREATE_TIME 1 -> 0, LOG_APPEND_TIME 2 -> 1. A list, not an array:
# building an array at import would load pandas into every process that imports this.
_SPARK_TIMESTAMP_TYPES = [-1, 0, 1]
_MILLISECONDS = pa.timestamp("ms", tz="UTC")
_MICROSECONDS = pa.timestamp("us", tz="UTC")

_SCHEMAS = {flag: arrow_schema(flag) for flag in (False, True)}
_HEADER_TYPE = _SCHEMAS[True].field("headers").type


def to_record_batch(messages: Sequence[Message], topic: str | None, partition: int | None,
                    include_headers: bool) -> pa.RecordBatch:
    """The batch for ``messages`` (error-free records). ``topic`` and ``partition``: the
    bucket all of them belong to, or None when they come from several buckets (the columns
    are then read per message).

    Raises :class:`MalformedRecordError` naming the first record whose timestamp overflows.
    """
    count = len(messages)
    timestamp_types, timestamp_ms = zip(*map(Message.timestamp, messages))
    # pyarrow.compute is not imported here (pyarrow loads it on the first cast): this module
    # is imported by every process that unpickles the source, including the driver's
    # per-query runner, which never reads (benchmarks/query_startup.py).
    try:
        # A safe cast refuses a millisecond value beyond what microseconds hold.
        microseconds = pa.array(timestamp_ms, _MILLISECONDS).cast(_MICROSECONDS)
    except pa.ArrowInvalid:
        raise _malformed_timestamp(messages) from None
    columns = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count) if topic is not None
        else pa.array(list(map(Message.topic, messages)), pa.string()),
        pa.repeat(pa.scalar(partition, pa.int32()), count) if partition is not None
        else pa.array(list(map(Message.partition, messages)), pa.int32()),
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        microseconds,
        pa.array(_SPARK_TIMESTAMP_TYPES, pa.int32()).take(pa.array(timestamp_types, pa.int8())),
    ]
    if include_headers:
        columns.append(pa.array(list(map(_headers, map(Message.headers, messages))), _HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMAS[include_headers])


def _headers(headers: list[tuple[str, bytes | None]] | None) -> list[dict] | None:
    # Spark's Kafka source gives NULL for a record without headers (KafkaRecordToRowConverter).
    return [{"key": key, "value": value} for key, value in headers] if headers else None


_MAX_MS = (2**63 - 1) // 1000


def _malformed_timestamp(messages: Sequence[Message]) -> MalformedRecordError:
    for message in messages:
        ms = message.timestamp()[1]
        if not -_MAX_MS <= ms <= _MAX_MS:
            return MalformedRecordError(
                f"record at offset {message.offset()} of topic {message.topic()}, partition {message.partition()} has "
                f"timestamp {ms} ms, "
                "beyond what a Spark timestamp holds (KAFKA_MALFORMED_RECORD_TIMESTAMP): was it written in "
                "nanoseconds or microseconds instead of milliseconds?"
            )
    return MalformedRecordError("a record timestamp overflows a Spark timestamp")
