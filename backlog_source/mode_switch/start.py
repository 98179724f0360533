"""``start_backlog_aware``: validate the writer, start the query, switch with the backlog.

Which process: the user's driver program.
"""

from __future__ import annotations

from typing import Any

from backlog_source.core.errors import ConfigError
from backlog_source.core.tracing import exporter
from backlog_source.mode_switch.controller import BacklogAwareQuery, ModeController
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.policy import SwitchPolicy
from backlog_source.mode_switch.query_switch import mode_intervals
from backlog_source.mode_switch.session_metrics import switch_observers
from backlog_source.mode_switch.writer_info import WriterInfo, describe_writer, session_of


def start_backlog_aware(
    writer: Any,
    high_throughput_interval: str = "0 seconds",
    low_latency_interval: str = "1 second",
    *,
    switch_method: str = "auto",
) -> BacklogAwareQuery:
    """Start ``writer`` with the high-throughput trigger and switch the trigger interval
    whenever the source's ``processing_backlog`` flag changes.

    ``writer``: a ``DataStreamWriter`` (classic PySpark or Spark Connect) with its sink and
    ``checkpointLocation`` set and no trigger, over a DataFrame that reads
    ``format("backlog")``. The first run always starts in high-throughput: a new query and
    a restart that finds lag both begin in backlog, and the first batch says when there is
    none. ``switch_method``: ``"auto"`` (in place where the Spark runtime allows it, else
    by restart), or ``"in-place"`` / ``"restart"`` to insist (``"in-place"`` fails when it
    is impossible). Raises :class:`ConfigError`, saying what to change, when the writer or
    the intervals do not qualify, and :class:`~backlog_source.core.errors.ModeSwitchError`
    (the query stopped again) when in place is impossible on this Spark runtime and a
    restart is not allowed. When the environment asks for OpenTelemetry metrics, the
    session's backlog metrics are exported too (:mod:`.session_metrics`).
    """
    intervals_ms = mode_intervals(high_throughput_interval, low_latency_interval)
    exporter.validate_environment()
    info = describe_writer(writer)
    policy = SwitchPolicy.decide(switch_method, info)
    _check_writer(info)
    spark = session_of(writer)
    controller = ModeController(writer, intervals_ms, policy, initial_mode=Mode.HIGH_THROUGHPUT,
                                observers=switch_observers(spark))
    return BacklogAwareQuery(controller, spark).start()


def _check_writer(info: WriterInfo) -> None:
    if not info.checkpoint_location:
        raise ConfigError(
            "set .option('checkpointLocation', ...) on the writer: a backlog-aware query keeps its "
            "progress there, and a restart-method switch resumes from it"
        )
    if not info.backlog_enabled:
        formats = ", ".join(info.other_formats) or "none found"
        raise ConfigError(
            f"the writer's DataFrame reads no format('backlog') source (sources: {formats}); "
            "start_backlog_aware switches modes on that source's backlog signal"
        )
    if any((value or "true").strip().lower() == "false" for value in info.backlog_enabled):
        raise ConfigError("a format('backlog') source has backlog.enabled=false; remove it to switch modes")
