"""confluent-kafka messages -> one Arrow record batch in the source's output schema.

Hot path, measured in ``benchmarks/read_throughput.py`` (against format("kafka") and bare loops):
each column is ``map`` of a C method of confluent's ``Message`` over the batch (no Python
bytecode per message); keys and values are joined into one buffer each (:func:`binary_column`);
constant columns are built by Arrow. Timestamps come out of one pass
into a NumPy array (``(type, ms)`` pairs side by side; unzipping the tuples cost more than
the rest of the column), and a batch of one bucket whose offsets have no gap (no compaction,
no transaction marker) gets its offset column from its first and last record, as a range.

Values follow Spark's ``KafkaRecordToRowConverter``: ``headers`` is NULL for a record
without headers, and a timestamp whose microseconds do not fit a Spark timestamp fails the
read naming the record (Spark's ``KAFKA_MALFORMED_RECORD_TIMESTAMP``) instead of wrapping.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from confluent_kafka import Message

from backlog_source.core.errors import MalformedRecordError
from backlog_source.core.schema import arrow_schema

# librdkafka's timestamp types are Kafka's TimestampType ids (which Spark reports) plus one:
# NOT_AVAILABLE 0 -> -1, CREATE_TIME 1 -> 0, LOG_APPEND_TIME 2 -> 1.
_LIBRDKAFKA_TO_SPARK_TIMESTAMP_TYPE = -1
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
    # (type, ms) of every record, side by side in one array: [type0, ms0, type1, ms1, ...].
    stamps = np.fromiter(itertools.chain.from_iterable(map(Message.timestamp, messages)), np.int64, 2 * count)
    # pyarrow.compute is not imported here (pyarrow loads it on the first cast): this module
    # is imported by every process that unpickles the source, including the driver's
    # per-query runner, which never reads (benchmarks/query_startup.py).
    try:
        # A safe cast refuses a millisecond value beyond what microseconds hold.
        microseconds = pa.array(stamps[1::2], _MILLISECONDS).cast(_MICROSECONDS)
    except pa.ArrowInvalid:
        raise _malformed_timestamp(messages) from None
    columns = [
        binary_column(list(map(Message.key, messages))),
        binary_column(list(map(Message.value, messages))),
        pa.repeat(pa.scalar(topic, pa.string()), count) if topic is not None
        else pa.array(list(map(Message.topic, messages)), pa.string()),
        pa.repeat(pa.scalar(partition, pa.int32()), count) if partition is not None
        else pa.array(list(map(Message.partition, messages)), pa.int32()),
        _offsets(messages, one_bucket=partition is not None),
        microseconds,
        pa.array((stamps[0::2] + _LIBRDKAFKA_TO_SPARK_TIMESTAMP_TYPE).astype(np.int32), pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array(list(map(_headers, map(Message.headers, messages))), _HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMAS[include_headers])


def binary_column(items: list[bytes | None]) -> pa.Array:
    """The binary column of ``items`` (keys or values), equal to ``pa.array(items,
    pa.binary())``.

    pyarrow's converter appends value by value into a buffer it grows, in memory its
    allocator hands back to the kernel between batches: on 4 KB values it was a third of a
    worker's profile, three times confluent-kafka's ``consume()`` (benchmarks/README.md part
    17). So values of 512 B or more on average (judged from a sample of 64), none null,
    become one ``bytes.join`` into a buffer of the exact size, with offsets from their
    lengths, both wrapped without a copy: 1.9 against 3.3 ms for 10,000 values of 1,600 B.
    Smaller values stay with pyarrow's converter, faster there (0.36 against 0.66 ms for
    10,000 of 100 B), as do some nulls and offsets past int32. All null: Arrow's null array."""
    count = len(items)
    try:
        sample = items[::max(1, count // _SAMPLED)]
        if sum(map(len, sample)) < _JOIN_FROM_BYTES * len(sample):
            return pa.array(items, pa.binary())
        lengths = np.fromiter(map(len, items), np.int64, count)
    except TypeError:  # a null among them: None has no length
        return pa.nulls(count, pa.binary()) if items.count(None) == count else pa.array(items, pa.binary())
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _INT32_MAX:
        return pa.array(items, pa.binary())  # pyarrow chunks it (and from_arrays refuses, as before)
    return pa.Array.from_buffers(pa.binary(), count,
                                 [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(items))])


_INT32_MAX = 2**31 - 1
#: Mean bytes per value from which one join beats pyarrow's converter, and how many values
#: the mean is judged from.
_JOIN_FROM_BYTES, _SAMPLED = 512, 64


def data_bytes(batch: pa.RecordBatch) -> int:
    """Bytes of the keys, values, header keys and header values in ``batch``: what the byte
    budget counts (``enumerator/record_sizes.py``, ``record_bytes``). Read from the columns'
    offset buffers, so it costs the same for one record or a million."""
    total = _binary_bytes(batch.column(0)) + _binary_bytes(batch.column(1))
    if batch.num_columns > len(_SCHEMAS[False]):
        entries = batch.column(len(_SCHEMAS[False])).flatten()
        total += _binary_bytes(entries.field("key")) + _binary_bytes(entries.field("value"))
    return total


def data_bytes_by_topic(batch: pa.RecordBatch) -> dict[str, int]:
    """:func:`data_bytes` per topic, for a batch read from several topics. A fetch returns
    long runs of one partition, so the batch is cut at each change of topic (one comparison
    of the topic column in NumPy) and each run is counted as a zero-copy slice: never a copy
    of the data."""
    topics = batch.column(2).to_numpy(zero_copy_only=False)  # str objects: compared in C
    if len(topics) == 0:
        return {}
    changes = (np.flatnonzero(topics[1:] != topics[:-1]) + 1).tolist()
    totals: dict[str, int] = {}
    for start, end in zip([0, *changes], [*changes, len(topics)]):
        totals[topics[start]] = totals.get(topics[start], 0) + data_bytes(batch.slice(start, end - start))
    return totals


def _binary_bytes(array: pa.Array) -> int:
    """The data bytes of a binary or string array: its last offset less its first (int32
    offsets, the array's own slice of them)."""
    if len(array) == 0:
        return 0
    offsets = np.frombuffer(array.buffers()[1], np.int32, count=len(array) + 1, offset=array.offset * 4)
    return int(offsets[-1] - offsets[0])


def _offsets(messages: Sequence[Message], one_bucket: bool) -> pa.Array:
    """The offset column. One bucket's records arrive in increasing offset order, so when
    the last is ``count - 1`` past the first there is no gap and the column is that range."""
    first, last = messages[0].offset(), messages[-1].offset()
    if one_bucket and last - first + 1 == len(messages):
        return pa.array(np.arange(first, last + 1, dtype=np.int64))
    return pa.array(np.fromiter(map(Message.offset, messages), np.int64, len(messages)))


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
