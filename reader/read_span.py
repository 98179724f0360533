"""The reader's span: ``backlog.read``, an executor's read of a range that crosses its
bucket's boundary, a child of the bucket span whose context the range carries.

Which process: a Python worker on an executor. Exported only when tracing is on in that
process. Names are in :mod:`backlog_source.core.tracing.names`.
"""

from __future__ import annotations

import time

from backlog_source.core.tracing import exporter, names
from backlog_source.core.tracing.context import SpanContextIds, SpanEventRecord, SpanRecord, new_span_id
from backlog_source.split.kafka_split import KafkaRange


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
            names.READ_RECORDS: r.size,
            names.BOUNDARY_OFFSET: r.boundary,
            names.SOURCE_ID: self.source_id,
        }
        if position is not None:
            attributes[names.REACHED_OFFSET] = position
        record = SpanRecord(names.READ, self.ids, self.parent, self.start_ns, time.time_ns(), attributes,
                            tuple(self.events), error)
        exporter.export([record])
        exporter.flush()
