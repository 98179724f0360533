"""The enumerator's spans: ``backlog.phase`` and ``backlog.bucket``, built from the
checkpointed :class:`~backlog_source.enumerator.state.PhaseTrace` when
:mod:`backlog_source.enumerator.phase_trace` reports that a bucket or the whole backlog phase
finished, and exported once per run by :class:`PhaseSpans`.

Which process: the driver's planner worker. Pure but for the export: ids and times come from
the trace. Span and attribute names are in :mod:`backlog_source.core.tracing.names`.
"""

from __future__ import annotations

from typing import Any

from backlog_source.core.buckets import Bucket
from backlog_source.core.tracing import exporter, names
from backlog_source.core.tracing.context import SpanRecord, ms_to_ns
from backlog_source.enumerator.state import Finish, OpenBucket, PhaseTrace

#: How long the planner may wait for the collector when a backlog phase ends.
PHASE_END_FLUSH_MS = 2_000


class PhaseSpans:
    """The planner's finished ``backlog.phase`` and ``backlog.bucket`` spans, exported once per
    run: a state change without new data is computed again by every poll until a batch
    carries it, with the same ids. A phase's end is flushed at once (bounded): it triggers a
    mode switch, and a restart-method switch ends the planner's process within milliseconds.
    Which process: the driver's planner worker; one per query run.

    Only the span ids of the latest trace exported are kept: a transition is computed again
    only until a batch carries it, so spans of an earlier phase never come back, and a run
    that goes through many phases over ten thousand partitions keeps one phase's ids."""

    def __init__(self) -> None:
        self._trace_id: int | None = None
        self._exported: set[int] = set()  # span ids of the trace _trace_id

    @property
    def remembered(self) -> int:
        """How many span ids are kept (one trace's at most)."""
        return len(self._exported)

    def export(self, spans: list[SpanRecord]) -> None:
        # One call's spans are of one trace (phase_trace.advance finishes one phase's spans).
        if spans and spans[0].ids.trace_id != self._trace_id:
            self._trace_id, self._exported = spans[0].ids.trace_id, set()
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
        names.CATCH_UP_BATCHES: trace.batches,
    }
    if trace.planned_bytes:
        attributes[names.CATCH_UP_PLANNED_BYTES] = trace.planned_bytes
    if trace.bounded_by:
        attributes[names.CATCH_UP_BOUNDED_BY] = tuple(str(b) for b in trace.bounded_by)
    if trace.budget_bytes is not None:
        attributes[names.CATCH_UP_BUDGET_BYTES] = trace.budget_bytes
    return SpanRecord(names.PHASE, trace.ids, None, ms_to_ns(trace.started_ms), ms_to_ns(max(now_ms, trace.started_ms)),
                      attributes)
