"""The handle :func:`~backlog_source.mode_switch.start_backlog_aware` returns, and the
controller behind it.

Which process: the user's driver program. The session's one
:class:`~.listener.BacklogModeListener` (:mod:`.session_listener`; on Spark's listener
thread, or the Connect client's event thread) hands each progress event of the handle's
query to :meth:`BacklogAwareQuery.receive`, which only queues it; the handle's controller
thread gives the messages, one at a time, to
:class:`ModeController`, which decides and applies switches through the
:class:`~.switchers.TriggerSwitcher` its :class:`~.policy.SwitchPolicy` chose (in place, or
by a restart). So a slow switch or a slow sink never blocks Spark's listener thread, and the
controller itself has no thread of its own to fake in a unit test.

A switch is decided by the progress of the batch after which the flag changed (the source
sets it on the batch that reads the last backlog record, so no extra batch is waited for).
Its ``backlog.mode_switch`` span runs from that decision to the start of the first trigger
under the new interval.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backlog_source.core.durations import processing_time
from backlog_source.core.errors import BacklogSourceError, ModeSwitchError
from backlog_source.core.tracing import exporter
from backlog_source.core.tracing.names import SwitchEndedBy
from backlog_source.mode_switch.listener import BatchCommitted, Mode, QueryTerminated, TriggerIdle
from backlog_source.mode_switch.policy import SwitchPolicy
from backlog_source.mode_switch.query_switch import QuerySwitch, SwitchObserver, Transition
from backlog_source.mode_switch.session_listener import Attachment, SessionListener
from backlog_source.mode_switch.switchers import RestartSwitcher, SwitchMethod

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stop:
    """The user stopped the handle: stop the query; no restart follows."""


Message = BatchCommitted | TriggerIdle | QueryTerminated | Stop


class _History(SwitchObserver):
    """The handle's transitions, each completed when it takes effect. Read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._transitions: list[Transition] = []

    @property
    def transitions(self) -> list[Transition]:
        with self._lock:
            return list(self._transitions)

    def switched(self, switch: QuerySwitch, transition: Transition | None, replaced_run: str | None) -> None:
        if transition is not None:
            with self._lock:
                self._transitions.append(transition)

    def took_effect(self, switch: QuerySwitch, transition: Transition) -> None:
        pending = replace(transition, effective_seconds=None)
        with self._lock:
            self._transitions = [transition if t == pending else t for t in self._transitions]


