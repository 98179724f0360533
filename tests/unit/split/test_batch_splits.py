"""The splits of a batch, planned from what its (start, end) offsets read: SourceOffset.reads_since() and
plan_splits()."""

from dataclasses import replace

from backlog_source.core.buckets import Bucket
from backlog_source.core.settings import parse_options
from backlog_source.core.tracing.context import SpanContextIds
from backlog_source.enumerator.state import BacklogState, OpenBucket, PhaseTrace, SnapshotState, SourceOffset
from backlog_source.split.batch_splits import TASK_BYTES, BatchReads, SnapshotRead, plan_splits
from backlog_source.split.kafka_split import KafkaSplit, SnapshotSplit

A0, A1 = Bucket("a", 0), Bucket("a", 1)
SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxRecordsPerPartition": "50"})
DEFAULTS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"})


def test_splits_take_source_id_boundaries_and_trace_from_end():
    # Spark re-calls initialOffset for a query's first batch, so `start` may carry another
    # source id; `end` always comes from the offset log.
    start = SourceOffset("fresh-id", {A0: 0, A1: 0}, backlog=BacklogState(pending={A0: 80, A1: 60}))
    trace = PhaseTrace(SpanContextIds(7, 8), 1000, buckets={A0: OpenBucket(0, 80, 1000)})
    end = SourceOffset("logged-id", {A0: 100, A1: 40}, backlog=BacklogState(pending={A0: 80}), trace=trace)
    splits = plan_splits(end.reads_since(start), SETTINGS)
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
    buckets = [Bucket("a", p) for p in range(1024)]
    start = SourceOffset("x", {b: 0 for b in buckets})
    small = SourceOffset("x", {b: 1 + p % 2 for p, b in enumerate(buckets)})  # ~1,500 records over 1,024 partitions
    splits = plan_splits(small.reads_since(start), DEFAULTS)
    assert len(splits) == 1 and splits[0].records == 1536
    large = SourceOffset("x", {b: (100_000 if p < 4 else 10) for p, b in enumerate(buckets)})
    splits = plan_splits(large.reads_since(start), DEFAULTS)
    assert sorted(s.records for s in splits)[-4:] == [100_000] * 4 and len(splits) == 5
    minimum = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "minPartitions": "8"})
    assert len(plan_splits(small.reads_since(start), minimum)) == 8


def test_a_batch_that_clears_a_pending_snapshot_reads_it_and_a_replay_plans_the_same():
    snapshot = SnapshotState("/snap", "s", {A0: ("f0.parquet",), A1: ("f1.parquet",)})
    start = SourceOffset("id", {A0: 100, A1: 50}, backlog=BacklogState(pending={A0: 120, A1: 50}), snapshot=snapshot)
    end = SourceOffset("id", {A0: 120, A1: 50}, backlog=BacklogState(pending={A0: 120, A1: 50}),
                       snapshot=SnapshotState("/snap", "s", {}))
    splits = plan_splits(end.reads_since(start), DEFAULTS)
    assert splits == plan_splits(end.reads_since(start), DEFAULTS)
    assert [type(s) for s in splits] == [KafkaSplit, SnapshotSplit, SnapshotSplit]
    snap0, snap1 = splits[1:]
    assert (snap0.files, snap0.log_offset, snap0.finishes_backlog) == (("f0.parquet",), 100, False)
    assert (snap1.files, snap1.log_offset, snap1.finishes_backlog) == (("f1.parquet",), 50, True)
    # Later batches plan no snapshot splits.
    later = SourceOffset("id", {A0: 130, A1: 50}, snapshot=SnapshotState("/snap", "s", {}))
    assert all(isinstance(s, KafkaSplit) for s in plan_splits(later.reads_since(end), DEFAULTS))


def test_a_batch_of_large_records_is_packed_into_tasks_bounded_in_bytes():
    buckets = [Bucket("t", p) for p in range(8)]
    start = {b: 0 for b in buckets}
    end = {b: 4_500 for b in buckets}  # 36,000 records: one task by count
    assert len(plan_splits(BatchReads("s", start, end), DEFAULTS)) == 1
    splits = plan_splits(BatchReads("s", start, end, bytes_per_offset=3_600.0), DEFAULTS)
    assert len(splits) > 1
    assert all(s.records * 3_600.0 <= TASK_BYTES for s in splits)
    # Every task carries the sizes it was planned with: its reader sizes fetches by them.
    assert {s.bytes_per_offset for s in splits} == {3_600.0}
    assert {s.bytes_per_offset for s in plan_splits(BatchReads("s", start, end), DEFAULTS)} == {None}


def test_the_runs_decision_not_to_publish_reaches_every_split_and_changes_no_read(tmp_path):
    start = SourceOffset("src", {A0: 0, A1: 0}, backlog=BacklogState(pending={A0: 80, A1: 60}))
    end = SourceOffset("src", {A0: 100, A1: 40}, backlog=BacklogState(pending={A0: 80}))
    reads = replace(end.reads_since(start), bytes_per_offset=100.0,
                    snapshots=(SnapshotRead(A1, str(tmp_path), ("f.parquet",), 0),))
    publishing, silent = plan_splits(reads, SETTINGS), plan_splits(reads, SETTINGS, publish_events=False)
    assert all(s.publish_events for s in publishing) and not any(s.publish_events for s in silent)
    assert [replace(s, publish_events=True) for s in silent] == publishing
    # A catch-up batch's tasks report what they read only where they publish.
    kafka_splits = [s for s in silent if isinstance(s, KafkaSplit)]
    assert kafka_splits and not any(s.report_sizes for s in kafka_splits)
    assert all(s.report_sizes for s in publishing if isinstance(s, KafkaSplit))
