"""The trace of a backlog phase, kept in the offset dict so a restart continues it.

Pure: no Kafka, no clock, no OpenTelemetry SDK. One backlog phase is one trace:

* ``backlog.phase`` (the root) starts when the first boundaries are recorded and ends when
  no bucket is pending any more. A phase that ended stays in the offset as "the last phase"
  so the mode-switch span it caused can join its trace; the next phase (re-entry, or a
  bucket discovered while nothing is pending) starts a new trace.
* ``backlog.bucket`` starts when a bucket's boundary is recorded and ends when the bucket
  leaves the pending set (its event handled, the committed-position safety net, the
  partition vanished, or its offsets reset). Its span id is derived from the trace id,
  bucket and boundary, so ``partitions()`` can hand readers the parent context as a pure
  function of the offset.

What the offset stores (``"trace"``)::

    {"traceparent": "00-<trace id>-<phase span id>-01", "started_ms": 1700000000000,
     "topics": ["orders"], "bucket_count": 8, "records": 2000000,
     "buckets": {"orders": {"0": [<start offset>, <boundary>, <started ms>]}}}  # open bucket spans

This module decides which spans open and close (the trace's state); their content is made
by :mod:`backlog_source.enumerator.phase_spans`. Finished spans come back as
:class:`~backlog_source.core.tracing.context.SpanRecord` values for the caller to export. A crash between that and the offset reaching Spark's offset log recomputes
the same transition, so a span can be exported twice, with identical ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from backlog_source.core.buckets import Bucket
from backlog_source.core.tracing.context import SpanContextIds, SpanRecord, new_span_id, new_trace_id
from backlog_source.enumerator import phase_spans
from backlog_source.enumerator.state import Finish, FinishedBy, OpenBucket, PhaseTrace


def advance(
    trace: PhaseTrace | None,
    source_id: str,
    boundaries: Mapping[Bucket, int],
    finishes: Mapping[Bucket, Finish],
    positions: Mapping[Bucket, int],
    now_ms: int,
    *,
    spans: bool = True,
) -> tuple[PhaseTrace | None, list[SpanRecord]]:
    """The trace once the batch carries ``boundaries`` (pending or finishing).

    Open bucket spans whose bucket left ``boundaries`` (or got a new boundary) finish, for the
    reason ``finishes`` gives; buckets of ``boundaries`` without an open span start one, at the read
    position ``positions`` gives. The phase ends when none of its buckets is left, unless a
    bucket was reset with a new boundary (it goes on in the same phase); buckets that enter
    backlog after that (a restart, re-entry) start a new phase, with a new trace. Returns
    the new trace and the finished spans, buckets first, then the phase; with ``spans=False``
    (tracing off in this process) the same trace and no spans: a phase of ten thousand
    buckets would build as many spans for nothing.
    """
    finished: list[SpanRecord] = []
    phase_open = trace is not None and trace.open
    if trace is not None and phase_open:
        remaining = {}
        for bucket in sorted(trace.buckets):
            entry = trace.buckets[bucket]
            if boundaries.get(bucket) == entry.boundary:
                remaining[bucket] = entry
                continue
            if spans:
                default = FinishedBy.RESET if bucket in boundaries else FinishedBy.VANISHED
                finished.append(phase_spans.bucket_span(trace, bucket, entry, finishes.get(bucket, Finish(default)),
                                                        now_ms))
        reset = [b for b in trace.buckets if b not in remaining and b in boundaries and b not in finishes]
        trace = replace(trace, buckets=remaining)
        if not remaining and not reset:
            if spans:
                finished.append(phase_spans.phase_span(trace, source_id, now_ms))
            phase_open = False

    started = {b: o for b, o in boundaries.items() if trace is None or b not in trace.buckets}
    if started:
        if trace is None or not phase_open:
            trace = PhaseTrace(SpanContextIds(new_trace_id(), new_span_id()), now_ms)
        opened = {b: OpenBucket(min(positions.get(b, o), o), o, now_ms) for b, o in started.items()}
        trace = replace(
            trace,
            topics=tuple(sorted(set(trace.topics) | {b.topic for b in started})),
            bucket_count=trace.bucket_count + len(started),
            records=trace.records + sum(e.boundary - e.start_offset for e in opened.values()),
            buckets={**trace.buckets, **opened},
        )
    return trace, finished
