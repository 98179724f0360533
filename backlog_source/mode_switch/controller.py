"""The controller behind :func:`~backlog_source.mode_switch.start_backlog_aware`, and the
handle it returns.

Which process: the user's driver program. :class:`~.listener.BacklogModeListener` (the
component that decides, on Spark's listener thread) hands each progress event to
:meth:`BacklogAwareQuery.receive`, which only queues it; the controller's own thread applies
switches through a :class:`~.switchers.TriggerSwitcher` (in place, or by a restart), so a
slow switch or a slow sink never blocks Spark's listener thread.

A switch is decided by the progress of the batch after which the flag changed (the source
sets it on the batch that reads the last backlog record, so no extra batch is waited for).
Its ``backlog.mode_switch`` span runs from that decision to the start of the first trigger
under the new interval.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from backlog_source.core import span_names, telemetry
from backlog_source.core.durations import duration_ms
from backlog_source.core.errors import BacklogSourceError, ModeSwitchError
from backlog_source.core.trace_context import SpanContextIds, SpanRecord, new_span_id, new_trace_id
from backlog_source.mode_switch.listener import (
    BacklogModeListener,
    BatchCommitted,
    Mode,
    QueryTerminated,
    TriggerIdle,
    backlog_flag,
)
from backlog_source.mode_switch.switchers import (
    RESTART,
    RestartSwitcher,
    TriggerSwitcher,
    choose_switcher,
    last_progress,
)
from backlog_source.mode_switch.writer_info import session_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Transition:
    """One switch.

    ``batch_id``: the batch whose progress asked for it; ``at``: the decision (wall-clock
    seconds); ``method``: ``"in-place"`` or ``"restart"``; ``apply_seconds``: decision ->
    the new interval applied (the field written, or the restarted query's ``start()``
    returned); ``effective_seconds``: decision -> the start of the first trigger under the
    new interval (None until that trigger is seen). In place, ``effective_seconds`` is the
    wait already scheduled with the old interval plus the switch's own cost.
    """

    from_mode: str
    to_mode: str
    batch_id: int
    at: float
    method: str
    apply_seconds: float
    effective_seconds: float | None = None

    @property
    def restart_seconds(self) -> float:
        """What the stop and start cost (0 for an in-place switch)."""
        return self.apply_seconds if self.method == RESTART else 0.0


@dataclass(frozen=True)
class _Stop:
    """The user stopped the handle."""


class BacklogAwareQuery:
    """The handle :func:`start_backlog_aware` returns, and the controller behind it.

    ``mode``, ``transitions``, ``query`` and ``switch_method`` may be read from any thread.
    ``clock`` (wall-clock seconds) and ``wait`` (``queue.get`` with a timeout) are injected
    so that unit tests drive the controller without sleeping.
    """

    def __init__(
        self,
        writer: Any,
        high_throughput_interval: str,
        low_latency_interval: str,
        *,
        initial_mode: Mode = Mode.HIGH_THROUGHPUT,
        force_restart: bool = False,
        settle_timeout_s: float = 5.0,
        restart_refused: str | None = None,
        clock: Callable[[], float] = time.time,
        choose: Callable[..., tuple[TriggerSwitcher, str]] = choose_switcher,
    ) -> None:
        """``restart_refused``: why this query's sink cannot be restarted, if it cannot (then
        a restart-method switch is never attempted; see :meth:`_attach_switcher`)."""
        self._writer = writer
        self._intervals = {Mode.HIGH_THROUGHPUT: high_throughput_interval, Mode.LOW_LATENCY: low_latency_interval}
        self._mode = initial_mode
        self._force_restart = force_restart
        self._settle_timeout_s = settle_timeout_s
        self._restart_refused = restart_refused
        self._clock = clock
        self._choose = choose
        self._lock = threading.Lock()
        self._transitions: list[Transition] = []
        self._inbox: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._failure: BaseException | None = None
        self._query: Any = None
        self._query_id: str | None = None
        self._run_id: str | None = None
        self._switcher: TriggerSwitcher | None = None
        self._attached = False  # _attach_switcher has run
        self._stopping = False
        self._pending_effect: tuple[int, _SwitchSpan] | None = None  # (applied at ms, its span)
        self._restarted_in: Mode | None = None  # the mode a restart-method switch started in
        self._listener = BacklogModeListener(self)
        self._thread = threading.Thread(target=self._run, name="backlog-mode-controller", daemon=True)

    # -- public handle -------------------------------------------------------------------

    @property
    def mode(self) -> str:
        with self._lock:
            return self._mode.value

    @property
    def transitions(self) -> list[Transition]:
        with self._lock:
            return list(self._transitions)

    @property
    def query(self) -> Any:
        """The running ``StreamingQuery`` (the same object for the life of the handle when
        switches are in place; a new one after each restart-method switch)."""
        with self._lock:
            return self._query

    @property
    def switch_method(self) -> str:
        """``"in-place"`` or ``"restart"``: how this handle switches (decided at start; it
        becomes ``"restart"`` only if the running query then fails the in-place checks)."""
        assert self._switcher is not None, "start() first"
        return self._switcher.method

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the handle is stopped or the query fails; switches do not count.
        Returns False on timeout. Raises the query's exception if it failed."""
        finished = self._done.wait(timeout)
        if self._failure is not None:
            raise self._failure
        return finished

    def stop(self) -> None:
        """Stop the query and the controller; no restart follows."""
        with self._lock:
            self._stopping = True
        self._inbox.put(_Stop())
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=120)
        self._finish()

    # -- the listener's side -------------------------------------------------------------

    def receive(self, message: BatchCommitted | TriggerIdle | QueryTerminated) -> None:
        """Called on Spark's listener thread: queue messages about this query, never block."""
        if message.query_id == self._query_id:
            self._inbox.put(message)

    # -- the controller's side -----------------------------------------------------------

    def start(self, *, thread: bool = True) -> "BacklogAwareQuery":
        """Register the listener, start the query in the initial mode, choose the switch
        method (logged once, with the reason) and start the controller thread (unit tests
        pass ``thread=False`` and call :meth:`_process_queued` themselves). Returns as soon
        as the query started: nothing here waits for the query's plan or first batch."""
        spark = session_of(self._writer)
        spark.streams.addListener(self._listener)
        try:
            interval = self._interval_ms(self._mode)
            query = self._start_query(interval)
            self._switcher, reason = self._choose(query, self._restart_switcher, force_restart=self._force_restart)
        except BaseException:
            spark.streams.removeListener(self._listener)
            self._stop_quietly()
            raise
        log.info("started in %s mode (trigger %s); mode switches are %s: %s", self._mode.value,
                 self._intervals[self._mode], self._switcher.method, reason)
        if thread:
            self._thread.start()
        return self

    def _start_query(self, interval_ms: int) -> Any:
        query = self._writer.trigger(processingTime=f"{interval_ms} milliseconds").start()
        with self._lock:
            self._query, self._query_id, self._run_id = query, str(query.id), str(query.runId)
        return query

    def _restart_switcher(self) -> RestartSwitcher:
        return RestartSwitcher(self._query, self._restart_in_mode_of_last_batch, still_needed=self._still_needed,
                               settle_timeout_s=self._settle_timeout_s)

    def _still_needed(self, old_query: Any) -> bool:
        """Batches kept committing while the restart waited for its trigger to end: if the
        latest of them flipped the flag back, there is nothing to switch."""
        return _mode_of(last_progress(old_query)) is not self._mode

    def _restart_in_mode_of_last_batch(self, interval_ms: int) -> Any:
        """Start the new run in the mode the stopped run's last committed batch calls for:
        the new run starts from that batch and may never report again (no new data)."""
        mode = _mode_of(last_progress(self._query))
        if mode is not None:
            interval_ms = self._interval_ms(mode)
        self._restarted_in = mode
        return self._start_query(interval_ms)

    def _interval_ms(self, mode: Mode) -> int:
        return duration_ms(f"{mode.value} interval", self._intervals[mode], bare_number_unit=None)

    def _run(self) -> None:
        if not self._attach_switcher():
            return
        while self._handle(self._inbox.get()):
            pass

    def _process_queued(self) -> None:
        """Handle every queued message on the calling thread (unit tests; no thread started)."""
        if not self._attach_switcher():
            return
        while not self._inbox.empty() and self._handle(self._inbox.get_nowait()):
            pass

    def _attach_switcher(self) -> bool:
        """Attach an in-place switcher to the running query's trigger executor, once, before
        any message is handled (messages wait in the inbox meanwhile). ``start()`` does not
        wait for this: the executor appears only when the query's plan is ready, about a
        second later, and the first switch comes after the first batch.

        Where the running executor fails the checks, switches are by restart from then on
        (logged), unless this sink cannot restart: then the handle ends with the error (the
        query keeps running in its first mode). False when the handle ended."""
        if self._attached:
            return True
        self._attached = True
        attach = getattr(self._switcher, "attach", None)
        if attach is None:
            return True
        try:
            attach(self._interval_ms(self._mode), cancelled=lambda: self._stopping)
            return True
        except ModeSwitchError as exc:
            if self._restart_refused is not None:
                self._failure = ModeSwitchError(
                    f"the query cannot switch modes: in place is impossible on the running query ({exc}), and "
                    f"{self._restart_refused}")
                log.error("%s", self._failure)
                self._finish()
                return False
            log.warning("mode switches are by restart after all: in place is impossible on the running query: %s", exc)
            self._switcher = self._restart_switcher()
            return True

    def _handle(self, message: BatchCommitted | TriggerIdle | QueryTerminated | _Stop) -> bool:
        """Act on one message; False once the controller is done."""
        log.debug("controller: %s (current run %s, mode %s)", message, self._run_id, self._mode.value)
        if isinstance(message, _Stop):
            self._stop_quietly()
            self._end_pending_effect(span_names.SWITCH_ENDED_BY_STOP, self._clock())
            return False
        if message.run_id != self._run_id:
            return True  # a run replaced by a restart-method switch
        if isinstance(message, QueryTerminated):
            if self._stopping:
                return True
            self._failure = _query_failure(self._query, message.exception)
            log.error("the query terminated%s; not restarting", f": {message.exception}" if message.exception else "")
            self._finish()
            return False
        if isinstance(message, TriggerIdle):
            self._note_trigger(message.at_ms, span_names.SWITCH_ENDED_BY_IDLE)
            return True
        self._note_trigger(message.trigger_started_ms, span_names.SWITCH_ENDED_BY_BATCH)
        wanted = Mode.for_backlog(message.processing_backlog)
        if wanted is not self._mode and not self._stopping:
            try:
                self._switch(wanted, message)
            except BaseException as exc:  # a failed switch ends the handle, visibly
                self._failure = exc
                self._finish()
                return False
        return True

    def _switch(self, wanted: Mode, asked_by: BatchCommitted) -> None:
        assert self._switcher is not None
        decided = self._clock()
        previous = self._mode
        old_query = self._query
        self._restarted_in = None
        query = self._switcher.switch(self._interval_ms(wanted))
        target = wanted
        if query is not old_query and self._restarted_in is not None:
            target = self._restarted_in  # see _restart_in_mode_of_last_batch
        elif query is old_query and self._switcher.method == RESTART:
            target = previous  # still_needed said no: the flag flipped back while waiting
        if target is previous:
            log.info("the flag flipped back before the switch took effect; staying in %s", previous.value)
            return
        applied = self._clock()
        transition = Transition(previous.value, target.value, asked_by.batch_id, decided, self._switcher.method,
                                applied - decided)
        span = _SwitchSpan(transition, asked_by.traceparent, self._intervals, query_id=str(query.id),
                           run_id=str(query.runId))
        with self._lock:
            self._mode = target
            self._transitions.append(transition)
        self._end_pending_effect(span_names.SWITCH_ENDED_BY_STOP, applied)  # a switch before the last took effect
        self._pending_effect = (int(applied * 1000), span)
        log.info("switched %s -> %s after batch %d (%s, %.3f s)", previous.value, target.value, asked_by.batch_id,
                 self._switcher.method, applied - decided)

    def _note_trigger(self, started_ms: int, ended_by: str) -> None:
        """A trigger started at ``started_ms``: the first one after the switch was applied
        is the first under the new interval, and ends the switch."""
        if self._pending_effect is not None and started_ms >= self._pending_effect[0]:
            self._end_pending_effect(ended_by, started_ms / 1000)

    def _end_pending_effect(self, ended_by: str, at: float) -> None:
        if self._pending_effect is None:
            return
        _, span = self._pending_effect
        self._pending_effect = None
        effective = max(at, span.transition.at)
        with self._lock:
            self._transitions = [
                replace(t, effective_seconds=effective - t.at) if t is span.transition else t for t in self._transitions
            ]
        span.end(ended_by, effective)

    def _stop_quietly(self) -> None:
        query = self._query
        if query is not None:
            try:
                query.stop()
            except Exception as exc:  # already failed or stopped
                log.debug("stopping the query: %s", exc)

    def _finish(self) -> None:
        self._end_pending_effect(span_names.SWITCH_ENDED_BY_STOP, self._clock())
        telemetry.flush()
        if not self._done.is_set():
            try:
                session_of(self._writer).streams.removeListener(self._listener)
            except Exception:  # the session may be gone
                pass
            self._done.set()


