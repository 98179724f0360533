"""Span, event and attribute names: a public interface (dashboards and alerts query them).

Every name the source puts on a span is defined here and nowhere else. Renaming one is a
breaking change; adding one is not. Where OpenTelemetry's messaging semantic conventions
have a name for a value, it is used (``messaging.*``); the rest live under ``backlog.``.

Spans (see docs/tracing.md for when each starts and ends and which process
exports it):

* ``backlog.phase``: boundaries recorded -> every bucket finished. The trace's root.
* ``backlog.bucket``: one bucket's boundary recorded -> its finish handled. Child of the phase.
* ``backlog.read``: the executor read of the split that crossed the bucket's boundary. Child
  of the bucket; carries the ``backlog.boundary_reached`` event.
* ``backlog.mode_switch``: a trigger switch, decision -> first trigger under the new interval. Child
  of the phase that caused it.
"""

from backlog_source.core.text_enum import TextEnum

# -- span names -----------------------------------------------------------------------------
PHASE = "backlog.phase"
BUCKET = "backlog.bucket"
READ = "backlog.read"
MODE_SWITCH = "backlog.mode_switch"

# -- event names ----------------------------------------------------------------------------
BOUNDARY_REACHED = "backlog.boundary_reached"

# -- attributes: OpenTelemetry messaging conventions ----------------------------------------
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_SYSTEM_KAFKA = "kafka"
DESTINATION_NAME = "messaging.destination.name"
DESTINATION_PARTITION = "messaging.destination.partition.id"

# -- attributes: backlog.phase --------------------------------------------------------------
SOURCE_ID = "backlog.source_id"
TOPICS = "backlog.topics"
BUCKET_COUNT = "backlog.bucket_count"
BACKLOG_RECORDS = "backlog.records"
#: The catch-up batches of the phase, the bytes they were planned to read (where measured:
#: a byte or time budget), what bounded them (``bytes``, ``time``, ``records``,
#: ``available``), and the byte budget of the last one that had one.
CATCH_UP_BATCHES = "backlog.catch_up.batches"
CATCH_UP_PLANNED_BYTES = "backlog.catch_up.planned_bytes"
CATCH_UP_BOUNDED_BY = "backlog.catch_up.bounded_by"
CATCH_UP_BUDGET_BYTES = "backlog.catch_up.budget_bytes"

# -- attributes: backlog.bucket -------------------------------------------------------------
BOUNDARY_OFFSET = "backlog.boundary_offset"
START_OFFSET = "backlog.start_offset"
REACHED_OFFSET = "backlog.reached_offset"
#: How the bucket left backlog: a :class:`~backlog_source.enumerator.state.FinishedBy` value
#: (``event``, ``position``, ``vanished``, ``reset``).
FINISHED_BY = "backlog.finished_by"

# -- attributes: backlog.read ---------------------------------------------------------------
SPLIT_START_OFFSET = "backlog.split.start_offset"
SPLIT_END_OFFSET = "backlog.split.end_offset"
#: Offsets in the range read (end - start; records, plus any offsets without one).
READ_RECORDS = "backlog.split.records"

# -- attributes: backlog.mode_switch --------------------------------------------------------
MODE_FROM = "backlog.mode.from"
MODE_TO = "backlog.mode.to"
BATCH_ID = "backlog.batch_id"
INTERVAL_FROM_S = "backlog.trigger.from_interval_seconds"
INTERVAL_TO_S = "backlog.trigger.to_interval_seconds"
#: ``in-place`` or ``restart``.
SWITCH_METHOD = "backlog.mode_switch.method"
#: Decision -> the new interval applied (the field written, or the restarted query started).
APPLY_SECONDS = "backlog.mode_switch.apply_seconds"
RESTART_SECONDS = "backlog.restart_seconds"
QUERY_ID = "spark.query.id"
RUN_ID = "spark.query.run_id"
#: What ended the switch span: a :class:`SwitchEndedBy` value.
SWITCH_ENDED_BY = "backlog.mode_switch.ended_by"


class SwitchEndedBy(TextEnum):
    """What ended a ``backlog.mode_switch`` span."""

    BATCH = "batch"  # the first batch under the new interval started
    IDLE = "idle"  # the first trigger under the new interval found nothing to read
    STOP = "stop"  # the handle stopped, or the next switch came first
