"""The offset dict: everything the source checkpoints, as versioned JSON, and its one parser.

Spark stores the dict that ``latestOffset`` returns in the query's offset log and hands it
back as ``start``/``end`` of a batch, also after a restart. So it must hold everything a
replayed batch needs: read positions and the backlog state of every bucket. Every reader of
a checkpointed or reported offset (the enumerator, ``partitions()``, the mode-switch
listener, the demo, :func:`~backlog_source.metrics.lag_metrics`) parses it here.

Shape, version 2 (the end of one micro-batch)::

    {"v": 2,
     "source_id": "7f0c…",                      # stable for the life of the checkpoint
     "positions": {"orders": {"0": 1234}},     # next offset to read, Spark's Kafka shape
     "starts": {"clicks": {"0": 0}},           # where this batch starts a new or reset bucket
     "backlog": {"orders": {"1": 5000}},       # boundary of each bucket still below it after this batch
     "finishing": {"orders": {"0": 1200}},     # boundaries this batch reaches (they leave with its commit)
     "processing_backlog": true,                # == bool(backlog): the state once this batch commits
     "events_position": 17,                     # next control-topic offset to read
     "event_counts": {"handled": 3, ...},       # how control messages read so far were treated
     "trace": {"traceparent": "00-…-…-01", …},  # the backlog phase's trace (enumerator/phase_trace.py), or null
     "snapshot": {"root": "s3://…", "id": "…",   # snapshot.path: buckets whose snapshot is still to be read
                  "pending": {"orders": {"0": ["data/…/part-0.parquet"]}}}}  # or null

Positions are *next offsets*: a batch with ``start`` and ``end`` reads ``[start, end)`` of
each bucket. A boundary is a log end offset: the bucket leaves backlog once its consumer
position reaches it. Because Spark reports this dict as the ``endOffset`` of the batch that
has just committed, ``processing_backlog`` says whether backlog is left *after* that batch:
the batch that reads the last backlog record already reports false, so the switch to low
latency needs no extra batch. A stored example of every released version is read by
``tests/unit/core/test_offset.py`` (``tests/fixtures/offsets/``).

Pure data and codecs; the transitions live in :mod:`backlog_source.enumerator.boundaries` and
:mod:`backlog_source.enumerator.phase_trace`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backlog_source.core.buckets import Bucket, from_nested, to_nested
from backlog_source.core.errors import OffsetFormatError
from backlog_source.core.tracing.context import SpanContextIds, derived_span_id

#: Outcomes of one control-topic message, counted in ``EventCounts``. ``implausible``: an
#: event for a bucket no planned batch has carried to that boundary (forged, or not ours).
HANDLED, DUPLICATE, FOREIGN, STALE, MALFORMED, IMPLAUSIBLE = (
    "handled", "duplicate", "foreign", "stale", "malformed", "implausible"
)
#: A bucket finished by its committed position because its event never arrived.
BY_POSITION = "finished_by_position"
COUNT_KINDS = (HANDLED, DUPLICATE, FOREIGN, STALE, MALFORMED, IMPLAUSIBLE, BY_POSITION)


@dataclass(frozen=True)
class EventCounts:
    """How the control-topic messages read so far were treated (checkpointed with them)."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int = 1) -> "EventCounts":
        return EventCounts({**self.counts, kind: self.counts.get(kind, 0) + n})

    def __getitem__(self, kind: str) -> int:
        return self.counts.get(kind, 0)

    def to_json(self) -> dict[str, int]:
        return {kind: self.counts.get(kind, 0) for kind in COUNT_KINDS}

    @classmethod
    def from_json(cls, data: Any) -> "EventCounts":
        if data is None:
            return cls()
        if not isinstance(data, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in data.values()
        ):
            raise OffsetFormatError("offset field 'event_counts' must map kinds to counts >= 0")
        return cls({k: v for k, v in data.items() if k in COUNT_KINDS and v})


@dataclass(frozen=True)
class OpenBucket:
    """A ``backlog.bucket`` span not finished yet."""

    start_offset: int
    boundary: int
    started_ms: int


