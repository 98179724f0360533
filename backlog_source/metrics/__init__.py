"""The backlog as metrics: lag figures from a progress event (:mod:`.lag`), and the
session's backlog metrics (:mod:`.state`, named in :mod:`.names`) exported over
OpenTelemetry from the driver (:mod:`.exporter`). The session's listener feeds them
(:mod:`backlog_source.mode_switch.session_metrics`)."""

from backlog_source.metrics.lag import lag_metrics
from backlog_source.metrics.state import BacklogMetrics, SourceReport

__all__ = ["BacklogMetrics", "SourceReport", "lag_metrics"]
