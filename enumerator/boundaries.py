"""Backlog boundaries: when a bucket enters backlog, reaches its boundary and leaves it.

Pure: no Kafka, no clock. The state lives in the offset dict (``backlog``, ``finishing``,
``event_counts``), so a query restored mid-backlog has exactly the boundaries it recorded;
this module only computes the next state from the last.

Rules (after Fluss #2509 / FLIP-309, without the gaps of Fluss PR #2510):

* A bucket's boundary is its log end offset when it enters backlog: at a query's first
  start, at every restart on an existing checkpoint (:func:`restart_boundaries`), when the
  bucket is discovered or reset, and on re-entry. A bucket with nothing beyond its start
  gets none. A recorded boundary never moves while it is pending.
* When the driver plans a batch whose end position of a bucket reaches its boundary, the
  bucket is *finishing* (:meth:`BacklogState.plan`): ``processing_backlog`` of that batch's
  offset already says whether anything is left, so the switch needs no extra batch.
* Once that batch has committed, the next plan settles it (:meth:`BacklogState.settle`):
  the bucket leaves backlog, finished by its BacklogFinishEvent if one arrived, else by the
  committed position (the event was lost or is late). The driver trusts the broker and its
  own plan, not the control topic: an event for a bucket no planned batch has carried to
  that boundary is counted ``implausible`` and changes nothing.
* Re-entry is a hysteresis: enter when the total lag exceeds ``backlog.reenterLag`` (the
  high-water mark) and is more than one batch reads in either mode (the smaller of
  ``maxOffsetsPerTrigger`` and ``backlog.maxOffsetsPerTrigger``), so a burst the next batch
  absorbs anyway is never backlog and costs no switch; leave at the boundaries recorded on
  entry (the log end then). Entering again needs the high-water mark again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import MalformedEvent
from backlog_source.core.finish import Finish, FinishedBy
from backlog_source.core.state import BY_POSITION, EventCounts, EventOutcome
from backlog_source.enumerator.planner import lag
from backlog_source.events.finish_event import BacklogFinishEvent


def record_boundaries(start: Mapping[Bucket, int], log_end: Mapping[Bucket, int], buckets: Iterable[Bucket]) -> dict[Bucket, int]:
    """Boundaries of ``buckets``: their log end, for those with records beyond ``start``."""
    return {b: log_end[b] for b in buckets if b in log_end and b in start and log_end[b] > start[b]}


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
    """Boundaries still below (``pending``) and reached by the last planned batch
    (``finishing``), with the event bookkeeping; every transition returns a new state."""

    pending: dict[Bucket, int] = field(default_factory=dict)
    finishing: dict[Bucket, int] = field(default_factory=dict)
    counts: EventCounts = field(default_factory=EventCounts)

    @property
    def processing_backlog(self) -> bool:
        return bool(self.pending)

    @property
    def tracked(self) -> dict[Bucket, int]:
        """Every boundary with an open bucket span: pending or finishing."""
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
        counts = self.counts
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
        return replace(self, pending={**{b: o for b, o in boundaries.items() if b not in self.tracked}, **self.pending})

    def plan(self, end: Mapping[Bucket, int]) -> "BacklogState":
        """The state once a batch ending at ``end`` is read: pending buckets whose end
        reaches the boundary are finishing."""
        reached = {b: o for b, o in self.pending.items() if end.get(b, -1) >= o}
        pending = {b: o for b, o in self.pending.items() if b not in reached}
        return replace(self, pending=pending, finishing={**self.finishing, **reached})


def restart_boundaries(state: BacklogState, positions: Mapping[Bucket, int], log_end: Mapping[Bucket, int]) -> dict[Bucket, int]:
    """A restart on an existing checkpoint is a new backlog phase: every bucket behind its
    log end, however little, and not tracked already gets its log end as boundary. A lag
    that the first batch reads completely is a phase of that one batch."""
    return {b: o for b, o in record_boundaries(positions, log_end, positions).items() if b not in state.tracked}


def reentry_boundaries(
    state: BacklogState,
    positions: Mapping[Bucket, int],
    log_end: Mapping[Bucket, int],
    reenter_lag: int | None,
    one_batch_records: int | None,
) -> dict[Bucket, int]:
    """Boundaries for entering backlog again after catch-up, or none.

    Enter only when nothing is tracked, the total lag exceeds ``reenter_lag`` and it is more
    than one batch reads in either mode (``one_batch_records``; None: a batch reads
    everything in both modes, so a lag is always absorbed and re-entry could change nothing
    but the trigger interval).
    """
    if reenter_lag is None or state.tracked or one_batch_records is None:
        return {}
    total = sum(lag(positions, log_end).values())
    if total <= max(reenter_lag, one_batch_records):
        return {}
    return record_boundaries(positions, log_end, positions)
