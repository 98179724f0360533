"""confluent-kafka messages -> one Arrow record batch in the source's output schema.

Which process: a Python worker on an executor, once per batch a read yields.

Hot path, measured in ``benchmarks/read_throughput.py`` (against format("kafka") and bare loops):
each column is ``map`` of a C method of confluent's ``Message`` over the batch (no Python
bytecode per message); keys, values and strings are joined into one buffer each
(:func:`binary_column`). Timestamps come out of one pass into a NumPy array (``(type, ms)``
pairs side by side; unzipping the tuples cost more than the rest of the column), and a batch
of one bucket whose offsets have no gap (no compaction, no transaction marker) gets its
offset column from its first and last record, as a range.

**Every column is built from its buffers, never by ``pa.array``.** pyarrow imports pandas at
a process's first ``pa.array`` (also ``pa.scalar`` and ``Array.to_numpy``), whatever it
converts: 0.8 s of a fresh worker's first batch and ~35,000 more objects in its heap, paid
again by every new worker (each query start, the batch replayed after a restart). PySpark's
worker imports no pandas to read a Python data source, so this module must not either
(``tests/unit/reader/test_worker_heap.py`` checks it in a fresh interpreter).

Values follow Spark's ``KafkaRecordToRowConverter``: ``headers`` is NULL for a record
without headers, and a timestamp whose microseconds do not fit a Spark timestamp fails the
read naming the record (Spark's ``KAFKA_MALFORMED_RECORD_TIMESTAMP``) instead of wrapping.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from confluent_kafka import Message

from backlog_source.core.errors import MalformedRecordError
from backlog_source.core.schema import arrow_schema

# librdkafka's timestamp types are Kafka's TimestampType ids (which Spark reports) plus one:
# NOT_AVAILABLE 0 -> -1, CREATE_TIME 1 -> 0, LOG_APPEND_TIME 2 -> 1.
_LIBRDKAFKA_TO_SPARK_TIMESTAMP_TYPE = -1
_MICROSECONDS = pa.timestamp("us", tz="UTC")
#: The largest millisecond timestamp whose microseconds fit a Spark timestamp (an int64).
_MAX_MS = (2**63 - 1) // 1000
_INT32_MAX = 2**31 - 1

_SCHEMAS = {flag: arrow_schema(flag) for flag in (False, True)}
_HEADER_TYPE = _SCHEMAS[True].field("headers").type


def to_record_batch(messages: Sequence[Message], topic: str | None, partition: int | None,
                    include_headers: bool) -> pa.RecordBatch:
    """The batch for ``messages`` (error-free records, at least one). ``topic`` and
    ``partition``: the bucket all of them belong to, or None when they come from several
    buckets (the columns are then read per message).

    Raises :class:`MalformedRecordError` naming the first record whose timestamp overflows.
    """
    count = len(messages)
    # (type, ms) of every record, side by side in one array: [type0, ms0, type1, ms1, ...].
    stamps = np.fromiter(itertools.chain.from_iterable(map(Message.timestamp, messages)), np.int64, 2 * count)
    milliseconds = stamps[1::2]
    if np.any((milliseconds > _MAX_MS) | (milliseconds < -_MAX_MS)):
        raise _malformed_timestamp(messages)
    columns = [
        binary_column(list(map(Message.key, messages))),
        binary_column(list(map(Message.value, messages))),
        _repeated_string(topic, count) if topic is not None else _topic_column(list(map(Message.topic, messages))),
        _numbers(np.full(count, partition, np.int32) if partition is not None
                 else np.fromiter(map(Message.partition, messages), np.int32, count), pa.int32()),
        _numbers(_offsets(messages, one_bucket=partition is not None), pa.int64()),
        _numbers(milliseconds * 1000, _MICROSECONDS),
        _numbers((stamps[0::2] + _LIBRDKAFKA_TO_SPARK_TIMESTAMP_TYPE).astype(np.int32), pa.int32()),
    ]
    if include_headers:
        columns.append(_header_column(list(map(Message.headers, messages))))
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMAS[include_headers])


def binary_column(items: list[bytes | None], value_type: pa.DataType = pa.binary()) -> pa.Array:
    """The binary (or, for UTF-8 ``bytes``, string) column of ``items``: equal to
    ``pa.array(items, value_type)``, without importing pandas.

    The items are joined into one buffer of the exact size, with offsets from their lengths,
    both wrapped without a copy. pyarrow's converter appends value by value into a buffer it
    grows, in memory its allocator hands back to the kernel between batches, and imports
    pandas at a process's first call; the join is faster from about 1 KB a value and a little
    slower on small values, which the worker more than gets back by never importing pandas
    (benchmarks/README.md, "read_throughput"). Nulls get a validity bitmap; all
    null is Arrow's null array.

    Raises ValueError when the items hold more than 2 GiB (a binary column's int32 offsets):
    the reader cuts its Arrow batches far below that (``ARROW_BATCH_BYTES``)."""
    count = len(items)
    try:
        lengths = np.fromiter(map(len, items), np.int32, count)
        present, validity, nulls = items, None, 0
    except TypeError:  # a null among them: None has no length
        nulls = items.count(None)
        if nulls == count:
            return pa.nulls(count, value_type)
        mask = np.fromiter(map(operator.is_not, items, itertools.repeat(None)), np.bool_, count)
        present = list(itertools.compress(items, mask))
        lengths = np.zeros(count, np.int32)
        lengths[mask] = np.fromiter(map(len, present), np.int32, count - nulls)
        validity = pa.py_buffer(np.packbits(mask, bitorder="little"))
    data = b"".join(present)
    if len(data) > _INT32_MAX:
        raise ValueError(f"{len(data)} bytes of keys or values in one Arrow batch of {count} records: more than a "
                         "binary column holds (2 GiB)")
    offsets = np.zeros(count + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])  # within int32: their sum is len(data)
    return pa.Array.from_buffers(value_type, count, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def _numbers(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """``values`` (no nulls) as an Arrow array of ``arrow_type``, whose width they have,
    sharing their memory."""
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])


def _topic_column(topics: list[str]) -> pa.Array:
    """The topic column of records from several buckets: mostly of one topic (a split packs
    partitions of a topic together), then built as one repeated string."""
    distinct = set(topics)
    if len(distinct) == 1:
        return _repeated_string(topics[0], len(topics))
    encoded = {topic: topic.encode() for topic in distinct}
    return binary_column(list(map(encoded.__getitem__, topics)), pa.string())


def _repeated_string(text: str, count: int) -> pa.Array:
    """A string column of ``count`` times ``text`` (a bucket's topic)."""
    encoded = text.encode()
    offsets = np.arange(count + 1, dtype=np.int64) * len(encoded)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(encoded * count)])


