"""The Spark adapter's pure parts: splits from (start, end), read limits, pickling."""

import pickle

from backlog_source.core.buckets import Bucket
from backlog_source.core.offset import SourceOffset
from backlog_source.core.offset import OpenBucket, PhaseTrace
from backlog_source.core.settings import parse_options
from backlog_source.core.trace_context import SpanContextIds
from backlog_source.datasource import BacklogStreamReader
from backlog_source.reader.split import KafkaSplit

A0, A1 = Bucket("a", 0), Bucket("a", 1)
SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxRecordsPerPartition": "50"})


def test_splits_take_source_id_boundaries_and_trace_from_end():
    # Spark re-calls initialOffset for a query's first batch, so `start` may carry another
    # source id; `end` always comes from the offset log.
    start = SourceOffset("fresh-id", {A0: 0, A1: 0}, backlog={A0: 80, A1: 60})
    trace = PhaseTrace(SpanContextIds(7, 8), 1000, buckets={A0: OpenBucket(0, 80, 1000)})
    end = SourceOffset("logged-id", {A0: 100, A1: 40}, backlog={A0: 80}, trace=trace)
    splits = BacklogStreamReader(SETTINGS).partitions(start.to_json(), end.to_json())
    assert {s.source_id for s in splits} == {"logged-id"}
    ranges = sorted((r for s in splits for r in s.ranges), key=lambda r: (r.partition, r.start))
    # Ranges of a bucket in backlog carry its bucket span's context; others none.
    bucket_span = trace.bucket_ids(A0, 80).traceparent
    assert [r.traceparent for r in ranges] == [bucket_span, bucket_span, None]
    assert [(r.partition, r.start, r.end, r.boundary) for r in ranges] == [
        (0, 0, 50, 80), (0, 50, 100, 80), (1, 0, 40, None),  # a-1 finished: no boundary
    ]
    assert [r.crosses_boundary for r in ranges] == [False, True, False]
    # maxRecordsPerPartition=50 bounds a task too: every task holds at most 50 records.
    assert all(s.records <= 50 for s in splits)


def test_small_ranges_share_tasks_and_large_ones_keep_their_own():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"})
    buckets = [Bucket("a", p) for p in range(1024)]
    start = SourceOffset("x", {b: 0 for b in buckets})
    small = SourceOffset("x", {b: 1 + p % 2 for p, b in enumerate(buckets)})  # ~1,500 records over 1,024 partitions
    splits = BacklogStreamReader(settings).partitions(start.to_json(), small.to_json())
    assert len(splits) == 1 and splits[0].records == 1536
    large = SourceOffset("x", {b: (100_000 if p < 4 else 10) for p, b in enumerate(buckets)})
    splits = BacklogStreamReader(settings).partitions(start.to_json(), large.to_json())
    assert sorted(s.records for s in splits)[-4:] == [100_000] * 4 and len(splits) == 5
    minimum = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "minPartitions": "8"})
    assert len(BacklogStreamReader(minimum).partitions(start.to_json(), small.to_json())) == 8


def test_partitions_is_a_pure_function_of_start_and_end():
    start = SourceOffset("x", {A0: 0}).to_json()
    end = SourceOffset("x", {A0: 120}, backlog={A0: 120}).to_json()
    reader = BacklogStreamReader(SETTINGS)
    assert reader.partitions(start, end) == reader.partitions(start, end)
    assert all(isinstance(s, KafkaSplit) for s in reader.partitions(start, end))


def test_reader_pickles_without_clients():
    reader = BacklogStreamReader(SETTINGS)
    _ = reader.enumerator  # creates lazily; no connection is made until used
    copy = pickle.loads(pickle.dumps(reader))
    # Executors get the narrow reader configuration, never the planner's settings or a client.
    assert copy.settings is None and copy._enumerator is None
    assert copy.reader_config == SETTINGS.reader_config
