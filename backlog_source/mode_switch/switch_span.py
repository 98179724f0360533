"""The mode switch's span: ``backlog.mode_switch``, one switch from its decision to the
first trigger under the new interval, a child of the backlog phase that caused it.

Which process: the user's driver program (a handle's controller thread, or an installation's
thread for queries `install` switches, through their :mod:`.query_switch`). Names are in
:mod:`backlog_source.core.tracing.names`.
"""

from __future__ import annotations

from dataclasses import dataclass

from backlog_source.core.tracing import exporter, names
from backlog_source.core.tracing.context import SpanContextIds, SpanRecord, new_span_id, new_trace_id
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.switchers import SwitchMethod


class SwitchSpan:
    """``backlog.mode_switch``: one switch, from its decision (``decided_at``, wall-clock
    seconds) to the first trigger under the new interval; a child of the backlog phase
    (``phase_traceparent``) that caused it, or the root of its own trace. Exported once, by
    :meth:`end`. Modes and method are recorded as their values (``"low-latency"``,
    ``"in-place"``). ``run_id`` (``spark.query.run_id``) is the run that runs under the new
    interval: the same run in place, the new run after a restart-method switch (the one a
    reader of the trace finds in Spark's UI and logs from then on). Made in one place,
    :class:`~.query_switch.QuerySwitch`, for handles and installations alike."""

    def __init__(self, *, phase_traceparent: str | None, decided_at: float, from_mode: Mode, to_mode: Mode,
                 method: SwitchMethod, batch_id: int, from_interval_s: float, to_interval_s: float, apply_seconds: float,
                 restart_seconds: float, query_id: str, run_id: str) -> None:
        self.decided_at = decided_at
        self._parent = SpanContextIds.parse(phase_traceparent)
        self._attributes = {
            names.MODE_FROM: from_mode.value,
            names.MODE_TO: to_mode.value,
            names.SWITCH_METHOD: method.value,
            names.BATCH_ID: batch_id,
            names.INTERVAL_FROM_S: from_interval_s,
            names.INTERVAL_TO_S: to_interval_s,
            names.APPLY_SECONDS: apply_seconds,
            names.RESTART_SECONDS: restart_seconds,
            names.QUERY_ID: query_id,
            names.RUN_ID: run_id,
        }

    def end(self, ended_by: names.SwitchEndedBy, at: float) -> None:
        """End at ``at`` (wall-clock seconds) because of ``ended_by``."""
        ids = SpanContextIds(self._parent.trace_id if self._parent else new_trace_id(), new_span_id())
        record = SpanRecord(names.MODE_SWITCH, ids, self._parent, int(self.decided_at * 1e9), int(at * 1e9),
                            {**self._attributes, names.SWITCH_ENDED_BY: str(ended_by)})
        exporter.export([record])


@dataclass(frozen=True)
class PendingSwitch:
    """A switch applied at ``applied_ms`` (wall-clock ms) whose span waits for the first
    trigger under the new interval: the first trigger that started at or after it. One rule
    for a handle's controller and for an installation."""

    applied_ms: int
    span: SwitchSpan

    def in_effect_by(self, trigger_started_ms: int) -> bool:
        """Whether a trigger that started at ``trigger_started_ms`` runs under the new interval."""
        return trigger_started_ms >= self.applied_ms

    def end(self, ended_by: names.SwitchEndedBy, at: float) -> float:
        """End the span at ``at`` (never before the decision); returns when it ended."""
        effective = max(at, self.span.decided_at)
        self.span.end(ended_by, effective)
        return effective
