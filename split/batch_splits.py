"""The splits of one batch: what Spark's ``partitions(start, end)`` returns.

Runs on the driver, in the long-lived planner worker. A pure function of what the batch
reads (:class:`BatchReads`, which the enumerator's state derives from the batch's two
offsets: ``SourceOffset.reads_since``) and the settings, so a batch replayed after a crash
gets the same splits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from backlog_source.core.buckets import Bucket
from backlog_source.core.settings import SourceSettings
from backlog_source.split.kafka_split import KafkaSplit, SnapshotSplit
from backlog_source.split.planning import TASK_RECORDS, pack_tasks, plan_ranges


@dataclass(frozen=True)
class SnapshotRead:
    """A bucket whose snapshot this batch reads: Parquet ``files`` under ``root``, holding its
    records up to ``log_offset`` (where its log range starts)."""

    bucket: Bucket
    root: str
    files: tuple[str, ...]
    log_offset: int


@dataclass(frozen=True)
class BatchReads:
    """What one batch reads: ``[start[b], end[b])`` of each bucket, the boundary each bucket
    carries (pending or reached by this batch), the trace context of each open bucket span,
    and the snapshots this batch reads."""

    source_id: str
    start: dict[Bucket, int]
    end: dict[Bucket, int]
    boundaries: dict[Bucket, int] = field(default_factory=dict)
    traceparents: dict[Bucket, str] = field(default_factory=dict)
    snapshots: tuple[SnapshotRead, ...] = ()
    #: Bytes per offset the batch was planned with (a catch-up batch measures them), or None.
    bytes_per_offset: float | None = None


#: A task reads at most about this many bytes when the batch's record sizes are known: a
#: task's rows reach the driver whole when a sink collects them (toArrow, toPandas, collect),
#: and one task of 130 MB of 3.6 KB records (fewer than the 40,000-record packing limit) ran
#: a driver with Spark's default 1 GiB heap out of memory where eight of 50 MB did not.
TASK_BYTES = 32 << 20


def plan_splits(reads: BatchReads, settings: SourceSettings, *,
                publish_events: bool = True) -> list[KafkaSplit | SnapshotSplit]:
    """The batch as splits: log ranges cut as Spark's Kafka source cuts them
    (``minPartitions``, ``maxRecordsPerPartition``), small ones packed into shared tasks,
    then one :class:`SnapshotSplit` per bucket whose snapshot this batch reads.

    A range carries its bucket's boundary while the bucket is pending or this batch reaches
    it, and the bucket span's trace context while the backlog phase is open. Small ranges
    share a task up to 40,000 records, and up to :data:`TASK_BYTES` when the batch's record
    sizes are known. ``publish_events``: whether the splits' readers publish control events
    (the driver's decision for the run, ``KafkaSplit.publish_events``); it changes no read.
    """
    ranges = [
        replace(r, boundary=reads.boundaries.get(r.bucket), traceparent=reads.traceparents.get(r.bucket))
        for r in plan_ranges(reads.start, reads.end, min_partitions=settings.min_partitions,
                             max_records_per_partition=settings.max_records_per_partition)
    ]
    task_records = min(TASK_RECORDS, settings.max_records_per_partition or TASK_RECORDS)
    if reads.bytes_per_offset:
        task_records = max(1, min(task_records, int(TASK_BYTES / reads.bytes_per_offset)))
    tasks = pack_tasks(ranges, task_records=task_records, min_tasks=settings.min_partitions or 1)
    # A batch planned with measured sizes is a catch-up batch under a budget: its readers
    # report what they read (KafkaSplit.report_sizes), so the next batch is planned from all
    # of it, not a sample.
    splits: list[KafkaSplit | SnapshotSplit] = [
        KafkaSplit(tuple(task), reads.source_id, reads.bytes_per_offset, publish_events) for task in tasks]
    return splits + [
        SnapshotSplit(
            topic=s.bucket.topic, partition=s.bucket.partition, root=s.root, files=s.files, log_offset=s.log_offset,
            boundary=reads.boundaries.get(s.bucket), source_id=reads.source_id,
            traceparent=reads.traceparents.get(s.bucket), publish_events=publish_events,
        )
        for s in reads.snapshots
    ]
