"""The source's state: what one checkpointed offset holds, as values (no encoding here).

Which process: the driver's planner worker builds and reads it; the mode-switch listener
and :func:`~backlog_source.metrics.lag_metrics` read it from progress events. Its JSON
encoding, with every released version, is :mod:`backlog_source.core.offset`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backlog_source.core.buckets import Bucket
from backlog_source.core.finish import FinishedBy
from backlog_source.core.text_enum import TextEnum
from backlog_source.core.tracing.context import SpanContextIds, derived_span_id


class EventOutcome(TextEnum):
    """How one control-topic message was treated (counted in :class:`EventCounts`)."""

    HANDLED = "handled"
    DUPLICATE = "duplicate"  # already finished: a retried task or a replayed batch
    FOREIGN = "foreign"  # another source's event
    STALE = "stale"  # a boundary of an earlier backlog phase
    MALFORMED = "malformed"  # not a BacklogFinishEvent this release reads
    IMPLAUSIBLE = "implausible"  # for a bucket no planned batch has carried to that boundary (forged, or not ours)


#: Buckets finished by their committed position because their event never arrived: the
#: count's name is derived from :class:`FinishedBy`, the one vocabulary for it.
BY_POSITION = f"finished_by_{FinishedBy.POSITION.value}"
#: What :class:`EventCounts` counts: each outcome, and the position fallback.
CountKind = EventOutcome | str
COUNT_KINDS: tuple[str, ...] = (*(outcome.value for outcome in EventOutcome), BY_POSITION)


@dataclass(frozen=True)
class EventCounts:
    """How the control-topic messages read so far were treated (checkpointed with them)."""

    counts: dict[CountKind, int] = field(default_factory=dict)

    def add(self, kind: CountKind, n: int = 1) -> "EventCounts":
        return EventCounts({**self.counts, kind: self.counts.get(kind, 0) + n})

    def __getitem__(self, kind: CountKind) -> int:
        return self.counts.get(kind, 0)


@dataclass(frozen=True)
class OpenBucket:
    """A ``backlog.bucket`` span not finished yet."""

    start_offset: int
    boundary: int
    started_ms: int


@dataclass(frozen=True)
class PhaseTrace:
    """The current (or last) backlog phase's trace; immutable."""

    ids: SpanContextIds
    started_ms: int
    topics: tuple[str, ...] = ()
    bucket_count: int = 0
    records: int = 0
    buckets: dict[Bucket, OpenBucket] = field(default_factory=dict)

    @property
    def open(self) -> bool:
        return bool(self.buckets)

    def bucket_ids(self, bucket: Bucket, boundary: int) -> SpanContextIds:
        """The ``backlog.bucket`` span of ``bucket`` with ``boundary`` in this phase."""
        span_id = derived_span_id(self.ids.trace_id, bucket.topic, bucket.partition, boundary)
        return SpanContextIds(self.ids.trace_id, span_id)


def bucket_traceparent(trace: PhaseTrace | None, bucket: Bucket) -> str | None:
    """The W3C context a split of ``bucket`` carries: its open bucket span, else None."""
    entry = None if trace is None else trace.buckets.get(bucket)
    if entry is None:
        return None
    return trace.bucket_ids(bucket, entry.boundary).traceparent


@dataclass(frozen=True)
class SnapshotState:
    """The snapshot a query started from: ``pending`` maps each bucket whose snapshot has not
    been read yet to its files (relative to ``root``). A batch whose start has a bucket
    pending and whose end does not reads that bucket's snapshot, so a replayed batch reads
    the same files."""

    root: str
    snapshot_id: str
    pending: dict[Bucket, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceOffset:
    """One checkpointed offset of the source (the end of one micro-batch); immutable.

    * ``positions``: the next offset of each bucket once the batch has been read.
    * ``starts``: where the batch begins reading a bucket when that is not the previous
      batch's position: a bucket discovered in this batch (its earliest offset) or reset
      because its offsets moved backwards. ``partitions(start, end)`` reads
      ``[end.starts.get(b, start.positions[b]), end.positions[b])``.
    * ``backlog``: the boundary of each bucket still below it once the batch is read.
    * ``finishing``: the boundary of each bucket this batch carries to (or past) it; the
      bucket leaves backlog when the batch commits, and the next batch records why (its
      event, or the committed position). Splits of these buckets carry the boundary, so the
      reader that crosses it publishes the BacklogFinishEvent.
    * ``topic_ids``: the id (KIP-516) of each topic read, as Kafka described it when this
      batch was planned: a topic whose id has changed since was deleted and re-created,
      whatever its offsets say. Empty in offsets written before release 0.3.0.
    """

    source_id: str
    positions: dict[Bucket, int]
    backlog: dict[Bucket, int] = field(default_factory=dict)
    finishing: dict[Bucket, int] = field(default_factory=dict)
    starts: dict[Bucket, int] = field(default_factory=dict)
    events_position: int = 0
    event_counts: EventCounts = field(default_factory=EventCounts)
    trace: PhaseTrace | None = None
    snapshot: SnapshotState | None = None
    topic_ids: dict[str, str] = field(default_factory=dict)

    @property
    def processing_backlog(self) -> bool:
        """True while some bucket is still below its boundary once this batch is read: the
        flag a progress event reports for the batch that has just committed."""
        return bool(self.backlog)

    @property
    def boundaries(self) -> dict[Bucket, int]:
        """Every boundary this batch's reads carry: still pending or reached by this batch."""
        return {**self.finishing, **self.backlog}

    def read_start(self, previous: "SourceOffset", bucket: Bucket) -> int | None:
        """Where this batch begins reading ``bucket``, given the previous batch's end; None
        for a bucket this batch does not read."""
        if bucket in self.starts:
            return self.starts[bucket]
        return previous.positions.get(bucket)
