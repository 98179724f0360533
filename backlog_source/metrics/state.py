"""What the metrics say, kept from progress events: pure, no OpenTelemetry, no Spark.

Which process: the user's driver program. :class:`BacklogMetrics` is fed by the session's
listener (committed batches, terminated queries: :func:`source_reports` reads a progress
event) and by what the mode switches report (adopted, switched), on their threads, and read
by the exporter's collection thread; one lock guards it, held only around dictionary updates.

Where each figure comes from (nothing is recomputed from Kafka here):

* pending records per partition: the latest offsets the source reported with the batch
  (``latestOffset``, what Kafka had when the batch was planned) less the batch's end
  positions, as Spark's ``offsetsBehindLatest`` metrics;
* pending bytes: those offsets times the bytes per offset measured for the source's last
  catch-up batch planned with a byte or time budget (the offset dict's ``plan.bytes``);
* processing backlog, the backlog phase's start, catch-up batches: the batch's end offset
  (its pending boundaries, its phase trace);
* records in: Spark's ``numInputRows`` of the source; bytes in: the batch's ``plan.bytes``.

Counters count each batch once: a progress event for a batch id already counted (a query
restarted on its checkpoint replays its last batch) adds nothing. A query is known by its
id, which its checkpoint keeps: when a run terminates its series stop, and a new run of the
same query (a restart-method switch, or a restart by the user) continues them, counters
included. Which terminations to leave out (those of a run a restart-method switch replaced)
is the feeder's rule, not this module's.

A series keeps its attributes from its first export to its last (to a metrics backend,
other attributes are another series). So every report that can make a query live (a batch
committed, a mode switch adopting the query or switching it) names the query as well as
identifying it: a mode switch knows the name from the query's start, before any batch.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from backlog_source.core.buckets import Bucket, from_nested
from backlog_source.core.errors import OffsetFormatError
from backlog_source.enumerator.state import SourceOffset
from backlog_source.enumerator.state_codec import parse_reported
from backlog_source.metrics import names
from backlog_source.metrics.lag import progress_field
from backlog_source.metrics.names import Instrument

#: How many ended queries are remembered (a new run of one continues its counters).
MAX_ENDED = 64

#: One measurement: its value and attributes.
Observation = tuple[float, dict[str, str | int]]


@dataclass(frozen=True)
class SourceReport:
    """One ``format("backlog")`` source of a committed batch's progress event: the batch's
    ``start`` (None for a query's first batch) and ``end`` offsets, the ``latest`` offsets
    Kafka had when it was planned (empty when not reported) and the ``rows`` it read."""

    end: SourceOffset
    start: SourceOffset | None = None
    latest: Mapping[Bucket, int] = field(default_factory=dict)
    rows: int = 0


def source_reports(progress: Any) -> tuple[SourceReport, ...]:
    """What each ``format("backlog")`` source of a progress event reported: its batch's start
    and end offsets, the latest offsets and the rows read. Takes a
    ``StreamingQueryProgress`` or its dict form; None (no progress) reports nothing."""
    reports = []
    for source in progress_field(progress, "sources") or []:
        end = parse_reported(progress_field(source, "endOffset"))
        if end is None:
            continue
        reports.append(SourceReport(
            end=end,
            start=parse_reported(progress_field(source, "startOffset")),
            latest=_latest_offsets(progress_field(source, "latestOffset")),
            rows=int(progress_field(source, "numInputRows") or 0),
        ))
    return tuple(reports)


def _latest_offsets(value: Any) -> dict:
    """The ``latestOffset`` of a source's progress as buckets, or empty when there is none:
    classic PySpark reports a missing one as the text ``"None"`` (``str()`` of a null), and
    a figure missing must never cost the batch's other figures."""
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
        return from_nested(parsed, "latestOffset") if parsed else {}
    except (ValueError, OffsetFormatError):
        return {}


@dataclass
class _Source:
    pending: dict[Bucket, int] = field(default_factory=dict)
    bytes_per_offset: float | None = None
    processing_backlog: bool = False
    backlog_started_ms: int | None = None
    catch_up_batches: int = 0
    records: int = 0
    bytes: int = 0


@dataclass
class _Query:
    ended: bool = False  # its run terminated: no series until a new run (or a restart switch) reports
    name: str | None = None
    last_batch_id: int = -1
    sources: dict[str, _Source] = field(default_factory=dict)
    mode: str | None = None
    switches: dict[str, int] = field(default_factory=dict)


class BacklogMetrics:
    """The figures of every backlog query of one session, by query id. ``modes``: the mode
    names (``backlog.mode`` values) the mode gauge reports 0 or 1 for."""

    def __init__(self, modes: tuple[str, ...], clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._modes = modes
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._queries: dict[str, _Query] = {}

    # -- fed by the listener and the switches ------------------------------------------

    def committed(self, query_id: str, query_name: str | None, batch_id: int,
                  reports: tuple[SourceReport, ...]) -> None:
        """A batch of ``query_id`` committed with these backlog sources."""
        with self._lock:
            query = self._live(query_id, query_name)
            count = batch_id > query.last_batch_id
            query.last_batch_id = max(query.last_batch_id, batch_id)
            for report in reports:
                _update(query.sources.setdefault(report.end.source_id, _Source()), report, count)

    def adopted(self, query_id: str, query_name: str | None, mode: str) -> None:
        """A mode switch follows ``query_id`` (named ``query_name``, None if it has none),
        which runs in ``mode`` now (no switch counted). Called when the query starts, before
        its first batch: its mode series carry the name from their first export."""
        with self._lock:
            self._live(query_id, query_name).mode = mode

    def switched(self, query_id: str, query_name: str | None, mode: str) -> None:
        """``query_id``'s trigger was switched to ``mode`` (its series go on, in a restart
        switch's new run too)."""
        with self._lock:
            query = self._live(query_id, query_name)
            query.mode = mode
            query.switches[mode] = query.switches.get(mode, 0) + 1

    def terminated(self, query_id: str) -> None:
        """The query's run ended (stopped or failed): its series stop until a new run
        reports. The :data:`MAX_ENDED` most recently ended queries are remembered, the
        older ones forgotten."""
        with self._lock:
            query = self._queries.pop(query_id, None)
            if query is None:
                return
            query.ended = True
            self._queries[query_id] = query  # last in order: the most recently ended
            ended = [q for q, found in self._queries.items() if found.ended]
            for forgotten in ended[:-MAX_ENDED]:
                del self._queries[forgotten]

    def _live(self, query_id: str, query_name: str | None) -> _Query:  # with self._lock held
        query = self._queries.setdefault(query_id, _Query())
        query.ended = False
        query.name = query_name or None
        return query

    # -- read by the exporter ---------------------------------------------------------

    def observe(self, instrument: Instrument) -> list[Observation]:
        """The current value of ``instrument`` for every series (counters: cumulative)."""
        now_ms = self._clock_ms()
        with self._lock:
            return [obs for query_id, query in self._queries.items() if not query.ended
                    for obs in _observe(instrument, query_id, query, self._modes, now_ms)]


def _update(source: _Source, report: SourceReport, count: bool) -> None:
    end = report.end
    source.pending = {b: max(0, report.latest[b] - p) for b, p in end.positions.items() if b in report.latest}
    source.processing_backlog = end.processing_backlog
    source.backlog_started_ms = end.trace.started_ms if end.processing_backlog and end.trace is not None else None
    planned = end.plan.bytes if end.plan is not None else None
    if planned:
        measured = end.reads_since(report.start or SourceOffset(end.source_id, {})).bytes_per_offset
        source.bytes_per_offset = measured or source.bytes_per_offset
    if count:
        source.records += max(0, report.rows)
        source.bytes += planned or 0
        if end.boundaries:
            source.catch_up_batches += 1


def _observe(instrument: Instrument, query_id: str, query: _Query, modes: tuple[str, ...],
             now_ms: int) -> list[Observation]:
    base: dict[str, str | int] = {names.QUERY_ID: query_id}
    if query.name:
        base[names.QUERY_NAME] = query.name
    if instrument is names.MODE:
        return [] if query.mode is None else [
            (1.0 if mode == query.mode else 0.0, {**base, names.MODE_ATTRIBUTE: mode}) for mode in modes]
    if instrument is names.MODE_SWITCHES:
        return [(float(n), {**base, names.MODE_ATTRIBUTE: mode}) for mode, n in sorted(query.switches.items())]
    found: list[Observation] = []
    for source_id, source in query.sources.items():
        attributes = {**base, names.SOURCE_ID: source_id}
        if instrument is names.PENDING_RECORDS:
            found += [(float(n), _partition(attributes, b)) for b, n in sorted(source.pending.items())]
        elif instrument is names.PENDING_BYTES:
            if source.bytes_per_offset is not None:
                found += [(n * source.bytes_per_offset, _partition(attributes, b)) for b, n in sorted(source.pending.items())]
        elif instrument is names.PROCESSING_BACKLOG:
            found.append((1.0 if source.processing_backlog else 0.0, attributes))
        elif instrument is names.BACKLOG_DURATION:
            started = source.backlog_started_ms
            found.append((0.0 if started is None else max(0, now_ms - started) / 1000, attributes))
        elif instrument is names.CATCH_UP_BATCHES:
            found.append((float(source.catch_up_batches), attributes))
        elif instrument is names.RECORDS_IN:
            found.append((float(source.records), attributes))
        elif instrument is names.BYTES_IN:
            found.append((float(source.bytes), attributes))
    return found


def _partition(attributes: dict[str, str | int], bucket: Bucket) -> dict[str, str | int]:
    return {**attributes, names.MESSAGING_SYSTEM: "kafka", names.TOPIC: bucket.topic,
            names.PARTITION: str(bucket.partition)}
