"""``install``: one call at job bootstrap, and every backlog query of the session switches its
trigger with the backlog, however it was started.

The design card registers the listener in the job's bootstrap: a job with several queries,
or one whose queries a framework starts with the plain ``writeStream...trigger(processingTime
=...).start()``, says once which intervals it wants. :func:`install` attaches one receiver,
:class:`SessionModeSwitch`, to the session's listener (:mod:`.session_listener`) for every
query of the session; the first progress event of a query that reads ``format("backlog")``
adopts it, whether it started before or after ``install``, and from then on its trigger
interval follows the ``processing_backlog`` flag, in place. Queries that read no
``format("backlog")`` source never produce such an event and are never touched; a query a
:func:`~backlog_source.mode_switch.start_backlog_aware` handle follows is left to it.

Which process: the user's driver program. The listener thread only queues messages; one
daemon thread per installation (``backlog-mode-install``) adopts queries; each adopted query
is switched by its :class:`~.query_switch.QuerySwitch`, the object a handle switches with too
(decision, switch, ``backlog.mode_switch`` span, observers).

In place where the runtime allows it. Spark Connect's client holds no JVM objects, so there a
query can only be switched by restart, and only when the user allowed it:
``install(spark, ..., allow_restart=True)`` keeps, from then on, a copy of the writer of each
backlog query the session starts (:mod:`.connect_starts`), and switches such a query by
stopping it after its running trigger and starting it again on its checkpoint (a new run
under the same id: ``spark.streams.get(query_id)`` returns it, also while the switch is
between the two runs). A user's ``stop()`` of any run of such a query wins over a switch in
flight: nothing is started after it (:mod:`.connect_starts`). A query that can be switched
neither way (started before ``install`` under Connect, restarts not allowed, a trigger other
than a processing-time one such as ``availableNow``, a memory sink in append or update
mode) is logged once and left as it runs; ``start_backlog_aware`` can switch it by restart.

Per-query intervals: a query's source may set ``backlog.highThroughputInterval`` /
``backlog.lowLatencyInterval``; the enumerator writes them into every offset dict it plans
(``intervals``), so they reach this process with each progress event, and
:meth:`SessionModeSwitch.intervals_for` prefers them to the installation's.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backlog_source.core.errors import ModeSwitchError
from backlog_source.core.tracing import exporter
from backlog_source.core.tracing.names import SwitchEndedBy
from backlog_source.mode_switch.connect_starts import ConnectStarts
from backlog_source.mode_switch.listener import BatchCommitted, Mode, QueryTerminated, TriggerIdle
from backlog_source.mode_switch.query_switch import QuerySwitch, SwitchObserver, Transition, mode_intervals
from backlog_source.mode_switch.recent_runs import RecentRuns, ReplacedRuns
from backlog_source.mode_switch.session_listener import Attachment, SessionListener
from backlog_source.mode_switch.session_metrics import switch_observers
from backlog_source.mode_switch.switchers import InPlaceSwitcher, RestartSwitcher, SwitchMethod, TriggerSwitcher

log = logging.getLogger(__name__)

#: How long :meth:`SessionModeSwitch.uninstall` waits for the installation's thread.
UNINSTALL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Adopted:
    """A query an installation switches: its run (a restart-method switch starts a new
    one), the interval it had when adopted, the mode it is in now, the intervals it switches
    between (the installation's, or its source's own), and how it is switched."""

    run_id: str
    started_interval_ms: int
    mode: Mode
    intervals_ms: Mapping[Mode, int] = field(default_factory=dict)
    method: SwitchMethod = SwitchMethod.IN_PLACE


class _Stop:
    """Ends the installation's thread."""


class _Replacements(SwitchObserver):
    """Records the runs the installation's restart-method switches replaced."""

    def __init__(self, replaced: ReplacedRuns) -> None:
        self._replaced = replaced

    def switched(self, switch: QuerySwitch, transition: Transition | None, replaced_run: str | None) -> None:
        if replaced_run is not None:
            self._replaced.add(replaced_run)


