"""The source's checkpointed state: :class:`SourceOffset`, the one checkpoint type, as values
(no encoding here). It holds the :class:`BacklogState` (``offset.backlog``), with its
transitions (settle, plan, add boundaries), and how a bucket leaves backlog
(:class:`FinishedBy`). One name for the set of boundaries a batch carries: ``boundaries``
(pending ones, still below, and finishing ones, reached by this batch).

Which process: the driver's planner worker builds and reads it; the mode-switch listener
and :func:`~backlog_source.metrics.lag_metrics` read it from progress events. Its JSON
encoding, with every released version, is :mod:`backlog_source.enumerator.state_codec`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import MalformedEvent
from backlog_source.core.text_enum import TextEnum
from backlog_source.core.tracing.context import SpanContextIds, derived_span_id
from backlog_source.events.finish_event import BacklogFinishEvent
from backlog_source.split.batch_splits import BatchReads, SnapshotRead


class FinishedBy(TextEnum):
    """Why a bucket is no longer in backlog."""

    EVENT = "event"  # its BacklogFinishEvent was handled
    POSITION = "position"  # its committed position passed the boundary; the event was lost or late
    VANISHED = "vanished"  # the partition was deleted (failOnDataLoss=false)
    RESET = "reset"  # its offsets moved backwards (failOnDataLoss=false); a new boundary follows


@dataclass(frozen=True)
class Finish:
    """A bucket that left backlog: how, and the position that proved it (None when the
    bucket vanished)."""

    by: FinishedBy
    reached_offset: int | None = None


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
    #: The batches planned while the phase was open; the bytes they were planned to read
    #: (0 where nothing was measured: no byte or time budget); what bounded them; the byte
    #: budget of the last one that had one. The ``backlog.phase`` span reports them.
    batches: int = 0
    planned_bytes: int = 0
    bounded_by: tuple[BoundedBy, ...] = ()
    budget_bytes: int | None = None

    @property
    def open(self) -> bool:
        return bool(self.buckets)

    def counted(self, plan: BatchPlan | None) -> "PhaseTrace":
        """This trace with one more batch of the phase, planned as ``plan`` says."""
        if plan is None:
            return replace(self, batches=self.batches + 1)
        return replace(
            self, batches=self.batches + 1, planned_bytes=self.planned_bytes + (plan.bytes or 0),
            bounded_by=tuple(sorted(set(self.bounded_by) | {plan.bounded_by}, key=str)),
            budget_bytes=plan.budget_bytes if plan.budget_bytes is not None else self.budget_bytes)

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


class BoundedBy(TextEnum):
    """What bounded a batch's plan (the smallest bound wins)."""

    AVAILABLE = "available"  # everything available: no bound applied
    RECORDS = "records"  # maxOffsetsPerTrigger / backlog.maxOffsetsPerTrigger
    BYTES = "bytes"  # backlog.maxBytesPerTrigger
    TIME = "time"  # backlog.targetBatchDuration (or its start-small growth)


@dataclass(frozen=True)
class BatchPlan:
    """How a batch was sized, kept with its offset (so a progress event shows it, and a
    restart mid-backlog restores what was learnt).

    ``bounded_by``: what bounded it. ``bytes``: the bytes of keys, values and headers it was
    planned to read, from the record sizes the previous catch-up batch's readers reported or
    a sample where it starts (None when not measured: no byte or time budget, or not
    processing backlog). ``budget_bytes``: the byte bound it
    was planned under, if any. ``bytes_per_s``: the catch-up throughput learnt so far
    (bytes per second of whole batches, sink included), which ``backlog.targetBatchDuration``
    sizes batches from."""

    bounded_by: BoundedBy
    bytes: int | None = None
    budget_bytes: int | None = None
    bytes_per_s: float | None = None


@dataclass(frozen=True)
class TriggerIntervals:
    """The trigger intervals (ms) a query asks ``backlog_source.install`` for with the options
    ``backlog.highThroughputInterval`` / ``backlog.lowLatencyInterval``; None: the
    installation's own."""

    high_throughput_ms: int | None = None
    low_latency_ms: int | None = None


# -- the backlog state and its transitions ------------------------------------------------


