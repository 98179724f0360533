"""The splits of one batch: what Spark's ``partitions(start, end)`` returns.

Runs on the driver, in the long-lived planner worker. A pure function of the two offset
dicts and the settings, so a batch replayed after a crash gets the same splits: Spark
always takes ``end`` from its offset log (``start`` of a query's first batch comes from a
fresh ``initialOffset`` call instead, so the source id, boundaries, trace and the starts
of new or reset buckets are taken from ``end``).
"""

from __future__ import annotations

from dataclasses import replace

from backlog_source.core.settings import SourceSettings
from backlog_source.core.split import KafkaSplit, SnapshotSplit
from backlog_source.core.state import SourceOffset, bucket_traceparent
from backlog_source.enumerator.planner import TASK_RECORDS, pack_tasks, plan_ranges


def plan_splits(start: SourceOffset, end: SourceOffset, settings: SourceSettings) -> list[KafkaSplit | SnapshotSplit]:
    """The batch ``[start, end)`` as splits: log ranges cut as Spark's Kafka source cuts them
    (``minPartitions``, ``maxRecordsPerPartition``), small ones packed into shared tasks,
    then one :class:`SnapshotSplit` per bucket whose snapshot this batch reads.

    A range carries its bucket's boundary while the bucket is pending or this batch reaches
    it (``finishing``), and the bucket span's trace context while the backlog phase is open.
    """
    read_from = {b: o for b in end.positions if (o := end.read_start(start, b)) is not None}
    boundaries = end.boundaries
    ranges = [
        replace(r, boundary=boundaries.get(r.bucket), traceparent=bucket_traceparent(end.trace, r.bucket))
        for r in plan_ranges(read_from, end.positions, min_partitions=settings.min_partitions,
                             max_records_per_partition=settings.max_records_per_partition)
    ]
    task_records = min(TASK_RECORDS, settings.max_records_per_partition or TASK_RECORDS)
    tasks = pack_tasks(ranges, task_records=task_records, min_tasks=settings.min_partitions or 1)
    splits: list[KafkaSplit | SnapshotSplit] = [KafkaSplit(tuple(task), end.source_id) for task in tasks]
    return splits + _snapshot_splits(start, end)


def _snapshot_splits(start: SourceOffset, end: SourceOffset) -> list[SnapshotSplit]:
    """A bucket whose snapshot was pending at ``start`` and is not at ``end`` reads it in this
    batch; its log range starts at the snapshot's log offset."""
    if start.snapshot is None:
        return []
    read_after = end.snapshot.pending if end.snapshot is not None else {}
    boundaries = end.boundaries
    return [
        SnapshotSplit(
            topic=bucket.topic, partition=bucket.partition, root=start.snapshot.root, files=files,
            log_offset=start.positions[bucket], boundary=boundaries.get(bucket),
            source_id=end.source_id, traceparent=bucket_traceparent(end.trace, bucket),
        )
        for bucket, files in sorted(start.snapshot.pending.items())
        if bucket not in read_after
    ]