def _header_column(headers: list[list[tuple[str, bytes | None]] | None]) -> pa.Array:
    """The headers column: a list of (key, value) structs per record, in the order the
    record has them (duplicates kept), and NULL for a record without headers, as Spark's
    Kafka source gives (``KafkaRecordToRowConverter``)."""
    count = len(headers)
    mask = np.fromiter(map(bool, headers), np.bool_, count)  # None and [] alike: no headers
    with_headers = list(itertools.compress(headers, mask))
    sizes = np.zeros(count, np.int64)
    sizes[mask] = np.fromiter(map(len, with_headers), np.int64, len(with_headers))
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    entries = list(itertools.chain.from_iterable(with_headers))
    entry_type = _HEADER_TYPE.value_type
    structs = pa.StructArray.from_arrays(
        [binary_column([key.encode() for key, _ in entries], pa.string()),
         binary_column([value for _, value in entries])],
        fields=list(entry_type))
    nulls = count - len(with_headers)
    validity = pa.py_buffer(np.packbits(mask, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(_HEADER_TYPE, count, [validity, pa.py_buffer(offsets.astype(np.int32))],
                                 null_count=nulls, children=[structs])


def data_bytes(batch: pa.RecordBatch) -> int:
    """Bytes of the keys, values, header keys and header values in ``batch``: what the byte
    budget counts (``enumerator/record_sizes.py``, ``record_bytes``). Read from the columns'
    offset buffers, so it costs the same for one record or a million."""
    total = _binary_bytes(batch.column(0)) + _binary_bytes(batch.column(1))
    if batch.num_columns > len(_SCHEMAS[False]) and batch.num_rows:
        headers = batch.column(len(_SCHEMAS[False]))
        # The batch's own entries: a range of the list's child (``flatten()`` would import
        # pyarrow.compute into every worker); a record without headers has none.
        bounds = np.frombuffer(headers.buffers()[1], np.int32, count=len(headers) + 1, offset=headers.offset * 4)
        first, count = int(bounds[0]), int(bounds[-1] - bounds[0])
        entries = headers.values
        total += (_binary_bytes(entries.field("key").slice(first, count))
                  + _binary_bytes(entries.field("value").slice(first, count)))
    return total


def data_bytes_by_topic(batch: pa.RecordBatch) -> dict[str, int]:
    """:func:`data_bytes` per topic, for a batch read from several topics. A fetch returns
    long runs of one partition, so the batch is cut at each change of topic (one comparison
    of the topic column with itself shifted by one) and each run is counted as a zero-copy
    slice: never a copy of the data."""
    import pyarrow.compute as pc  # only splits of several topics need it (50 ms to import)

    topics = batch.column(2)
    if len(topics) == 0:
        return {}
    changed = pc.indices_nonzero(pc.not_equal(topics.slice(1), topics.slice(0, len(topics) - 1)))
    # Read from its buffer: Array.to_numpy would import pandas (see the module docstring).
    changes = (np.frombuffer(changed.buffers()[1], np.uint64, count=len(changed), offset=changed.offset * 8)
               + 1).tolist()
    totals: dict[str, int] = {}
    for start, end in zip([0, *changes], [*changes, len(topics)]):
        topic = topics[start].as_py()
        totals[topic] = totals.get(topic, 0) + data_bytes(batch.slice(start, end - start))
    return totals


def _binary_bytes(array: pa.Array) -> int:
    """The data bytes of a binary or string array: its last offset less its first (int32
    offsets, the array's own slice of them)."""
    if len(array) == 0:
        return 0
    offsets = np.frombuffer(array.buffers()[1], np.int32, count=len(array) + 1, offset=array.offset * 4)
    return int(offsets[-1] - offsets[0])


def _offsets(messages: Sequence[Message], one_bucket: bool) -> np.ndarray:
    """The offset column. One bucket's records arrive in increasing offset order, so when
    the last is ``count - 1`` past the first there is no gap and the column is that range."""
    first, last = messages[0].offset(), messages[-1].offset()
    if one_bucket and last - first + 1 == len(messages):
        return np.arange(first, last + 1, dtype=np.int64)
    return np.fromiter(map(Message.offset, messages), np.int64, len(messages))


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
