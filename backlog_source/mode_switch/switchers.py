"""The two ways to change a running query's trigger interval, and which one a query gets.

Which process: the user's driver program (the controller thread).

* :class:`InPlaceSwitcher` (``"in-place"``): classic PySpark only. The running query's
  trigger executor (``StreamExecution.triggerExecutor()``, a ``ProcessingTimeExecutor`` in
  Spark 4.x) holds its interval in the private final field ``intervalMs``; setting it by
  reflection (and reading it back) changes the cadence from the next trigger on: same query,
  same run, no stop, no interrupted batch, no replay (FLIP-309 does the same to a running
  Flink job's checkpoint interval). The executor computes the next trigger time before it
  runs a batch, so a switch to a shorter interval takes effect when the wait already
  scheduled with the old interval ends (at most one low-latency interval); a switch to a
  longer one, at the next trigger.
* :class:`RestartSwitcher` (``"restart"``): stops the query after its running trigger and
  starts it again on the same checkpoint with the other trigger. Used when in place is
  impossible: Spark Connect (no JVM objects in the client), a Spark whose classes or fields
  differ, a trigger that is not a processing-time one, or reflection refused.

:func:`choose_switcher` decides once, when the handle starts, and says why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from backlog_core.errors import ModeSwitchError

log = logging.getLogger(__name__)

IN_PLACE = "in-place"
RESTART = "restart"
#: The class and field the in-place switch relies on (Spark 4.x).
EXECUTOR_CLASS = "ProcessingTimeExecutor"
INTERVAL_FIELD = "intervalMs"
#: How long to wait for the stream thread to create its trigger executor after start().
EXECUTOR_WAIT_S = 30.0


class TriggerSwitcher(Protocol):
    """Changes the trigger interval of the query it was made for."""

    method: str

    def switch(self, interval_ms: int) -> Any:
        """Apply ``interval_ms``; returns the query now running (the same one in place)."""


class InPlaceSwitcher:
    """Writes the running ``ProcessingTimeExecutor``'s ``intervalMs`` (see the module docstring)."""

    method = IN_PLACE

    def __init__(self, query: Any, executor: Any, field: Any) -> None:
        self.query = query
        self._executor = executor
        self._field = field

    @classmethod
    def attach(cls, query: Any, interval_ms: int, *, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> "InPlaceSwitcher":
        """The switcher of ``query``'s trigger executor, checked: its class, its field, the
        field holding ``interval_ms`` now, and a write read back. Raises
        :class:`ModeSwitchError` saying which check failed."""
        streaming_query = _java_query(query)
        deadline = clock() + EXECUTOR_WAIT_S
        executor = streaming_query.triggerExecutor()
        while executor is None:  # the stream thread creates it as it starts
            if clock() >= deadline:
                raise ModeSwitchError(f"the query's trigger executor did not appear within {EXECUTOR_WAIT_S:.0f} s")
            sleep(0.01)
            executor = streaming_query.triggerExecutor()
        name = str(executor.getClass().getName())
        if not name.endswith("." + EXECUTOR_CLASS):
            raise ModeSwitchError(f"the trigger executor is a {name}, not a {EXECUTOR_CLASS}")
        try:
            field = executor.getClass().getDeclaredField(INTERVAL_FIELD)
            field.setAccessible(True)
            current = int(field.getLong(executor))
        except Exception as exc:  # py4j wraps NoSuchFieldException, InaccessibleObjectException...
            raise ModeSwitchError(f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} is not reachable: {_first_line(exc)}") from None
        if current != interval_ms:
            raise ModeSwitchError(f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} holds {current} ms, not the trigger's {interval_ms} ms")
        switcher = cls(query, executor, field)
        switcher.switch(interval_ms)  # a write that must read back, before any switch depends on it
        return switcher

    def switch(self, interval_ms: int) -> Any:
        try:
            self._field.setLong(self._executor, interval_ms)
            now = int(self._field.getLong(self._executor))
        except Exception as exc:
            raise ModeSwitchError(f"could not set {EXECUTOR_CLASS}.{INTERVAL_FIELD}: {_first_line(exc)}") from None
        if now != interval_ms:
            raise ModeSwitchError(f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} reads {now} ms after writing {interval_ms} ms")
        return self.query


class RestartSwitcher:
    """Stops the query (after its running trigger, within ``settle_timeout_s``) and starts
    it again on the same checkpoint with the new trigger. Spark replays an interrupted batch
    with the same offsets, so file sinks and ``foreachBatch`` functions idempotent per
    ``batch_id`` stay exactly-once."""

    method = RESTART

    def __init__(self, query: Any, start: Callable[[int], Any], *, still_needed: Callable[[Any], bool] | None = None,
                 settle_timeout_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.query = query
        self._start = start
        self._still_needed = still_needed
        self._settle_timeout_s = settle_timeout_s
        self._clock = clock
        self._sleep = sleep

    def switch(self, interval_ms: int) -> Any:
        """Stop and start again; ``start`` (the controller's) may pick another interval from
        the stopped run's last batch. No stop at all when ``still_needed`` says the batches
        committed while waiting made the switch pointless."""
        self._wait_for_trigger_end()
        if self._still_needed is not None and not self._still_needed(self.query):
            return self.query
        self.query.stop()
        self.query = self._start(interval_ms)
        return self.query

    def _wait_for_trigger_end(self) -> None:
        """Return when the running trigger is idle, when the batch running at the call has
        committed, or after the settle timeout.

        With back-to-back batches (a ``0 seconds`` interval) the trigger is never seen idle:
        waiting for idle alone made every such switch wait the whole timeout (measured: 5 s
        of a 5.1 s switch). Right after a batch commits the next one is at most planning,
        and a stop there replays little (a stop mid-batch is replayed with the same offsets).
        """
        deadline = self._clock() + self._settle_timeout_s
        running = _last_batch_id(self.query)
        while self._clock() < deadline:
            try:
                if not self.query.status.get("isTriggerActive", False):
                    return
            except Exception:  # the query may have failed meanwhile
                return
            if _last_batch_id(self.query) != running:
                return
            self._sleep(0.01)


def choose_switcher(query: Any, interval_ms: int, restart: Callable[[], "RestartSwitcher"], *,
                    force_restart: bool = False) -> tuple[TriggerSwitcher, str]:
    """The switcher for ``query`` (started with ``interval_ms``) and why it was chosen;
    ``restart`` builds the fallback."""
    if force_restart:
        return restart(), "the restart method was asked for"
    if getattr(query, "_jsq", None) is None:
        return restart(), "a Spark Connect query has no JVM objects in this process to change in place"
    try:
        return InPlaceSwitcher.attach(query, interval_ms), (
            f"the running {EXECUTOR_CLASS}'s {INTERVAL_FIELD} can be changed and reads back")
    except ModeSwitchError as exc:
        return restart(), f"in place is impossible: {exc}"


def last_progress(query: Any) -> Any:
    """``query.lastProgress``, or None when there is none yet or the query object is
    unusable after a failure."""
    try:
        return query.lastProgress
    except Exception:  # the query object may be unusable after a failure
        return None


def _last_batch_id(query: Any) -> int | None:
    """The id of the query's last committed batch, or None (none yet, or unreadable)."""
    progress = last_progress(query)
    return None if progress is None else progress.get("batchId")


def _java_query(query: Any) -> Any:
    try:
        return query._jsq.streamingQuery()
    except Exception as exc:
        raise ModeSwitchError(f"the query's JVM object is not reachable: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
