""":class:`RecentRuns`: what the mode switch remembers about runs it no longer follows.

Which process: the user's driver program (the installation's thread).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

V = TypeVar("V")

#: Runs remembered. A late event of a run arrives within moments of that run's end (Spark's
#: listener bus delivers in order, behind at most the events queued then); a job would need
#: this many newer runs in between for one to be forgotten too early.
RECENT_RUNS = 1_024


class RecentRuns(OrderedDict[str, V]):
    """Run id -> a value, holding the newest ``limit`` run ids only, so a job that restarts
    or starts queries for weeks does not grow it (one entry per run otherwise)."""

    def __init__(self, limit: int = RECENT_RUNS) -> None:
        super().__init__()
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit

    def __setitem__(self, run_id: str, value: V) -> None:
        super().__setitem__(run_id, value)
        self.move_to_end(run_id)
        while len(self) > self.limit:
            self.popitem(last=False)