class ModeController:
    """The decisions of one backlog-aware query: its mode, when to switch, and how.

    Runs on one thread at a time (the handle's controller thread): :meth:`start` starts the
    query in ``initial_mode`` and takes the switcher from ``policy``; :meth:`attach` readies
    it for the running query; :meth:`handle` acts on each message, handing the query's
    batches to its :class:`~.query_switch.QuerySwitch` (the decision, the switch, its span,
    the ``observers``). ``mode``, ``transitions``, ``query`` and ``switch_method`` may be
    read from any thread. ``intervals_ms``: each mode's trigger interval
    (:func:`~.query_switch.mode_intervals`); ``clock`` (wall-clock seconds) is injected so
    that tests drive the controller without sleeping.
    """

    def __init__(
        self,
        writer: Any,
        intervals_ms: Mapping[Mode, int],
        policy: SwitchPolicy,
        *,
        initial_mode: Mode = Mode.HIGH_THROUGHPUT,
        settle_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        observers: Sequence[SwitchObserver] = (),
    ) -> None:
        """``observers``: told the query's mode and each switch (the session's metrics)."""
        self._writer = writer
        self._intervals_ms = dict(intervals_ms)
        self._initial_mode = initial_mode
        self._policy = policy
        self._settle_timeout_s = settle_timeout_s
        self._clock = clock
        self._history = _History()
        self._observers = (self._history, *observers)
        self._lock = threading.Lock()
        self._query: Any = None  # the run this controller started last
        self._query_id: str | None = None
        self._switch: QuerySwitch | None = None  # set by start(), before the controller thread runs
        self._stopping = False
        #: Why the controller ended: the query's failure or a switch that failed; None while
        #: it runs and after a stop.
        self.failure: BaseException | None = None

    # -- read from any thread ------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        return self._initial_mode if self._switch is None else self._switch.mode

    @property
    def transitions(self) -> list[Transition]:
        return self._history.transitions

    @property
    def query(self) -> Any:
        with self._lock:
            return self._query

    @property
    def query_id(self) -> str | None:
        """The query's id (the same across restart-method switches: Spark keeps it in the
        checkpoint); None before :meth:`start`."""
        with self._lock:
            return self._query_id

    @property
    def switch_method(self) -> SwitchMethod:
        return self._started().method

    def _started(self) -> QuerySwitch:
        """The switch :meth:`start` made. Raises :class:`ModeSwitchError` before it: the
        handle runs nothing on a controller that has not started a query."""
        if self._switch is None:
            raise ModeSwitchError("the mode controller has not started a query: start() first")
        return self._switch

    def stopping(self) -> None:
        """The handle is stopping: an attach still waiting gives up, no switch starts."""
        with self._lock:
            self._stopping = True

    # -- the controller thread -----------------------------------------------------------

    def start(self) -> None:
        """Start the query in the initial mode and choose the switch method (logged once,
        with the reason). Returns as soon as the query started: nothing here waits for the
        query's plan or first batch. Raises what ``start()`` or the policy raise, with the
        query stopped again."""
        mode = self._initial_mode
        try:
            query = self._start_query(self._intervals_ms[mode])
            switcher, reason = self._policy.choose(query, self._intervals_ms, self._restart_switcher)
        except BaseException:  # cleanup, then re-raised
            self.stop_query()
            raise
        self._switch = QuerySwitch(query, str(query.id), str(query.runId), self._intervals_ms, mode, switcher,
                                   query_name=query.name, clock=self._clock, observers=self._observers)
        self._switch.announce()
        log.info("started in %s mode (trigger %d ms); mode switches are %s: %s", mode.value,
                 self._intervals_ms[mode], switcher.method.value, reason)

    def attach(self) -> bool:
        """Ready the switcher for the running query, before any message is handled (they
        wait in the handle's queue meanwhile). An in-place switcher waits for the query's
        trigger executor, which appears when the query's plan is ready, about a second after
        ``start()``; the first switch comes after the first batch anyway.

        Where the running executor fails the in-place checks, the policy falls back to
        restarts or refuses; refused, the controller ends with the error in ``failure`` (the
        query keeps running in its first mode). False when the controller ended."""
        switch = self._started()
        try:
            switch.switcher.attach(switch.mode, cancelled=lambda: self._stopping)
        except ModeSwitchError as exc:
            try:
                switch.switcher = self._policy.fall_back(exc, self._restart_switcher)
            except ModeSwitchError as refused:
                self.failure = refused
                log.error("%s", refused)
                return False
        return True

    def handle(self, message: Message) -> bool:
        """Act on one message; False once the controller is done (stopped, the query
        terminated, or a switch failed: then ``failure`` says why)."""
        switch = self._started()
        log.debug("controller: %s (current run %s, mode %s)", message, switch.run_id, switch.mode.value)
        if isinstance(message, Stop):
            self.stop_query()
            self.end()
            return False
        if not switch.follows(message):
            return True  # another query of the session, or a run replaced by a restart-method switch
        if isinstance(message, QueryTerminated):
            if self._stopping:
                return True
            self.failure = _query_failure(self._query, message.exception)
            log.error("the query terminated%s; not restarting", f": {message.exception}" if message.exception else "")
            return False
        if isinstance(message, TriggerIdle):
            switch.idle(message)
            return True
        try:
            switch.committed(message, may_switch=not self._stopping)
        except BaseException as exc:  # process boundary: the controller thread; await_termination raises it
            self.failure = exc
            return False
        return True

    def end(self) -> None:
        """Close a switch that has not taken effect yet (its span ends as stopped) and flush
        the spans of this process."""
        if self._switch is not None:
            self._switch.end(SwitchEndedBy.STOP)
        exporter.flush()

    def stop_query(self) -> None:
        """Stop the running query, if any; quietly when it already failed or stopped. Runs
        on the controller thread, or on the handle's ``backlog-mode-stop`` thread once the
        controller thread has ended (never on the thread that called the handle's stop())."""
        query = self._query
        if query is not None:
            try:
                query.stop()
            except Exception as exc:  # process boundary: cleanup; the query may have ended already
                log.debug("stopping the query: %s", exc)

    # -- inside -----------------------------------------------------------------------------

    def _start_query(self, interval_ms: int) -> Any:
        query = self._writer.trigger(processingTime=processing_time(interval_ms)).start()
        with self._lock:
            self._query, self._query_id = query, str(query.id)
        return query

    def _restart_switcher(self) -> RestartSwitcher:
        return RestartSwitcher(self._query, self._intervals_ms, self._start_query, settle_timeout_s=self._settle_timeout_s)