def classify(event: BacklogFinishEvent, source_id: str, pending: Mapping[Bucket, int],
             finishing: Mapping[Bucket, int]) -> EventOutcome:
    """What an event means for a source whose last committed batch carried ``finishing``
    buckets to their boundaries while ``pending`` ones are still below theirs."""
    if event.source_id != source_id:
        return EventOutcome.FOREIGN
    if finishing.get(event.bucket) == event.boundary_offset:
        return EventOutcome.HANDLED
    if pending.get(event.bucket) == event.boundary_offset:
        return EventOutcome.IMPLAUSIBLE  # no committed batch has read this bucket up to its boundary
    if event.bucket in pending or event.bucket in finishing:
        return EventOutcome.STALE  # a boundary of an earlier backlog phase
    return EventOutcome.DUPLICATE  # already finished: a retried task or a replayed batch


@dataclass(frozen=True)
class BacklogState:
    """The backlog part of an offset (:attr:`SourceOffset.backlog`; the offset dict's
    ``backlog`` object, under the same names): each bucket's boundary still below
    (``pending``) or reached by the batch (``finishing``), and how the control-topic
    messages read so far were treated (``event_counts``). Every transition returns a new
    state.

    * ``pending``: the boundary of each bucket still below it once the batch is read.
    * ``finishing``: the boundary of each bucket the batch carries to (or past) it; the
      bucket leaves backlog when the batch commits, and the next batch records why (its
      event, or the committed position). Splits of these buckets carry the boundary, so the
      reader that crosses it publishes the BacklogFinishEvent.
    """

    pending: dict[Bucket, int] = field(default_factory=dict)
    finishing: dict[Bucket, int] = field(default_factory=dict)
    event_counts: EventCounts = field(default_factory=EventCounts)

    @property
    def processing_backlog(self) -> bool:
        """True while some bucket is still below its boundary once the batch is read."""
        return bool(self.pending)

    @property
    def boundaries(self) -> dict[Bucket, int]:
        """Every boundary the batch's reads carry, each with an open bucket span: still
        pending or reached by this batch. A new dict per call: bind it once, never in a
        per-bucket loop (that is O(buckets^2))."""
        return {**self.finishing, **self.pending}

    def settle(
        self, messages: Iterable[bytes | None], source_id: str, committed: Mapping[Bucket, int]
    ) -> tuple["BacklogState", dict[Bucket, Finish]]:
        """The state once the batch that planned ``finishing`` has committed (``committed``
        are its end positions): finishing buckets leave, by event when one of ``messages``
        (control-topic values since the last settle) confirms them, else by position.

        A pending bucket whose committed position reached its boundary (an offset written
        by release 0.1.0, which planned no ``finishing``) leaves by position too.
        """
        counts = self.event_counts
        confirmed: dict[Bucket, int] = {}
        for value in messages:
            try:
                event = BacklogFinishEvent.decode(value)
            except MalformedEvent:
                counts = counts.add(EventOutcome.MALFORMED)
                continue
            outcome = classify(event, source_id, self.pending, self.finishing)
            if outcome is EventOutcome.HANDLED and event.bucket in confirmed:
                outcome = EventOutcome.DUPLICATE
            if outcome is EventOutcome.HANDLED:
                confirmed[event.bucket] = event.reached_offset
            counts = counts.add(outcome)
        finished: dict[Bucket, Finish] = {}
        for bucket in sorted(self.finishing):
            if bucket in confirmed:
                finished[bucket] = Finish(FinishedBy.EVENT, confirmed[bucket])
            else:
                finished[bucket] = Finish(FinishedBy.POSITION, committed.get(bucket))
                counts = counts.add(BY_POSITION)
        passed = sorted(b for b, boundary in self.pending.items() if committed.get(b, -1) >= boundary)
        for bucket in passed:
            finished[bucket] = Finish(FinishedBy.POSITION, committed[bucket])
            counts = counts.add(BY_POSITION)
        pending = {b: o for b, o in self.pending.items() if b not in finished}
        return BacklogState(pending, {}, counts), finished

    def without(self, buckets: Iterable[Bucket]) -> "BacklogState":
        """Buckets that vanished (or were reset) leave backlog."""
        gone = set(buckets)
        return replace(
            self,
            pending={b: o for b, o in self.pending.items() if b not in gone},
            finishing={b: o for b, o in self.finishing.items() if b not in gone},
        )

    def with_boundaries(self, boundaries: Mapping[Bucket, int]) -> "BacklogState":
        """Add boundaries for buckets not tracked yet (a recorded boundary never moves)."""
        tracked = self.boundaries  # a merge of two dicts: once, not per bucket
        return replace(self, pending={**{b: o for b, o in boundaries.items() if b not in tracked}, **self.pending})

    def plan(self, end: Mapping[Bucket, int]) -> "BacklogState":
        """The state once a batch ending at ``end`` is read: pending buckets whose end
        reaches the boundary are finishing."""
        reached = {b: o for b, o in self.pending.items() if end.get(b, -1) >= o}
        pending = {b: o for b, o in self.pending.items() if b not in reached}
        return replace(self, pending=pending, finishing={**self.finishing, **reached})


