"""The session's backlog metrics: one receiver on the session's listener, for every backlog
query, and an observer of the session's mode switches, feeding
:class:`~backlog_source.metrics.state.BacklogMetrics`, exported over OpenTelemetry when the
environment asks for metrics.

Which process: the user's driver program. :func:`session_metrics` is called by
:func:`~backlog_source.mode_switch.install` and
:func:`~backlog_source.mode_switch.start_backlog_aware` (through :func:`switch_observers`), and
by :func:`enable_metrics`; the first call on a session with metrics configured builds the
exporter and attaches the receiver (never detached: the series end when their query ends, and a session's listener is
never removed, see :mod:`.session_listener`). With metrics off it returns None and costs one
environment lookup.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from backlog_source.metrics import exporter
from backlog_source.metrics.state import BacklogMetrics, source_reports
from backlog_source.mode_switch.listener import BatchCommitted, Mode, QueryTerminated
from backlog_source.mode_switch.query_switch import QuerySwitch, SwitchObserver, Transition
from backlog_source.mode_switch.recent_runs import ReplacedRuns
from backlog_source.mode_switch.session_listener import Attachment, SessionListener

log = logging.getLogger(__name__)

#: The attribute of a SparkSession object that holds its :class:`SessionMetrics` (kept on
#: the session, as its listener is, so that nothing here keeps a session alive).
SESSION_ATTRIBUTE = "_backlog_source_session_metrics"
_lock = threading.Lock()


class SessionMetrics(SwitchObserver):
    """The metrics of one session's backlog queries and their exporter: a receiver of the
    session's listener (``receive``, on the listener's thread, only updates :attr:`metrics`)
    and an observer of every switch of the session (``install``'s and the handles', on
    their threads). The switches depend on no metric: they tell their observers."""

    def __init__(self, metrics: BacklogMetrics, export: exporter.MetricsExport) -> None:
        self.metrics = metrics
        self.export = export
        self.attachment: Attachment | None = None
        self._replaced = ReplacedRuns()  # as the switches report them

    def receive(self, message: Any) -> None:
        if message.run_id in self._replaced:
            return  # a late message of a run a restart-method switch replaced: the query runs on
        if isinstance(message, BatchCommitted):
            self.metrics.committed(message.query_id, message.query_name, message.batch_id,
                                   source_reports(message.progress))
        elif isinstance(message, QueryTerminated):
            self.metrics.terminated(message.query_id)

    def adopted(self, switch: QuerySwitch) -> None:
        """A switch follows the query. Its name is known from its start: the mode series
        carry it from their first export, not only after the first batch."""
        self.metrics.adopted(switch.query_id, switch.query_name, switch.mode.value)

    def switched(self, switch: QuerySwitch, transition: Transition | None, replaced_run: str | None) -> None:
        """A switch was applied: counted by the mode it switched to. A replaced run's
        termination, arriving after, ends nothing (one arriving before ends the series until
        this call, or the new run's first batch, brings them back)."""
        if replaced_run is not None:
            self._replaced.add(replaced_run)
        if transition is None:
            self.metrics.adopted(switch.query_id, switch.query_name, switch.mode.value)  # a new run, same mode
        else:
            self.metrics.switched(switch.query_id, switch.query_name, transition.to_mode.value)


def session_metrics(spark: Any, *, session_listener: SessionListener | None = None) -> SessionMetrics | None:
    """The session's metrics, set up on first call when the environment asks for metrics
    (``OTEL_METRICS_EXPORTER``, or an OTLP endpoint); None when it does not. Raises
    :class:`~backlog_source.core.errors.ConfigError` for a bad ``OTEL_*`` setting, and what
    registering the session's listener raises."""
    with _lock:
        found = vars(spark).get(SESSION_ATTRIBUTE)
        if found is not None:
            return found
        metrics = BacklogMetrics(tuple(m.value for m in Mode))
        export = exporter.start(metrics)
        if export is None:
            return None
        found = SessionMetrics(metrics, export)
        try:
            found.attachment = (session_listener or SessionListener.of(spark)).attach(spark, found)
        except BaseException:  # cleanup, then re-raised
            export.shutdown()
            raise
        setattr(spark, SESSION_ATTRIBUTE, found)
        log.info("backlog metrics are exported for every backlog query of this session")
        return found


def switch_observers(spark: Any) -> tuple[SwitchObserver, ...]:
    """What the mode switches of ``spark`` report to: its metrics, when the environment asks
    for them (:func:`session_metrics`, set up on first call), else nothing. Raises as
    :func:`session_metrics` does."""
    metrics = session_metrics(spark)
    return () if metrics is None else (metrics,)


def enable_metrics(spark: Any) -> bool:
    """Export the backlog metrics of every ``format("backlog")`` query of ``spark`` (for a job
    that switches no trigger; :func:`install` and ``start_backlog_aware`` do this already).
    True when the environment asks for metrics, False when it does not (nothing is set up)."""
    return session_metrics(spark) is not None


def disable_metrics(spark: Any) -> None:
    """Stop exporting ``spark``'s backlog metrics: detach from the session's listener (never
    ``removeListener``), export a last time and end the exporter's thread. Idempotent; a
    later :func:`enable_metrics`, ``install`` or ``start_backlog_aware`` reads the
    environment again. Installations and handles made before keep running without metrics."""
    with _lock:
        found = vars(spark).pop(SESSION_ATTRIBUTE, None)
    if found is not None:
        if found.attachment is not None:
            found.attachment.detach()
        found.export.shutdown()
