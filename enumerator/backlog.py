"""Backlog tracking: boundaries per bucket, finished by events or by committed position.

Pure: no Kafka, no clock. The state lives in the offset dict (``backlog``,
``events_position``, ``event_counts``), so a query restored mid-backlog has exactly the
boundaries it recorded, and this module only computes the next state from the last.

Rules (after Fluss #2509 / FLIP-309, fixing the gaps of Fluss PR #2510):

* A bucket's boundary is its log end offset when its first split is created (query start,
  or discovery). A bucket whose boundary <= its start offset has no backlog: it is never
  pending and no event is expected.
* A recorded boundary never moves. A bucket leaves the pending set when a
  BacklogFinishEvent for exactly that boundary arrives, when its committed position
  reached the boundary (the safety net for a lost event), or when it disappears.
* Re-entry (FLIP-328 style): once nothing is pending, a total lag above ``reenter_lag``
  records fresh boundaries; leaving again requires passing those, so the flag cannot flap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from backlog_source.buckets import Bucket
from backlog_source.errors import OffsetFormatError
from enumerator.planner import lag
from events.model import BacklogFinishEvent

#: Outcomes of one control-topic message, counted in ``EventCounts``.
HANDLED, DUPLICATE, FOREIGN, STALE, MALFORMED = "handled", "duplicate", "foreign", "stale", "malformed"
#: A bucket finished by the safety net rather than by its event.
BY_POSITION = "finished_by_position"
COUNT_KINDS = (HANDLED, DUPLICATE, FOREIGN, STALE, MALFORMED, BY_POSITION)


@dataclass(frozen=True)
class EventCounts:
    """How the control-topic messages read so far were treated (checkpointed with them)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int = 1) -> "EventCounts":
        return EventCounts({**self.counts, kind: self.counts.get(kind, 0) + n})

    def __getitem__(self, kind: str) -> int:
        return self.counts.get(kind, 0)

    def to_json(self) -> dict[str, int]:
        return {kind: self.counts.get(kind, 0) for kind in COUNT_KINDS}

    @classmethod
    def from_json(cls, data: Any) -> "EventCounts":
        if data is None:
            return cls()
        if not isinstance(data, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in data.values()
        ):
            raise OffsetFormatError("offset field 'event_counts' must map kinds to counts >= 0")
        return cls({k: v for k, v in data.items() if k in COUNT_KINDS and v})


def record_boundaries(start: Mapping[Bucket, int], log_end: Mapping[Bucket, int], buckets: Iterable[Bucket]) -> dict[Bucket, int]:
    """Boundaries of ``buckets``: their log end, for those with records beyond ``start``."""
    return {b: log_end[b] for b in buckets if b in log_end and log_end[b] > start[b]}


def classify(event: BacklogFinishEvent, source_id: str, pending: Mapping[Bucket, int]) -> str:
    """What an event means for a source with ``pending`` boundaries."""
    if event.source_id != source_id:
        return FOREIGN
    boundary = pending.get(event.bucket)
    if boundary is None:
        return DUPLICATE  # already finished (or never pending): a retry or a replay
    if event.boundary_offset == boundary:
        return HANDLED
    return STALE  # a boundary of an earlier backlog phase


@dataclass(frozen=True)
class BacklogState:
    """Pending boundaries and event bookkeeping; every transition returns a new state."""

    pending: dict[Bucket, int]
    counts: EventCounts = field(default_factory=EventCounts)

    @property
    def processing_backlog(self) -> bool:
        return bool(self.pending)

    def on_message(self, value: bytes | None, source_id: str) -> tuple["BacklogState", str, BacklogFinishEvent | None]:
        """Apply one control-topic message; returns the new state, its outcome and the event."""
        from events.model import MalformedEvent

        try:
            event = BacklogFinishEvent.decode(value)
        except MalformedEvent:
            return replace(self, counts=self.counts.add(MALFORMED)), MALFORMED, None
        outcome = classify(event, source_id, self.pending)
        pending = self.pending
        if outcome == HANDLED:
            pending = {b: o for b, o in pending.items() if b != event.bucket}
        return BacklogState(pending, self.counts.add(outcome)), outcome, event

    def finish_passed(self, committed: Mapping[Bucket, int]) -> tuple["BacklogState", list[Bucket]]:
        """The safety net: finish buckets whose committed position reached their boundary."""
        passed = sorted(b for b, boundary in self.pending.items() if committed.get(b, -1) >= boundary)
        if not passed:
            return self, []
        pending = {b: o for b, o in self.pending.items() if b not in passed}
        return BacklogState(pending, self.counts.add(BY_POSITION, len(passed))), passed

    def without(self, buckets: Iterable[Bucket]) -> "BacklogState":
        """Buckets that vanished (or were reset) leave the pending set."""
        gone = set(buckets)
        return replace(self, pending={b: o for b, o in self.pending.items() if b not in gone})

    def with_boundaries(self, boundaries: Mapping[Bucket, int]) -> "BacklogState":
        """Add boundaries for buckets not pending yet (a recorded boundary never moves)."""
        return replace(self, pending={**boundaries, **self.pending})

    def maybe_reenter(
        self, positions: Mapping[Bucket, int], log_end: Mapping[Bucket, int], reenter_lag: int | None
    ) -> "BacklogState":
        """Enter backlog again when nothing is pending and the total lag exceeds ``reenter_lag``."""
        if reenter_lag is None or self.pending:
            return self
        if sum(lag(positions, log_end).values()) <= reenter_lag:
            return self
        return replace(self, pending=record_boundaries(positions, log_end, positions))
