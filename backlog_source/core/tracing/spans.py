"""The spans, built from what domain code reports: the only code that knows which
attributes each span carries (their names are in :mod:`.names`).

* :func:`bucket_span` and :func:`phase_span`: the driver's planner worker, when
  :mod:`backlog_source.enumerator.phase_trace` reports that a bucket or the whole backlog
  phase finished. Pure: ids and times come from the checkpointed :class:`PhaseTrace`.
* :class:`PhaseSpans`: exports the planner's finished phase and bucket spans once per run.
* :class:`ReadSpan`: an executor's reader, for a range that crosses its bucket's boundary.
* :class:`SwitchSpan`: the user's driver program, for one mode switch.

Each returns or exports :class:`~.context.SpanRecord` values; :mod:`.exporter` sends them.
"""

from __future__ import annotations

import time
from typing import Any

from backlog_source.core.buckets import Bucket
from backlog_source.core.finish import Finish
from backlog_source.core.split import KafkaRange
from backlog_source.core.state import OpenBucket, PhaseTrace
from backlog_source.core.tracing import exporter, names
from backlog_source.core.tracing.context import (
    SpanContextIds,
    SpanEventRecord,
    SpanRecord,
    ms_to_ns,
    new_span_id,
    new_trace_id,
)


#: How long the planner may wait for the collector when a backlog phase ends.
PHASE_END_FLUSH_MS = 2_000


class PhaseSpans:
    """The planner's finished ``backlog.phase`` and ``backlog.bucket`` spans, exported once per
    run: a state change without new data is computed again by every poll until a batch
    carries it, with the same ids. A phase's end is flushed at once (bounded): it triggers a
    mode switch, and a restart-method switch ends the planner's process within milliseconds.
    Which process: the driver's planner worker; one per query run."""

    def __init__(self) -> None:
        self._exported: set[int] = set()  # span ids

    def export(self, spans: list[SpanRecord]) -> None:
        fresh = [s for s in spans if s.ids.span_id not in self._exported]
        if not fresh:
            return
        self._exported.update(s.ids.span_id for s in fresh)
        exporter.export(fresh)
        if any(span.name == names.PHASE for span in fresh):
            exporter.flush(PHASE_END_FLUSH_MS)


def bucket_span(trace: PhaseTrace, bucket: Bucket, entry: OpenBucket, finish: Finish, now_ms: int) -> SpanRecord:
    """``backlog.bucket``: the bucket's boundary recorded -> ``finish`` handled at ``now_ms``."""
    attributes: dict[str, Any] = {
        names.MESSAGING_SYSTEM: names.MESSAGING_SYSTEM_KAFKA,
        names.DESTINATION_NAME: bucket.topic,
        names.DESTINATION_PARTITION: str(bucket.partition),
        names.START_OFFSET: entry.start_offset,
        names.BOUNDARY_OFFSET: entry.boundary,
        names.FINISHED_BY: finish.by.value,
    }
    if finish.reached_offset is not None:
        attributes[names.REACHED_OFFSET] = finish.reached_offset
    ids = trace.bucket_ids(bucket, entry.boundary)
    return SpanRecord(names.BUCKET, ids, trace.ids, ms_to_ns(entry.started_ms), ms_to_ns(max(now_ms, entry.started_ms)),
                      attributes)


def phase_span(trace: PhaseTrace, source_id: str, now_ms: int) -> SpanRecord:
    """``backlog.phase``: the phase's first boundaries recorded -> no bucket pending at ``now_ms``."""
    attributes: dict[str, Any] = {
        names.SOURCE_ID: source_id,
        names.MESSAGING_SYSTEM: names.MESSAGING_SYSTEM_KAFKA,
        names.TOPICS: trace.topics,
        names.BUCKET_COUNT: trace.bucket_count,
        names.BACKLOG_RECORDS: trace.records,
    }
    return SpanRecord(names.PHASE, trace.ids, None, ms_to_ns(trace.started_ms), ms_to_ns(max(now_ms, trace.started_ms)),
                      attributes)


class ReadSpan:
    """``backlog.read``: an executor's read of a range that crosses its bucket's boundary,
    as a child of the bucket span whose context the range carries; the
    ``backlog.boundary_reached`` event marks the crossing. Exported (and flushed) once, by
    :meth:`finish`, before the task hands Spark the range's last batch."""

    def __init__(self, r: KafkaRange, source_id: str, parent: SpanContextIds) -> None:
        self.range = r
        self.source_id = source_id
        self.parent = parent
        self.ids = SpanContextIds(parent.trace_id, new_span_id())
        self.start_ns = time.time_ns()
        self.events: list[SpanEventRecord] = []

    @classmethod
    def begin(cls, r: KafkaRange, source_id: str) -> "ReadSpan | None":
        """The span of reading ``r``, or None: the range does not cross its boundary, carries
        no bucket context, or this process does not export spans."""
        if not r.crosses_boundary:
            return None
        parent = SpanContextIds.parse(r.traceparent)
        if parent is None or not exporter.enabled():
            return None
        return cls(r, source_id, parent)

    def boundary_reached(self, position: int) -> None:
        if not self.events:
            self.events.append(SpanEventRecord(names.BOUNDARY_REACHED, time.time_ns(), {names.REACHED_OFFSET: position}))

    def finish(self, position: int | None, error: str | None = None) -> None:
        """End and export the span: ``position`` where the read stopped (None if unknown),
        ``error`` the exception's type name when the read failed."""
        r = self.range
        attributes: dict[str, object] = {
            names.MESSAGING_SYSTEM: names.MESSAGING_SYSTEM_KAFKA,
            names.DESTINATION_NAME: r.topic,
            names.DESTINATION_PARTITION: str(r.partition),
            names.SPLIT_START_OFFSET: r.start,
            names.SPLIT_END_OFFSET: r.end,
            names.BOUNDARY_OFFSET: r.boundary,
            names.SOURCE_ID: self.source_id,
        }
        if position is not None:
            attributes[names.REACHED_OFFSET] = position
        record = SpanRecord(names.READ, self.ids, self.parent, self.start_ns, time.time_ns(), attributes,
                            tuple(self.events), error)
        exporter.export([record])
        exporter.flush()


class SwitchSpan:
    """``backlog.mode_switch``: one switch, from its decision (``decided_at``, wall-clock
    seconds) to the first trigger under the new interval; a child of the backlog phase
    (``phase_traceparent``) that caused it, or the root of its own trace. Exported once, by
    :meth:`end`. Modes and method are string enums (``Mode``, ``SwitchMethod``), recorded as
    their values (``"low-latency"``, ``"in-place"``)."""

    def __init__(self, *, phase_traceparent: str | None, decided_at: float, from_mode: str, to_mode: str,
                 method: str, batch_id: int, from_interval_s: float, to_interval_s: float, apply_seconds: float,
                 restart_seconds: float, query_id: str, run_id: str) -> None:
        self.decided_at = decided_at
        self._parent = SpanContextIds.parse(phase_traceparent)
        self._attributes = {
            names.MODE_FROM: str(from_mode),  # a string enum's str() is its value, a plain str
            names.MODE_TO: str(to_mode),
            names.SWITCH_METHOD: str(method),
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
