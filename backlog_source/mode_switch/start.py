"""``start_backlog_aware``: validate the writer, start the query, switch with the backlog.

Which process: the user's driver program.
"""

from __future__ import annotations

from typing import Any

from backlog_source.core import telemetry
from backlog_source.core.durations import duration_ms
from backlog_source.core.errors import ConfigError
from backlog_source.mode_switch.controller import BacklogAwareQuery
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.switchers import IN_PLACE, RESTART
from backlog_source.mode_switch.writer_info import WriterInfo, describe_writer

SWITCH_METHODS = ("auto", IN_PLACE, RESTART)


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
    the intervals do not qualify.
    """
    for name, text in (("high_throughput_interval", high_throughput_interval), ("low_latency_interval", low_latency_interval)):
        duration_ms(name, text, bare_number_unit=None)  # raises ConfigError naming it
    if switch_method not in SWITCH_METHODS:
        raise ConfigError(f"switch_method must be one of {', '.join(SWITCH_METHODS)}, got {switch_method!r}")
    telemetry.validate_environment()
    info = describe_writer(writer)
    _check_writer(info)
    if info.connect and switch_method == IN_PLACE:
        raise ConfigError("switch_method='in-place' is impossible under Spark Connect (the client has no JVM "
                          "objects to change); use 'auto' or 'restart'")
    restart_only = info.connect or switch_method == RESTART
    restart_refused = _restart_problem(info)
    if restart_only and restart_refused:
        raise ConfigError(restart_refused)
    if switch_method == IN_PLACE:
        restart_refused = "switch_method='in-place' was asked for (use 'auto' to fall back to restarts)"
    handle = BacklogAwareQuery(writer, high_throughput_interval, low_latency_interval,
                               initial_mode=Mode.HIGH_THROUGHPUT, force_restart=switch_method == RESTART,
                               restart_refused=restart_refused).start()
    if handle.switch_method == RESTART and not restart_only and restart_refused:
        # In place is impossible on this Spark runtime, and the fallback restart is not allowed.
        handle.stop()
        raise ConfigError(f"in place is impossible on this Spark runtime (the log says why), and {restart_refused}")
    return handle


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


def _restart_problem(info: WriterInfo) -> str | None:
    """Why a restart-method switch cannot work for this writer, or None. It stops the query
    and starts it again on its checkpoint; the memory sink recovers from a checkpoint only in
    complete mode (Spark refuses otherwise)."""
    if (info.sink_format or "").lower() == "memory" and (info.output_mode or "append").lower() != "complete":
        return (
            "the memory sink cannot restart from its checkpoint in append or update mode, and switches "
            f"{'under Spark Connect ' if info.connect else ''}restart the query: write to a file sink (parquet, "
            "delta...), use foreachBatch, or outputMode('complete')"
        )
    return None
