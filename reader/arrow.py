"""confluent-kafka messages -> one Arrow record batch in the source's output schema.

Hot path, measured in ``benchmarks/read_throughput.py``: each column is ``map`` of a C method
of confluent's ``Message`` over the batch (no Python bytecode per message, about twice as
fast as a list comprehension), constant columns are built by Arrow, and timestamps are
scaled by Arrow compute rather than in Python.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message

from backlog_core.schema import arrow_schema

# librdkafka timestamp types -> Kafka's TimestampType ids that Spark reports:
# NOT_AVAILABLE 0 -> -1, CREATE_TIME 1 -> 0, LOG_APPEND_TIME 2 -> 1. That is "minus one".
_TIMESTAMP_TYPE_SHIFT = 1

_SCHEMAS = {flag: arrow_schema(flag) for flag in (False, True)}
_HEADER_TYPE = _SCHEMAS[True].field("headers").type


def to_record_batch(messages: Sequence[Message], topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """Build the batch for ``messages`` (error-free records of one bucket, in offset order)."""
    count = len(messages)
    timestamp_types, timestamp_ms = zip(*map(Message.timestamp, messages))
    columns = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        pc.multiply(pa.array(timestamp_ms, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC")),
        pc.subtract(pa.array(timestamp_types, pa.int32()), _TIMESTAMP_TYPE_SHIFT),
    ]
    if include_headers:
        columns.append(pa.array(list(map(_headers, map(Message.headers, messages))), _HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMAS[include_headers])


def _headers(headers: list[tuple[str, bytes | None]] | None) -> list[dict]:
    # Spark's Kafka source gives an empty array for a record without headers.
    return [{"key": key, "value": value} for key, value in headers] if headers else []
