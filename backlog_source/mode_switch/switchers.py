"""The two ways to change a running query's trigger interval, and which one a query gets.

Which process: the user's driver program (the controller thread).

Both behind one protocol, :class:`TriggerSwitcher`.

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

Which one a query gets is decided by :class:`~backlog_source.mode_switch.policy.SwitchPolicy`
when the handle starts; where the running query's executor then fails the in-place checks
(not seen on Spark 4.x), the policy says whether the controller switches by restart from
then on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from backlog_source.core.errors import ModeSwitchError
from backlog_source.core.text_enum import TextEnum
from backlog_source.mode_switch.listener import Mode, mode_called_for

log = logging.getLogger(__name__)


class SwitchMethod(TextEnum):
    """How a switch is made; the value is what transitions, logs and span attributes say."""

    IN_PLACE = "in-place"
    RESTART = "restart"


#: The class and field the in-place switch relies on (Spark 4.x).
EXECUTOR_CLASS = "ProcessingTimeExecutor"
INTERVAL_FIELD = "intervalMs"
#: What to do when the JVM refuses to write the final field. JDK 26 warns on such writes
#: and a later JDK refuses them by default (JEP 500, "Prepare to Make Final Mean Final");
#: py4j's reflection comes from Spark's classpath, the unnamed module.
FINAL_FIELD_HINT = (
    "the JVM refuses to change a final field (JEP 500); to keep switching in place, start the driver JVM with "
    "--enable-final-field-mutation=ALL-UNNAMED (e.g. spark.driver.extraJavaOptions)"
)
#: How long to wait for the stream thread to create its trigger executor after start().
EXECUTOR_WAIT_S = 30.0


@dataclass(frozen=True)
class Switched:
    """What a switch did: ``query`` is the query running now (the same one in place), and
    ``mode`` the mode whose interval it runs with, or None when nothing was changed (the
    batches committed meanwhile flipped the flag back)."""

    query: Any
    mode: Mode | None


class TriggerSwitcher(Protocol):
    """Changes the trigger interval of the query it was made for between the two modes'
    intervals (``intervals_ms``, given when it is made). The controller calls :meth:`attach`
    once, on its own thread, before the first :meth:`switch`."""

    method: SwitchMethod

    def attach(self, current: Mode, *, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Get ready to switch the running query, which runs in ``current`` mode now. False
        when the query ended or ``cancelled()`` first. Raises :class:`ModeSwitchError` when
        this switcher cannot work on the running query."""

    def switch(self, to: Mode) -> Switched:
        """Apply ``to``'s interval, or the mode the query's last batch calls for by then."""