class _SwitchSpan:
    """The ``backlog.mode_switch`` span of one transition: decision -> first trigger under
    the new interval; a child of the backlog phase that caused it. Exported once, on end."""

    def __init__(self, transition: Transition, traceparent: str | None, intervals: dict[Mode, str], *,
                 query_id: str, run_id: str) -> None:
        self.transition = transition
        self._parent = SpanContextIds.parse(traceparent)
        self._attributes = {
            span_names.MODE_FROM: transition.from_mode,
            span_names.MODE_TO: transition.to_mode,
            span_names.SWITCH_METHOD: transition.method,
            span_names.BATCH_ID: transition.batch_id,
            span_names.INTERVAL_FROM_S: duration_ms("interval", intervals[Mode(transition.from_mode)]) / 1000,
            span_names.INTERVAL_TO_S: duration_ms("interval", intervals[Mode(transition.to_mode)]) / 1000,
            span_names.APPLY_SECONDS: transition.apply_seconds,
            span_names.RESTART_SECONDS: transition.restart_seconds,
            span_names.QUERY_ID: query_id,
            span_names.RUN_ID: run_id,
        }

    def end(self, ended_by: str, at: float) -> None:
        ids = SpanContextIds(self._parent.trace_id if self._parent else new_trace_id(), new_span_id())
        record = SpanRecord(
            span_names.MODE_SWITCH, ids, self._parent, int(self.transition.at * 1e9), int(at * 1e9),
            {**self._attributes, span_names.SWITCH_ENDED_BY: ended_by},
        )
        telemetry.export([record])


def _mode_of(progress: Any) -> Mode | None:
    """The mode a progress event calls for, or None when it carries no backlog flag."""
    flag = None if progress is None else backlog_flag(progress)
    return None if flag is None else Mode.for_backlog(flag)


def _query_failure(query: Any, exception_text: str | None) -> BaseException | None:
    if exception_text is None:
        return None
    try:
        failure = query.exception() if query is not None else None
    except Exception:
        failure = None
    return failure or BacklogSourceError(f"the query failed: {exception_text}")