@dataclass(frozen=True)
class PhaseTrace:
    """The current (or last) backlog phase's trace; immutable."""

    ids: SpanContextIds
    started_ms: int
    topics: tuple[str, ...] = ()
    bucket_count: int = 0
    records: int = 0
    buckets: dict[Bucket, OpenBucket] = field(default_factory=dict)

    @property
    def open(self) -> bool:
        return bool(self.buckets)

    def bucket_ids(self, bucket: Bucket, boundary: int) -> SpanContextIds:
        """The ``backlog.bucket`` span of ``bucket`` with ``boundary`` in this phase."""
        span_id = derived_span_id(self.ids.trace_id, bucket.topic, bucket.partition, boundary)
        return SpanContextIds(self.ids.trace_id, span_id)

    def to_json(self) -> dict[str, Any]:
        nested: dict[str, dict[str, list[int]]] = {}
        for bucket in sorted(self.buckets):
            entry = self.buckets[bucket]
            nested.setdefault(bucket.topic, {})[str(bucket.partition)] = [entry.start_offset, entry.boundary, entry.started_ms]
        return {
            "traceparent": self.ids.traceparent,
            "started_ms": self.started_ms,
            "topics": list(self.topics),
            "bucket_count": self.bucket_count,
            "records": self.records,
            "buckets": nested,
        }

    @classmethod
    def from_json(cls, data: Any) -> "PhaseTrace | None":
        if data is None:
            return None
        if not isinstance(data, dict):
            raise OffsetFormatError(f"offset field 'trace' must be an object or null, got {data!r}")
        ids = SpanContextIds.parse(data.get("traceparent"))
        if ids is None:
            raise OffsetFormatError(f"offset field 'trace.traceparent' is not a W3C traceparent: {data.get('traceparent')!r}")
        try:
            buckets = {
                Bucket(topic, int(partition)): OpenBucket(int(entry[0]), int(entry[1]), int(entry[2]))
                for topic, partitions in data.get("buckets", {}).items()
                for partition, entry in partitions.items()
            }
            return cls(
                ids=ids,
                started_ms=int(data["started_ms"]),
                topics=tuple(str(t) for t in data.get("topics", [])),
                bucket_count=int(data.get("bucket_count", 0)),
                records=int(data.get("records", 0)),
                buckets=buckets,
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise OffsetFormatError(f"offset field 'trace' is malformed: {exc!r}") from None


def bucket_traceparent(trace: PhaseTrace | None, bucket: Bucket) -> str | None:
    """The W3C context a split of ``bucket`` carries: its open bucket span, else None."""
    entry = None if trace is None else trace.buckets.get(bucket)
    if entry is None:
        return None
    return trace.bucket_ids(bucket, entry.boundary).traceparent


@dataclass(frozen=True)
class SnapshotState:
    """The snapshot a query started from: ``pending`` maps each bucket whose snapshot has not
    been read yet to its files (relative to ``root``). A batch whose start has a bucket
    pending and whose end does not reads that bucket's snapshot, so a replayed batch reads
    the same files."""

    root: str
    snapshot_id: str
    pending: dict[Bucket, tuple[str, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        nested: dict[str, dict[str, list[str]]] = {}
        for bucket in sorted(self.pending):
            nested.setdefault(bucket.topic, {})[str(bucket.partition)] = list(self.pending[bucket])
        return {"root": self.root, "id": self.snapshot_id, "pending": nested}

    @classmethod
    def from_json(cls, data: Any) -> "SnapshotState | None":
        if data is None:
            return None
        try:
            pending = {
                Bucket(topic, int(partition)): tuple(str(f) for f in files)
                for topic, partitions in data["pending"].items()
                for partition, files in partitions.items()
            }
            return cls(str(data["root"]), str(data["id"]), pending)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OffsetFormatError(f"offset field 'snapshot' is malformed: {exc!r}") from None

VERSION = 2
#: Version 1 (release 0.1.0) is read and upgraded; see :meth:`SourceOffset.from_json`.
SUPPORTED_VERSIONS = (1, 2)


@dataclass(frozen=True)
class SourceOffset:
    """One checkpointed offset of the source (the end of one micro-batch); immutable.

    * ``positions``: the next offset of each bucket once the batch has been read.
    * ``starts``: where the batch begins reading a bucket when that is not the previous
      batch's position: a bucket discovered in this batch (its earliest offset) or reset
      because its offsets moved backwards. ``partitions(start, end)`` reads
      ``[end.starts.get(b, start.positions[b]), end.positions[b])``.
    * ``backlog``: the boundary of each bucket still below it once the batch is read.
    * ``finishing``: the boundary of each bucket this batch carries to (or past) it; the
      bucket leaves backlog when the batch commits, and the next batch records why (its
      event, or the committed position). Splits of these buckets carry the boundary, so the
      reader that crosses it publishes the BacklogFinishEvent.
    """

    source_id: str
    positions: dict[Bucket, int]
    backlog: dict[Bucket, int] = field(default_factory=dict)
    finishing: dict[Bucket, int] = field(default_factory=dict)
    starts: dict[Bucket, int] = field(default_factory=dict)
    events_position: int = 0
    event_counts: EventCounts = field(default_factory=EventCounts)
    trace: PhaseTrace | None = None
    snapshot: SnapshotState | None = None

    @property
    def processing_backlog(self) -> bool:
        """True while some bucket is still below its boundary once this batch is read: the
        flag a progress event reports for the batch that has just committed."""
        return bool(self.backlog)

    @property
    def boundaries(self) -> dict[Bucket, int]:
        """Every boundary this batch's reads carry: still pending or reached by this batch."""
        return {**self.finishing, **self.backlog}

    def read_start(self, previous: "SourceOffset", bucket: Bucket) -> int | None:
        """Where this batch begins reading ``bucket``, given the previous batch's end; None
        for a bucket this batch does not read."""
        if bucket in self.starts:
            return self.starts[bucket]
        return previous.positions.get(bucket)

    def to_json(self) -> dict[str, Any]:
        """The dict Spark checkpoints (JSON-serialisable, deterministic key order)."""
        return {
            "v": VERSION,
            "source_id": self.source_id,
            "positions": to_nested(self.positions),
            "starts": to_nested(self.starts),
            "backlog": to_nested(self.backlog),
            "finishing": to_nested(self.finishing),
            "processing_backlog": self.processing_backlog,
            "events_position": self.events_position,
            "event_counts": self.event_counts.to_json(),
            "trace": None if self.trace is None else self.trace.to_json(),
            "snapshot": None if self.snapshot is None else self.snapshot.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> "SourceOffset":
        """Parse a dict written by :meth:`to_json`, of this release or an earlier one.

        Version 1 had no ``starts`` and no ``finishing``: its ``backlog`` held every boundary
        the batch was planned with, including those its positions had already reached; those
        are read as ``finishing``, except a bucket whose snapshot is still to be read (its
        boundary is its snapshot's log offset, which its position equals before the read).

        Raises :class:`OffsetFormatError` for an unknown version or a malformed dict, e.g. a
        checkpoint written by Spark's ``kafka`` source or by a newer backlog-source.
        """
        if not isinstance(data, dict):
            raise OffsetFormatError(f"a backlog-source offset must be a JSON object, got {type(data).__name__}")
        version = data.get("v")
        if version not in SUPPORTED_VERSIONS:
            raise OffsetFormatError(
                f"offset version {version!r} is not understood; this backlog-source reads versions "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))}. Was the checkpoint written by another "
                "source or a newer release?"
            )
        source_id = data.get("source_id")
        if not isinstance(source_id, str) or not source_id:
            raise OffsetFormatError("offset field 'source_id' must be a non-empty string")
        events_position = data.get("events_position", 0)
        if not isinstance(events_position, int) or isinstance(events_position, bool) or events_position < 0:
            raise OffsetFormatError(f"offset field 'events_position' must be an integer >= 0, got {events_position!r}")
        positions = from_nested(data.get("positions", {}), "offset field 'positions'")
        backlog = from_nested(data.get("backlog", {}), "offset field 'backlog'")
        finishing = from_nested(data.get("finishing", {}), "offset field 'finishing'")
        snapshot = SnapshotState.from_json(data.get("snapshot"))
        if version == 1:
            unread = snapshot.pending if snapshot is not None else {}
            finishing = {b: o for b, o in backlog.items() if b not in unread and positions.get(b, -1) >= o}
            backlog = {b: o for b, o in backlog.items() if b not in finishing}
        return cls(
            source_id=source_id,
            positions=positions,
            backlog=backlog,
            finishing=finishing,
            starts=from_nested(data.get("starts", {}), "offset field 'starts'"),
            events_position=events_position,
            event_counts=EventCounts.from_json(data.get("event_counts")),
            trace=PhaseTrace.from_json(data.get("trace")),
            snapshot=snapshot,
        )


def parse_reported(value: Any) -> SourceOffset | None:
    """The backlog-source offset in a progress event's ``startOffset``/``endOffset`` or in a
    line of the checkpoint's offset log (JSON text or its dict), or None when the value is
    another source's offset (Spark's Kafka source, the rate source...) or empty.

    Raises :class:`OffsetFormatError` for a backlog-source offset this release cannot read,
    e.g. one written by a newer release.
    """
    if not value:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not (isinstance(value, dict) and "source_id" in value and "positions" in value):
        return None
    return SourceOffset.from_json(value)