class InPlaceSwitcher:
    """Writes the running ``ProcessingTimeExecutor``'s ``intervalMs`` (see the module docstring).

    Made in two steps so that starting a query never waits for it: :meth:`prepare`, at
    start, checks in a few milliseconds what does not depend on the running query (the
    class next to the query's ``StreamExecution``, its field, reflection allowed);
    :meth:`attach`, on the controller thread, waits for the query's executor (the stream
    thread creates it when the query's plan is ready, about a second after ``start()``)
    and checks it. :meth:`switch` works once attached.
    """

    method = SwitchMethod.IN_PLACE

    def __init__(self, query: Any, intervals_ms: Mapping[Mode, int], field: Any, executor_class: str) -> None:
        self.query = query
        self._intervals_ms = dict(intervals_ms)
        self._field = field
        self._executor_class = executor_class
        self._executor: Any = None

    @classmethod
    def prepare(cls, query: Any, intervals_ms: Mapping[Mode, int]) -> "InPlaceSwitcher":
        """The switcher of ``query``, not attached yet. Raises :class:`ModeSwitchError`
        saying which check failed: no ``ProcessingTimeExecutor`` class in the package of the
        query's ``StreamExecution`` (where Spark 4.x keeps it), no ``long intervalMs`` field,
        or reflection refused."""
        execution_class = _java_query(query).getClass()
        try:
            package = str(execution_class.getPackage().getName())
            executor_class = execution_class.getClassLoader().loadClass(f"{package}.{EXECUTOR_CLASS}")
        except Exception as exc:  # process boundary: py4j into the JVM (a Java exception arrives as py4j's)
            raise ModeSwitchError(f"no {EXECUTOR_CLASS} class beside {execution_class.getName()}: "
                                  f"{_first_line(exc)}") from None
        try:
            field = executor_class.getDeclaredField(INTERVAL_FIELD)
            field.setAccessible(True)
            kind = str(field.getType().getName())
        except Exception as exc:  # process boundary: py4j into the JVM (a Java exception arrives as py4j's)
            raise ModeSwitchError(f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} is not reachable: {_first_line(exc)}") from None
        if kind != "long":
            raise ModeSwitchError(f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} is a {kind}, not a long")
        return cls(query, intervals_ms, field, str(executor_class.getName()))

    def attach(self, current: Mode, *, cancelled: Callable[[], bool] = lambda: False,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Wait for the query's trigger executor and check it: the prepared class, its field
        holding ``current``'s interval (the trigger the query started with), and a write read back.
        Returns False, attaching nothing, when the query ended or ``cancelled()`` (the handle
        is stopping) before the executor appeared. Raises :class:`ModeSwitchError` saying
        which check failed, or that the executor did not appear within 30 s."""
        interval_ms = self._intervals_ms[current]
        held_ms = self.adopt(cancelled=cancelled, clock=clock, sleep=sleep)
        if held_ms is None:
            return False
        if held_ms != interval_ms:
            self._executor = None
            raise ModeSwitchError(f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} holds {held_ms} ms, not the trigger's {interval_ms} ms")
        self.switch(current)  # a write that must read back, before any switch depends on it
        return True

    def adopt(self, *, cancelled: Callable[[], bool] = lambda: False,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> int | None:
        """Attach to the query's trigger executor whatever interval it holds (a query the user
        started with a trigger of their own: ``install``); returns that interval in ms, or
        None when the query ended or ``cancelled()`` before the executor appeared. Raises
        :class:`ModeSwitchError` as :meth:`attach` does (a query with another trigger, such
        as ``availableNow``, has another executor class)."""
        streaming_query = _java_query(self.query)
        deadline = clock() + EXECUTOR_WAIT_S
        executor = streaming_query.triggerExecutor()
        while executor is None:
            if cancelled() or not streaming_query.isActive():
                return None
            if clock() >= deadline:
                raise ModeSwitchError(f"the query's trigger executor did not appear within {EXECUTOR_WAIT_S:.0f} s")
            sleep(0.01)
            executor = streaming_query.triggerExecutor()
        name = str(executor.getClass().getName())
        if name != self._executor_class:
            raise ModeSwitchError(f"the trigger executor is a {name}, not a {EXECUTOR_CLASS}")
        try:
            held_ms = int(self._field.getLong(executor))
        except Exception as exc:  # process boundary: py4j into the JVM (a Java exception arrives as py4j's)
            raise ModeSwitchError(f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} cannot be read: {_first_line(exc)}") from None
        self._executor = executor
        return held_ms

    def switch(self, to: Mode) -> Switched:
        """Write ``to``'s interval and read it back; in effect from the next trigger."""
        interval_ms = self._intervals_ms[to]
        if self._executor is None:
            raise ModeSwitchError("the in-place switcher is not attached to the query's trigger executor")
        try:
            self._field.setLong(self._executor, interval_ms)
            now = int(self._field.getLong(self._executor))
        except Exception as exc:  # process boundary: py4j into the JVM (a Java exception arrives as py4j's)
            problem = _first_line(exc)
            if "IllegalAccessException" in problem or "final" in problem.lower():
                problem = f"{problem}; {FINAL_FIELD_HINT}"
            raise ModeSwitchError(f"could not set {EXECUTOR_CLASS}.{INTERVAL_FIELD}: {problem}") from None
        if now != interval_ms:
            raise ModeSwitchError(f"{EXECUTOR_CLASS}.{INTERVAL_FIELD} reads {now} ms after writing {interval_ms} ms")
        return Switched(self.query, to)


class RunSwap(Protocol):
    """How a restart-method switch replaces a query's running run by the next one, on the
    switching thread."""

    def replace(self, running: Any, start_next: Callable[[], Any]) -> Any | None:
        """Stop ``running``, then return the run ``start_next()`` started. None when the
        query's user stopped it before or meanwhile: then no run of it is left active when
        this returns (nothing was stopped or started, or the run started was stopped again)."""


