"""How a bucket left backlog: the one vocabulary for it.

Which process: the driver's planner worker decides it (``enumerator/boundaries.py``); the
offset dict counts the position fallback (``finished_by_position``) and the bucket span
carries it as ``backlog.finished_by`` (the member's value).
"""

from __future__ import annotations

from dataclasses import dataclass

from backlog_source.core.text_enum import TextEnum


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