# -- the checkpointed offset --------------------------------------------------------------


@dataclass(frozen=True)
class SourceOffset:
    """One checkpointed offset of the source (the end of one micro-batch); immutable.

    * ``positions``: the next offset of each bucket once the batch has been read.
    * ``starts``: where the batch begins reading a bucket when that is not the previous
      batch's position: a bucket discovered in this batch (its earliest offset) or reset
      because its offsets moved backwards. ``partitions(start, end)`` reads
      ``[end.starts.get(b, start.positions[b]), end.positions[b])``.
    * ``backlog``: the backlog state once the batch is read (:class:`BacklogState`: the
      boundaries still ``pending`` and those this batch is ``finishing``, and the event
      counts).
    * ``events_position``: the next control-topic offset to read.
    * ``topic_ids``: the id (KIP-516) of each topic read, as Kafka described it when this
      batch was planned: a topic whose id has changed since was deleted and re-created,
      whatever its offsets say. Empty in offsets written before release 0.3.0.
    * ``plan``: how this batch was sized (:class:`BatchPlan`); None before release 0.3.0.
    * ``intervals``: the query's own trigger intervals for ``install`` (:class:`TriggerIntervals`),
      None when its options set none. Read by the driver program from progress events; never
      used for planning.
    """

    source_id: str
    positions: dict[Bucket, int]
    backlog: BacklogState = field(default_factory=BacklogState)
    starts: dict[Bucket, int] = field(default_factory=dict)
    events_position: int = 0
    trace: PhaseTrace | None = None
    snapshot: SnapshotState | None = None
    topic_ids: dict[str, str] = field(default_factory=dict)
    plan: BatchPlan | None = None
    intervals: TriggerIntervals | None = None

    @property
    def processing_backlog(self) -> bool:
        """True while some bucket is still below its boundary once this batch is read: the
        flag a progress event reports for the batch that has just committed."""
        return self.backlog.processing_backlog

    @property
    def boundaries(self) -> dict[Bucket, int]:
        """Every boundary this batch's reads carry: still pending or reached by this batch."""
        return self.backlog.boundaries

    @property
    def log_positions(self) -> dict[Bucket, int]:
        """The next offset of each bucket whose log this batch has reached: a bucket whose
        snapshot is still pending has read nothing of its log yet, so it is left out."""
        if self.snapshot is None or not self.snapshot.pending:
            return dict(self.positions)
        unread = self.snapshot.pending
        return {b: o for b, o in self.positions.items() if b not in unread}

    def read_start(self, previous: "SourceOffset", bucket: Bucket) -> int | None:
        """Where this batch begins reading ``bucket``, given the previous batch's end; None
        for a bucket this batch does not read."""
        if bucket in self.starts:
            return self.starts[bucket]
        return previous.positions.get(bucket)

    def reads_since(self, start: "SourceOffset") -> BatchReads:
        """What the batch from ``start`` to this offset reads (for ``partitions(start,
        end)``). Spark always takes the end from its offset log; the start of a query's first
        batch comes from a fresh ``initialOffset`` call instead, so the source id, boundaries,
        trace and the starts of new or reset buckets are taken from this offset. A bucket
        whose snapshot was pending at ``start`` and is not here reads it in this batch; its
        log range starts at the snapshot's log offset."""
        read_from = {b: o for b in self.positions if (o := self.read_start(start, b)) is not None}
        traceparents = {b: t for b in self.positions if (t := bucket_traceparent(self.trace, b)) is not None}
        snapshots: tuple[SnapshotRead, ...] = ()
        if start.snapshot is not None:
            read_after = self.snapshot.pending if self.snapshot is not None else {}
            snapshots = tuple(SnapshotRead(bucket, start.snapshot.root, files, start.positions[bucket])
                              for bucket, files in sorted(start.snapshot.pending.items()) if bucket not in read_after)
            traceparents.update({s.bucket: t for s in snapshots if (t := bucket_traceparent(self.trace, s.bucket))})
        offsets = sum(self.positions[b] - read_from[b] for b in read_from)
        per_offset = self.plan.bytes / offsets if self.plan is not None and self.plan.bytes and offsets > 0 else None
        return BatchReads(self.source_id, read_from, dict(self.positions), self.boundaries, traceparents, snapshots,
                          per_offset)
