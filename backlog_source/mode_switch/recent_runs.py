"""What the mode switch remembers about runs it no longer follows: :class:`RecentRuns`, and
the one rule for a replaced run, :class:`ReplacedRuns`.

Which process: the user's driver program (the installation's thread, a handle's controller
thread, and the session's listener thread for the metrics).
"""

from __future__ import annotations

import threading
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


class ReplacedRuns:
    """The runs a restart-method switch stopped and replaced by a new run of the same query
    (the newest :data:`RECENT_RUNS`). The rule, for every receiver of the session's
    messages: a message of a replaced run is late, and is ignored; its query runs on in the
    new run. Thread-safe: runs are added on the switching thread and looked up on the
    listener's."""

    def __init__(self, limit: int = RECENT_RUNS) -> None:
        self._lock = threading.Lock()
        self._runs: RecentRuns[None] = RecentRuns(limit)

    def add(self, run_id: str) -> None:
        """``run_id`` was replaced by a restart-method switch."""
        with self._lock:
            self._runs[run_id] = None

    def __contains__(self, run_id: object) -> bool:
        """Whether ``run_id`` was replaced: its messages are late."""
        with self._lock:
            return run_id in self._runs