class QueryFailedError(BacklogSourceError):
    """The query failed, and Spark's exception for it could not be had from the query
    object; the message carries the listener's text of the failure instead."""


class StopTimeoutError(ModeSwitchError, TimeoutError):
    """:meth:`BacklogAwareQuery.stop` gave up waiting; the message says what had not ended.
    The query may still be stopping (Spark's ``query.stop()`` waits for the running batch,
    bounded only by ``spark.sql.streaming.stopTimeout``)."""


#: How long :meth:`BacklogAwareQuery.stop` waits, by default, for the query to stop: a
#: restart-method switch in progress (settle wait, stop, start) finishes first.
STOP_TIMEOUT_S = 120.0


class BacklogAwareQuery:
    """The handle :func:`start_backlog_aware` returns: an attachment to the session's
    listener (:mod:`.session_listener`), a queue, and the controller thread that hands each
    queued message to a :class:`ModeController`.

    Threads: :meth:`start` and :meth:`stop` run on the user's thread; :meth:`receive` on
    Spark's listener thread (classic) or the Connect client's event thread; everything that
    changes or stops the query runs on the controller thread (``backlog-mode-controller``),
    or, when that thread has already ended, on a short-lived ``backlog-mode-stop`` thread.
    The user's thread only waits, always with a deadline. Nothing here calls
    ``removeListener``: the session's listener stays registered and the handle detaches
    (see :mod:`.session_listener` for the Spark Connect deadlock that avoids).

    ``mode``, ``transitions``, ``query`` and ``switch_method`` may be read from any thread.
    """

    def __init__(self, controller: ModeController, spark: Any, *,
                 session_listener: SessionListener | None = None) -> None:
        self._controller = controller
        self._spark = spark
        self._session_listener = session_listener
        self._attachment: Attachment | None = None
        self._inbox: queue.Queue[Message] = queue.Queue()
        self._done = threading.Event()
        self._query_stopped = False  # the controller thread stopped the query on a Stop message
        self._thread = threading.Thread(target=self._run, name="backlog-mode-controller", daemon=True)

    # -- public handle -------------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        """``Mode.HIGH_THROUGHPUT`` or ``Mode.LOW_LATENCY`` (string enums: equal to
        ``"high-throughput"`` and ``"low-latency"``)."""
        return self._controller.mode

    @property
    def transitions(self) -> list[Transition]:
        return self._controller.transitions

    @property
    def query(self) -> Any:
        """The running ``StreamingQuery`` (the same object for the life of the handle when
        switches are in place; a new one after each restart-method switch)."""
        return self._controller.query

    @property
    def switch_method(self) -> SwitchMethod:
        """``SwitchMethod.IN_PLACE`` or ``SwitchMethod.RESTART`` (equal to ``"in-place"`` and
        ``"restart"``): how this handle switches (decided at start; it becomes a restart only
        if the running query then fails the in-place checks)."""
        return self._controller.switch_method

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the handle is stopped or the query fails; switches do not count.
        Returns False on timeout. Raises the query's exception if it failed."""
        finished = self._done.wait(timeout)
        if self._controller.failure is not None:
            raise self._controller.failure
        return finished

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the query and the controller; no restart follows. Returns when the query has
        stopped; raises :class:`StopTimeoutError` (and logs what had not ended) after
        ``timeout`` seconds instead of waiting longer. May be called again, and from any
        thread; called on the controller thread itself, it only asks (the thread stops the
        query after the message in hand).

        Runs on the caller's thread, which never calls Spark's listener API and never
        stops the query itself: it detaches from the session's listener (a table update),
        queues a ``Stop`` for the controller thread, which stops the query between two
        switches (never in the middle of a restart), and waits."""
        deadline = time.monotonic() + timeout
        self._controller.stopping()
        if self._attachment is not None:
            self._attachment.detach()  # not removeListener: see session_listener
        if threading.current_thread() is self._thread:
            self._inbox.put(Stop())
            return
        if self._thread.is_alive():
            self._inbox.put(Stop())
            self._thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                self._give_up(timeout, self._thread, "the controller thread has not stopped the query")
        if self._query_stopped or self._controller.query is None:
            return
        # The controller ended before the Stop (the query failed or terminated, a switch
        # failed, or the in-place checks were refused and the query still runs in its first
        # mode): stop the query on a thread of its own, so that this wait has a deadline too.
        stopper = threading.Thread(target=self._controller.stop_query, name="backlog-mode-stop", daemon=True)
        stopper.start()
        stopper.join(max(0.0, deadline - time.monotonic()))
        if stopper.is_alive():
            self._give_up(timeout, stopper, "the query's stop() has not returned")

    def receive(self, message: BatchCommitted | TriggerIdle | QueryTerminated) -> None:
        """Called on Spark's listener thread or the Connect client's event thread, possibly
        with the Connect bus lock held: queue the message, never block."""
        self._inbox.put(message)

    # -- the user's thread, at start ---------------------------------------------------------

    def start(self) -> "BacklogAwareQuery":
        """Attach to the session's listener (registering it with the session the first
        time), start the query and the controller thread. Returns as soon as the query
        started. Raises what the controller's ``start`` raises, with the handle detached.

        The handle hears every query of the session until its query has started (an early
        progress event of the new query must not be lost; the controller ignores the others),
        then only its own query's id."""
        if self._session_listener is None:
            self._session_listener = SessionListener.of(self._spark)
        self._attachment = self._session_listener.attach(self._spark, self)
        try:
            self._controller.start()
        except BaseException:  # cleanup, then re-raised
            self._attachment.detach()
            raise
        self._attachment.follow(self._controller.query_id)
        self._thread.start()
        return self

    # -- the controller thread -----------------------------------------------------------

    def _run(self) -> None:
        try:
            if self._controller.attach():
                while True:
                    message = self._inbox.get()
                    if not self._controller.handle(message):
                        self._query_stopped = isinstance(message, Stop)
                        break
        except BaseException as exc:  # process boundary: the controller thread ends visibly, not silently
            log.exception("the backlog-aware query's controller failed")
            self._controller.failure = exc
        finally:
            # Detach, not removeListener: events of this query may still be on their way.
            if self._attachment is not None:
                self._attachment.detach()
            self._controller.end()
            self._done.set()

    def _give_up(self, timeout: float, thread: threading.Thread, what: str) -> None:
        where = _where(thread)
        log.error("stop() gave up after %.1f s: %s; it is in %s. The query may still be stopping (Spark's "
                  "query.stop() waits for the running batch; spark.sql.streaming.stopTimeout bounds that)",
                  timeout, what, where)
        raise StopTimeoutError(f"stop() gave up after {timeout:.1f} s: {what} (it is in {where})")


def _where(thread: threading.Thread) -> str:
    """Where ``thread`` is now (innermost frames first), for the log line of a stop that did
    not end in time."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "an unknown place (it just ended)"
    stack = traceback.extract_stack(frame)
    steps = stack[-3:]
    ours = [step for step in stack[:-3] if Path(__file__).parent.name in Path(step.filename).parts]
    if ours:  # the innermost frame of this package too: where in the handle's work it waits
        steps = [ours[-1], *steps]
    return " <- ".join(f"{Path(step.filename).name}:{step.lineno} {step.name}" for step in reversed(steps))


def _query_failure(query: Any, exception_text: str | None) -> BaseException | None:
    """Why the query ended: Spark's exception, else a :class:`QueryFailedError` with the
    listener's ``exception_text``; None after a stop (no text)."""
    if exception_text is None:
        return None
    try:
        failure = query.exception() if query is not None else None
    except Exception:  # process boundary: JVM or Connect server; the text stands in
        failure = None
    return failure or QueryFailedError(f"the query failed: {exception_text}")
