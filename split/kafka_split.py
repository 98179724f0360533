"""Splits: the immutable plan of one Spark input partition (one task), and the one range type.

Planned on the driver by :func:`backlog_source.split.batch_splits.plan_splits` (for Spark's
``partitions(start, end)``), pickled to an executor, read there by
:func:`backlog_source.reader.kafka_reader.read_split` or
:func:`backlog_source.reader.snapshot_reader.read_snapshot_split`. Here, on the bottom floor,
because both the enumerator (which plans them) and the reader (which reads them) use them.
They hold plain values only; Spark pickles them, so they need no other codec.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from backlog_source.core.buckets import Bucket


@dataclass(frozen=True)
class KafkaRange:
    """Offsets ``[start, end)`` of one bucket: what the planner cuts and a split reads.

    ``boundary`` is the bucket's backlog boundary (a log end offset) while the bucket is in
    backlog or this batch reaches it, else None; the reader whose consumer position moves
    from below the boundary to at or past it reports that the bucket finished its backlog.
    ``traceparent`` is the W3C context of the bucket's span, or None.
    """

    topic: str
    partition: int
    start: int
    end: int
    boundary: int | None = None
    traceparent: str | None = None

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"range of {self.topic}-{self.partition} is invalid: [{self.start}, {self.end})")

    @classmethod
    def of(cls, bucket: Bucket, start: int, end: int) -> "KafkaRange":
        return cls(bucket.topic, bucket.partition, start, end)

    @property
    def bucket(self) -> Bucket:
        return Bucket(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def crosses_boundary(self) -> bool:
        """True when reading this range takes the position from below the boundary to it."""
        return self.boundary is not None and self.start < self.boundary <= self.end


@dataclass(frozen=True)
class KafkaSplit(InputPartition):
    """One task's reads: ranges of distinct buckets, read together by one consumer, so a
    batch of small ranges over many partitions costs a few tasks instead of one each.
    ``source_id`` names the source instance (stable across restarts of one checkpoint).
    ``bytes_per_offset``: the bytes per offset the batch was planned with (measured before
    it), set only for a catch-up batch planned under a byte or time budget; None otherwise.
    The reader sizes its fetches by it, and such a batch reports what it read
    (:attr:`report_sizes`). ``publish_events``: whether the task publishes control events
    (BacklogFinishEvents, RecordSizesReports); False when the driver found that this query
    may not use the control topic, so no task tries a write the cluster refuses."""

    ranges: tuple[KafkaRange, ...]
    source_id: str = ""
    bytes_per_offset: float | None = None
    publish_events: bool = True

    def __post_init__(self) -> None:
        buckets = [r.bucket for r in self.ranges]
        if len(set(buckets)) != len(buckets):
            raise ValueError(f"a split reads each bucket once, got {', '.join(map(str, buckets))}")

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)

    @property
    def report_sizes(self) -> bool:
        """True for a catch-up batch planned under a budget whose tasks publish: its task
        publishes what it read (``events/sizes_report.py``), and the next batch is planned
        from all of it."""
        return self.bytes_per_offset is not None and self.publish_events


@dataclass(frozen=True)
class SnapshotSplit(InputPartition):
    """Read one bucket's snapshot: Parquet ``files`` (relative to ``root``, a path or a
    ``pyarrow.fs`` URI) holding the latest record per key up to ``log_offset``.

    ``boundary`` is the bucket's backlog boundary when the batch was planned, or None; when
    it is <= ``log_offset`` the snapshot is the bucket's whole backlog, and the reader that
    read it reports the bucket finished, unless ``publish_events`` is False (as in
    :class:`KafkaSplit`).
    """

    topic: str
    partition: int
    root: str
    files: tuple[str, ...]
    log_offset: int
    boundary: int | None = None
    source_id: str = ""
    traceparent: str | None = None
    publish_events: bool = True

    @property
    def bucket(self) -> Bucket:
        return Bucket(self.topic, self.partition)

    @property
    def finishes_backlog(self) -> bool:
        return self.boundary is not None and self.boundary <= self.log_offset
