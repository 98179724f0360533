"""Backlog boundaries: when a bucket enters backlog, reaches its boundary and leaves it.

Pure: no Kafka, no clock. The state lives in the offset (``SourceOffset.backlog``, the
offset dict's ``backlog`` object), so a query restored mid-backlog has exactly the
boundaries it recorded; this module only computes the next state from the last.

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

from backlog_source.core.buckets import Bucket
from backlog_source.enumerator.state import BacklogState
from backlog_source.split.planning import lag


def record_boundaries(start: Mapping[Bucket, int], log_end: Mapping[Bucket, int], buckets: Iterable[Bucket]) -> dict[Bucket, int]:
    """Boundaries of ``buckets``: their log end, for those with records beyond ``start``."""
    return {b: log_end[b] for b in buckets if b in log_end and b in start and log_end[b] > start[b]}


def restart_boundaries(backlog: BacklogState, positions: Mapping[Bucket, int], log_end: Mapping[Bucket, int]) -> dict[Bucket, int]:
    """A restart on an existing checkpoint is a new backlog phase: every bucket behind its
    log end, however little, and not tracked already gets its log end as boundary. A lag
    that the first batch reads completely is a phase of that one batch."""
    tracked = backlog.boundaries  # a merge of two dicts: once, not per bucket
    return {b: o for b, o in record_boundaries(positions, log_end, positions).items() if b not in tracked}


def reentry_boundaries(
    backlog: BacklogState,
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
    if reenter_lag is None or backlog.boundaries or one_batch_records is None:
        return {}
    total = sum(lag(positions, log_end).values())
    if total <= max(reenter_lag, one_batch_records):
        return {}
    return record_boundaries(positions, log_end, positions)