class SessionModeSwitch:
    """The receiver :func:`install` attaches for every query of a session (see the module
    docstring): it finds the session's backlog queries and hands each adopted query's
    messages to its :class:`~.query_switch.QuerySwitch` (as a ``start_backlog_aware``
    handle does). ``adopted`` and ``skipped`` may be read from any thread."""

    def __init__(self, spark: Any, intervals_ms: Mapping[Mode, int], *,
                 session_listener: SessionListener | None = None,
                 switcher_of: Callable[[Any, Mapping[Mode, int]], Any] = InPlaceSwitcher.prepare,
                 observers: Sequence[SwitchObserver] = (), restarts: ConnectStarts | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        """``session_listener``, ``switcher_of`` and ``clock`` (wall-clock seconds) are
        replaced by unit tests only; ``observers`` (the session's metrics) are told each
        adopted query's mode and each switch; ``restarts`` (None: in place only) knows how
        the queries it recorded were started, and they are switched by restart."""
        self._spark = spark
        self._restarts = restarts
        self._clock = clock
        self._replaced = ReplacedRuns()  # runs a restart-method switch stopped (late events ignored)
        self._observers = (_Replacements(self._replaced), *observers)
        self._intervals_ms = dict(intervals_ms)
        self._session_listener = session_listener or SessionListener.of(spark)
        self._switcher_of = switcher_of
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._lock = threading.Lock()
        self._switches: dict[str, tuple[QuerySwitch, int]] = {}  # query id -> its switch, the interval adopted with
        self._skipped: RecentRuns[str] = RecentRuns()  # run id -> why that run is left as it runs
        self._attachment: Attachment | None = None
        self._closing = threading.Event()  # uninstall(): no switch begins, one in its settle wait gives up
        self._thread = threading.Thread(target=self._run, name="backlog-mode-install", daemon=True)

    @property
    def adopted(self) -> dict[str, Adopted]:
        with self._lock:
            switches = dict(self._switches)
        return {query_id: Adopted(switch.run_id, started_ms, switch.mode, dict(switch.intervals_ms), switch.method)
                for query_id, (switch, started_ms) in switches.items()}

    @property
    def skipped(self) -> dict[str, str]:
        with self._lock:
            return dict(self._skipped)

    def start(self) -> "SessionModeSwitch":
        """Start the thread, then attach. Raises what attaching raises (the listener could
        not be registered), with the thread ended again."""
        self._thread.start()
        try:
            self._attachment = self._session_listener.attach(self._spark, self)
        except BaseException:  # cleanup, then re-raised
            self._inbox.put(_Stop())
            raise
        return self

    def receive(self, message: BatchCommitted | TriggerIdle | QueryTerminated) -> None:
        """Spark's listener thread (or the Connect client's event thread): queue, never block."""
        self._inbox.put(message)

    def uninstall(self, timeout: float = UNINSTALL_TIMEOUT_S) -> None:
        """Stop switching: detach from the session's listener (never ``removeListener``: see
        :mod:`.session_listener`) and end the thread (a switch span still open ends as
        stopped). Queries keep the interval they run with now. Returns when nothing more will
        be switched or started: a switch that has stopped nothing yet gives up, one between
        a run's stop and the next run's start finishes first, messages still queued are
        dropped. Raises :class:`ModeSwitchError` if the thread did not end in time."""
        self._closing.set()
        if self._attachment is not None:
            self._attachment.detach()
        self._inbox.put(_Stop())
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise ModeSwitchError(f"the backlog mode installation did not stop within {timeout:g} s")
        if self._restarts is not None and not self._thread.is_alive():
            self._restarts.end()  # else the thread ends it, once its switch is over

    # -- the installation's thread -----------------------------------------------------

    def _run(self) -> None:
        while True:
            message = self._inbox.get()
            if isinstance(message, _Stop) or self._closing.is_set():
                with self._lock:
                    switches = [switch for switch, _ in self._switches.values()]
                for switch in switches:
                    switch.end(SwitchEndedBy.STOP)
                if self._restarts is not None:
                    self._restarts.end()  # the user's stops need no more watching: no switch will come
                exporter.flush()
                return
            try:
                self.handle(message)
            except Exception:  # process boundary: one query's trouble must not end the others'
                log.exception("install(): handling %s failed", message)

    def handle(self, message: Any) -> None:
        """One message, on the installation's thread (unit tests call it directly)."""
        if message.run_id in self._replaced:
            return  # a late event of a run a restart-method switch replaced
        with self._lock:
            found = self._switches.get(message.query_id)
        switch = None if found is None else found[0]
        if isinstance(message, QueryTerminated):
            if switch is None or not switch.follows(message):
                return  # a run this installation never adopted
            with self._lock:
                del self._switches[message.query_id]
            switch.end(SwitchEndedBy.STOP)
            return
        if isinstance(message, TriggerIdle):
            if switch is not None and switch.follows(message):
                switch.idle(message)
            return
        if not isinstance(message, BatchCommitted):
            return
        handled = self._session_listener.followed_alone(message.query_id)  # a start_backlog_aware handle switches it
        if switch is None or not switch.follows(message):
            with self._lock:
                skipped = message.run_id in self._skipped
            if handled or skipped:
                return
            self._adopt(message)
            return
        switch.committed(message, may_switch=not handled)

    def _adopt(self, message: BatchCommitted) -> None:
        """Take a backlog query over: its running trigger executor, whatever interval the
        user gave it, switched as ``message`` calls for; logged once when it cannot be switched
        in place. It is in :attr:`adopted` only once that first switch is made: until then it
        runs the user's interval, in neither mode. Raises what the first switch raises
        (nothing is adopted then: the next batch tries again)."""
        query_id = message.query_id
        query = self._spark.streams.get(query_id)
        if query is None:
            return  # stopped meanwhile
        intervals_ms = self.intervals_for(message)
        switcher: TriggerSwitcher
        if self._restarts is not None and self._restarts.knows(query_id):
            held_ms = self._restarts.interval_ms(query_id)
            if held_ms is None:
                self._skip(message, "its trigger is not a processing-time one")
                return
            switcher = RestartSwitcher(query, intervals_ms, self._restarts.starter(query_id), swap=self._restarts,
                                       cancelled=self._closing.is_set)
        else:
            try:
                switcher = self._switcher_of(query, intervals_ms)
                held_ms = switcher.adopt(cancelled=self._closing.is_set)
            except ModeSwitchError as exc:
                self._skip(message, f"it cannot be switched in place ({exc}){self._no_restart_because()}")
                return
            except Exception as exc:  # process boundary: py4j, or no JVM object (Spark Connect): skipped
                self._skip(message, f"it cannot be switched in place ({type(exc).__name__}: {exc})"
                                    f"{self._no_restart_because()}")
                return
            if held_ms is None:
                return
        # The mode the query runs in now: the interval it holds, if it is one of ours; else the
        # other one than the batch calls for, so that the batch switches it to one of ours.
        current = next((m for m, ms in intervals_ms.items() if ms == held_ms), None)
        mode = current if current is not None else _other(Mode.for_backlog(message.processing_backlog))
        switch = QuerySwitch(query, query_id, message.run_id, intervals_ms, mode, switcher, interval_ms=held_ms,
                             query_name=message.query_name, clock=self._clock, observers=self._observers)
        with self._lock:
            previous = self._switches.get(query_id)
        if previous is not None:  # a new run its user started: the last switch of the old one ends with it
            previous[0].end(SwitchEndedBy.STOP)
        # Told (announce: the session metrics' mode) and registered (adopted) only after the
        # first switch: before it, a query on an interval of its own is in the placeholder
        # mode, which it does not run in; and a first switch that fails adopts nothing.
        switch.committed(message)
        switch.announce()
        with self._lock:
            self._switches[query_id] = (switch, held_ms)
        log.info("install(): query %s (trigger %d ms) now switches %s with its backlog", query_id, held_ms,
                 switcher.method.value)

    def _no_restart_because(self) -> str:
        """Why the installation does not fall back to a restart: restarts not allowed, or
        the query's start was not recorded (started before ``install``, or a writer that
        cannot restart)."""
        if self._restarts is None:
            return "; restarts are not allowed (install(..., allow_restart=True) under Spark Connect)"
        return ("; it was started before install(), or its writer cannot restart (no checkpointLocation, "
                "a memory sink in append or update mode)")

    def intervals_for(self, message: BatchCommitted) -> dict[Mode, int]:
        """The intervals a query switches between: the installation's, replaced by those its
        source sets with ``backlog.highThroughputInterval`` / ``backlog.lowLatencyInterval``
        (carried in the offset dict; the first backlog source that sets any decides)."""
        own = next((end.intervals for end in message.ends if end.intervals is not None), None)
        intervals = dict(self._intervals_ms)
        if own is not None:
            if own.high_throughput_ms is not None:
                intervals[Mode.HIGH_THROUGHPUT] = own.high_throughput_ms
            if own.low_latency_ms is not None:
                intervals[Mode.LOW_LATENCY] = own.low_latency_ms
        return intervals

    def _skip(self, message: BatchCommitted, why: str) -> None:
        with self._lock:
            self._skipped[message.run_id] = why
        log.warning("install(): query %s (run %s) keeps its trigger: %s. start_backlog_aware can switch it by "
                    "restart", message.query_id, message.run_id, why)


def _other(mode: Mode) -> Mode:
    """The mode that is not ``mode``: an adopted query whose interval is none of ours is
    switched to the mode its backlog calls for at once."""
    return Mode.LOW_LATENCY if mode is Mode.HIGH_THROUGHPUT else Mode.HIGH_THROUGHPUT


def install(spark: Any, high_throughput_interval: str = "0 seconds",
            low_latency_interval: str = "1 second", *, allow_restart: bool = False) -> SessionModeSwitch:
    """At job bootstrap: from now on, every query of ``spark`` that reads ``format("backlog")``
    and runs with a processing-time trigger switches between ``high_throughput_interval``
    (while processing backlog) and ``low_latency_interval``, in place, including queries
    already running. ``allow_restart`` (Spark Connect, where in place is impossible): queries
    the session starts from now on are switched by restart (see the module docstring); on
    classic PySpark it changes nothing. Returns the installation; ``uninstall()`` ends it
    (queries keep the interval they run with). Raises
    :class:`~backlog_source.core.errors.ConfigError` for an interval that is not a duration,
    or for a bad ``OTEL_*`` setting. When the environment asks for OpenTelemetry metrics, the
    session's backlog metrics are exported too (:mod:`.session_metrics`)."""
    intervals = mode_intervals(high_throughput_interval, low_latency_interval)
    restarts = ConnectStarts(spark).begin() if allow_restart and is_connect(spark) else None
    try:
        return SessionModeSwitch(spark, intervals, observers=switch_observers(spark), restarts=restarts).start()
    except BaseException:  # cleanup, then re-raised
        if restarts is not None:
            restarts.end()
        raise


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (its client holds no JVM objects)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