class StopThenStart:
    """The :class:`RunSwap` that sees no stop but its own: ``running.stop()``, then
    ``start_next()``. Enough where the user stops the query through the owner of the switch
    (a ``start_backlog_aware`` handle queues its stop between two switches)."""

    def replace(self, running: Any, start_next: Callable[[], Any]) -> Any | None:
        running.stop()
        return start_next()


class RestartSwitcher:
    """Stops the query (after its running trigger, within ``settle_timeout_s``) and starts
    it again on the same checkpoint with the new trigger: ``start(interval_ms)`` starts the
    writer and returns the new query. Spark replays an interrupted batch with the same
    offsets, so file sinks and ``foreachBatch`` functions idempotent per ``batch_id`` stay
    exactly-once.

    ``swap`` stops the old run and starts the new one (:class:`StopThenStart` by default;
    ``install`` under Spark Connect passes one that sees the user's stops, so that a stop
    wins over a switch in flight). ``cancelled()`` true (the installation is ending) makes a
    switch that has stopped nothing yet give up."""

    method = SwitchMethod.RESTART

    def __init__(self, query: Any, intervals_ms: Mapping[Mode, int], start: Callable[[int], Any], *,
                 swap: RunSwap | None = None, cancelled: Callable[[], bool] = lambda: False,
                 settle_timeout_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.query = query
        self._intervals_ms = dict(intervals_ms)
        self._start = start
        self._swap = swap or StopThenStart()
        self._cancelled = cancelled
        self._settle_timeout_s = settle_timeout_s
        self._clock = clock
        self._sleep = sleep

    def attach(self, current: Mode, *, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Nothing to get ready: a restart needs only the query's checkpoint."""
        return True

    def switch(self, to: Mode) -> Switched:
        """Stop and start again, in the mode the stopped run's last committed batch calls
        for (the new run starts from that batch and may never report again if no new data
        comes), ``to`` when it calls for none. No stop at all when the batches committed
        while waiting for the running trigger flipped the flag back, or when ``cancelled()``;
        and no start when the query is no longer active or its user stopped it (never
        started again): ``Switched(query, None)`` then."""
        self._wait_for_trigger_end()
        if self._cancelled() or not _is_active(self.query):
            return Switched(self.query, None)
        called_for = mode_called_for(last_progress(self.query))
        if called_for is not None and called_for is not to:
            return Switched(self.query, None)
        started_in: list[Mode] = []

        def start_next() -> Any:
            # The stopped run's last batch: one may have committed during the stop.
            mode = mode_called_for(last_progress(self.query)) or to
            started_in.append(mode)
            return self._start(self._intervals_ms[mode])

        new = self._swap.replace(self.query, start_next)
        if new is None:
            return Switched(self.query, None)
        self.query = new
        return Switched(new, started_in[-1])

    def _wait_for_trigger_end(self) -> None:
        """Return when the running trigger is idle, when the batch running at the call has
        committed, or after the settle timeout.

        With back-to-back batches (a ``0 seconds`` interval) the trigger is never seen idle:
        waiting for idle alone would make every such switch wait the whole timeout. Right after a batch commits the next one is at most planning,
        and a stop there replays little (a stop mid-batch is replayed with the same offsets).
        """
        deadline = self._clock() + self._settle_timeout_s
        running = _last_batch_id(self.query)
        while self._clock() < deadline and not self._cancelled():
            try:
                if not self.query.status.get("isTriggerActive", False):
                    return
            except Exception:  # process boundary: the query may have failed meanwhile
                return
            if _last_batch_id(self.query) != running:
                return
            self._sleep(0.01)


def last_progress(query: Any) -> Any:
    """``query.lastProgress``, or None when there is none yet or the query object is
    unusable after a failure."""
    try:
        return query.lastProgress
    except Exception:  # process boundary: the query object (py4j or Spark Connect) may be unusable after a failure
        return None


def _is_active(query: Any) -> bool:
    try:
        return bool(query.isActive)
    except Exception:  # process boundary: the query object (py4j or Spark Connect) may be unusable after a failure
        return False


def _last_batch_id(query: Any) -> int | None:
    """The id of the query's last committed batch, or None (none yet, or unreadable)."""
    progress = last_progress(query)
    return None if progress is None else progress.get("batchId")


def _java_query(query: Any) -> Any:
    try:
        return query._jsq.streamingQuery()
    except Exception as exc:  # process boundary: py4j, or no JVM object (Spark Connect)
        raise ModeSwitchError(f"the query's JVM object is not reachable: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
