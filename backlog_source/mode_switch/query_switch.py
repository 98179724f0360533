"""One query's mode switch: decide, apply, span, tell the observers, written once for the
two entry points.

Which process: the user's driver program, on one thread at a time: a
:func:`~backlog_source.mode_switch.start_backlog_aware` handle's controller thread, or an
:func:`~backlog_source.mode_switch.install` installation's thread. The entry points differ
only in how they find their query and its switcher (the handle starts the query and asks its
:class:`~.policy.SwitchPolicy`; the installation adopts a running query); from then on each
hands the query's messages to its :class:`QuerySwitch`.

A switch is decided by the progress of the batch after which the flag changed (the source
sets it on the batch that reads the last backlog record, so no extra batch is waited for).
Its ``backlog.mode_switch`` span (:mod:`.switch_span`) runs from that decision to the start
of the first trigger under the new interval, and names the run that runs under the new
interval (after a restart-method switch, the new run).

Observers (:class:`SwitchObserver`: the session's metrics, a handle's list of transitions)
are told what each switch did; the switch depends on none of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from backlog_source.core.durations import trigger_interval_ms
from backlog_source.core.tracing.names import SwitchEndedBy
from backlog_source.mode_switch.listener import BatchCommitted, Mode, QueryTerminated, TriggerIdle
from backlog_source.mode_switch.switch_span import PendingSwitch, SwitchSpan
from backlog_source.mode_switch.switchers import SwitchMethod, TriggerSwitcher

log = logging.getLogger(__name__)


def mode_intervals(high_throughput_interval: str, low_latency_interval: str) -> dict[Mode, int]:
    """The two modes' trigger intervals in ms, parsed once where a user gives them
    (``install``, ``start_backlog_aware``). Raises
    :class:`~backlog_source.core.errors.ConfigError` naming the argument that is not a
    duration with a unit."""
    return {Mode.HIGH_THROUGHPUT: trigger_interval_ms("high_throughput_interval", high_throughput_interval),
            Mode.LOW_LATENCY: trigger_interval_ms("low_latency_interval", low_latency_interval)}


@dataclass(frozen=True)
class Transition:
    """One switch.

    ``batch_id``: the batch whose progress asked for it; ``at``: the decision (wall-clock
    seconds); ``method``: how it was made; ``apply_seconds``: decision ->
    the new interval applied (the field written, or the restarted query's ``start()``
    returned); ``effective_seconds``: decision -> the start of the first trigger under the
    new interval (None until that trigger is seen). In place, ``effective_seconds`` is the
    wait already scheduled with the old interval plus the switch's own cost.
    """

    from_mode: Mode
    to_mode: Mode
    batch_id: int
    at: float
    method: SwitchMethod
    apply_seconds: float
    effective_seconds: float | None = None

    @property
    def restart_seconds(self) -> float:
        """What the stop and start cost (0 for an in-place switch)."""
        return self.apply_seconds if self.method is SwitchMethod.RESTART else 0.0


class SwitchObserver:
    """Told what a :class:`QuerySwitch` did, on the switching thread; each method returns at
    once and raises nothing. ``switch`` is read for the query's id, name, mode and run. The
    methods do nothing unless overridden."""

    def adopted(self, switch: "QuerySwitch") -> None:
        """A switch follows the query from now on, in ``switch.mode`` (no switch made)."""

    def switched(self, switch: "QuerySwitch", transition: Transition | None, replaced_run: str | None) -> None:
        """A switch was applied: ``transition`` (None when a restart found the flag flipped
        back and started the new run in the mode it was in). ``replaced_run``: the run a
        restart-method switch stopped (``switch.run_id`` is the one it started), else None."""

    def took_effect(self, switch: "QuerySwitch", transition: Transition) -> None:
        """The first trigger under ``transition``'s interval started (or the switch ended
        before one did): ``transition.effective_seconds`` is set."""


class QuerySwitch:
    """The switching of one query: its mode, the run it follows, its switcher, and its last
    switch until that takes effect. Used on one thread at a time (see the module docstring);
    ``mode``, ``query``, ``run_id`` and ``method`` may be read from any thread.

    ``interval_ms``: the interval the query runs with now (an adopted query's may be none of
    ``intervals_ms``); ``clock``: wall-clock seconds, injected so that tests do not sleep.
    """

    def __init__(self, query: Any, query_id: str, run_id: str, intervals_ms: Mapping[Mode, int], mode: Mode,
                 switcher: TriggerSwitcher, *, interval_ms: int | None = None, query_name: str | None = None,
                 clock: Callable[[], float], observers: Sequence[SwitchObserver] = ()) -> None:
        self.query_id = query_id
        self.query_name = query_name
        self.intervals_ms = dict(intervals_ms)
        self.switcher = switcher
        self._clock = clock
        self._observers = tuple(observers)
        self._lock = threading.Lock()
        self._query = query
        self._run_id = run_id
        self._mode = mode
        self._interval_ms = self.intervals_ms[mode] if interval_ms is None else interval_ms
        self._pending: tuple[PendingSwitch, Transition] | None = None  # the last switch, not in effect yet

    @property
    def mode(self) -> Mode:
        with self._lock:
            return self._mode

    @property
    def query(self) -> Any:
        """The running ``StreamingQuery`` (a new one after each restart-method switch)."""
        with self._lock:
            return self._query

    @property
    def run_id(self) -> str:
        """The run this switch follows: the query's messages of any other run are not its."""
        with self._lock:
            return self._run_id

    @property
    def method(self) -> SwitchMethod:
        return self.switcher.method

    def announce(self) -> None:
        """Tell the observers that this switch follows the query from now on."""
        for observer in self._observers:
            observer.adopted(self)

    def follows(self, message: BatchCommitted | TriggerIdle | QueryTerminated) -> bool:
        """Whether ``message`` is of the query and run this switch follows (a message of
        another run is of one a restart-method switch replaced, or of a new run its user
        started)."""
        return message.query_id == self.query_id and message.run_id == self.run_id

    def idle(self, message: TriggerIdle) -> None:
        """A trigger of the followed run found no new data."""
        self._note_trigger(message.at_ms, SwitchEndedBy.IDLE)

    def committed(self, message: BatchCommitted, *, may_switch: bool = True) -> Transition | None:
        """A batch of the followed run committed: end the last switch's span if this trigger
        runs under its interval, and switch when the batch calls for the other mode (unless
        not ``may_switch``). Returns the transition made, or None. Raises what the switcher
        raises (:class:`~backlog_source.core.errors.ModeSwitchError`, or Spark's errors from
        a restart)."""
        self._note_trigger(message.trigger_started_ms, SwitchEndedBy.BATCH)
        wanted = Mode.for_backlog(message.processing_backlog)
        if wanted is self.mode or not may_switch:
            return None
        return self._switch(wanted, message)

    def end(self, ended_by: SwitchEndedBy = SwitchEndedBy.STOP, at: float | None = None) -> None:
        """Close a switch that has not taken effect yet: its span ends by ``ended_by`` at
        ``at`` (now by default)."""
        if self._pending is None:
            return
        pending, transition = self._pending
        self._pending = None
        effective = pending.end(ended_by, self._clock() if at is None else at)
        done = replace(transition, effective_seconds=effective - transition.at)
        for observer in self._observers:
            observer.took_effect(self, done)

    # -- inside -------------------------------------------------------------------------

    def _switch(self, wanted: Mode, asked_by: BatchCommitted) -> Transition | None:
        decided = self._clock()
        with self._lock:
            previous, previous_query, previous_run, from_ms = self._mode, self._query, self._run_id, self._interval_ms
        switched = self.switcher.switch(wanted)
        applied = self._clock()
        if switched.mode is None:
            log.info("query %s: nothing switched (the query stopped, or the flag flipped back first); staying in %s",
                     self.query_id, previous.value)
            return None
        run_id = previous_run if switched.query is previous_query else str(switched.query.runId)
        replaced_run = previous_run if run_id != previous_run else None
        with self._lock:
            self._query, self._run_id = switched.query, run_id
            self._mode, self._interval_ms = switched.mode, self.intervals_ms[switched.mode]
        if switched.mode is previous:  # a restart that found the flag flipped back: a new run, no transition
            log.info("query %s: the flag flipped back before the switch took effect; staying in %s", self.query_id,
                     previous.value)
            for observer in self._observers:
                observer.switched(self, None, replaced_run)
            return None
        transition = Transition(previous, switched.mode, asked_by.batch_id, decided, self.method, applied - decided)
        span = SwitchSpan(
            phase_traceparent=asked_by.traceparent, decided_at=decided, from_mode=previous, to_mode=switched.mode,
            method=transition.method, batch_id=transition.batch_id, from_interval_s=from_ms / 1000,
            to_interval_s=self.intervals_ms[switched.mode] / 1000, apply_seconds=transition.apply_seconds,
            restart_seconds=transition.restart_seconds, query_id=self.query_id, run_id=run_id)
        self.end(SwitchEndedBy.STOP, applied)  # a switch before the last took effect
        self._pending = (PendingSwitch(int(applied * 1000), span), transition)
        for observer in self._observers:
            observer.switched(self, transition, replaced_run)
        log.info("query %s switched %s -> %s after batch %d (%s, %.3f s)", self.query_id, previous.value,
                 switched.mode.value, asked_by.batch_id, transition.method.value, transition.apply_seconds)
        return transition

    def _note_trigger(self, started_ms: int, ended_by: SwitchEndedBy) -> None:
        """A trigger started at ``started_ms``: the first one after the switch was applied
        runs under the new interval, and ends the switch."""
        if self._pending is not None and self._pending[0].in_effect_by(started_ms):
            self.end(ended_by, started_ms / 1000)
