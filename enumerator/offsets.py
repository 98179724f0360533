"""The offset dict: everything the source checkpoints, as versioned JSON.

Spark stores the dict that ``latestOffset`` returns in the query's offset log and hands it
back as ``start``/``end`` of a batch, also after a restart. So it must hold everything a
replayed batch needs: read positions and the backlog state of every bucket.

Shape, version 1::

    {"v": 1,
     "source_id": "7f0c…",                      # stable for the life of the checkpoint
     "positions": {"orders": {"0": 1234}},     # next offset to read, Spark's Kafka shape
     "backlog": {"orders": {"1": 5000}},       # boundary of each bucket still in backlog
     "processing_backlog": true,                # == bool(backlog)
     "events_position": 17,                     # next control-topic offset to read
     "event_counts": {"handled": 3, ...},       # how control messages read so far were treated
     "trace": {"traceparent": "00-…-…-01", …},  # the backlog phase's trace (enumerator/phase_trace.py), or null
     "snapshot": {"root": "s3://…", "id": "…",   # snapshot.path: buckets whose snapshot is still to be read
                  "pending": {"orders": {"0": ["data/…/part-0.parquet"]}}}}  # or null

Positions are *next offsets*: a batch with ``start`` and ``end`` reads ``[start, end)`` of
each bucket. A boundary is a log end offset: the bucket leaves backlog once its consumer
position reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backlog_source.buckets import Bucket, from_nested, to_nested
from backlog_source.errors import OffsetFormatError
from enumerator.backlog import BacklogState, EventCounts
from enumerator.phase_trace import PhaseTrace


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

VERSION = 1
SUPPORTED_VERSIONS = (1,)


@dataclass(frozen=True)
class SourceOffset:
    """One checkpointed offset of the source; immutable, compared by value."""

    source_id: str
    positions: dict[Bucket, int]
    backlog: dict[Bucket, int] = field(default_factory=dict)
    events_position: int = 0
    event_counts: EventCounts = field(default_factory=EventCounts)
    trace: PhaseTrace | None = None
    snapshot: SnapshotState | None = None

    @property
    def processing_backlog(self) -> bool:
        """True while some tracked bucket has not reached its boundary."""
        return bool(self.backlog)

    @property
    def backlog_state(self) -> BacklogState:
        return BacklogState(dict(self.backlog), self.event_counts)

    def to_json(self) -> dict[str, Any]:
        """The dict Spark checkpoints (JSON-serialisable, deterministic key order)."""
        return {
            "v": VERSION,
            "source_id": self.source_id,
            "positions": to_nested(self.positions),
            "backlog": to_nested(self.backlog),
            "processing_backlog": self.processing_backlog,
            "events_position": self.events_position,
            "event_counts": self.event_counts.to_json(),
            "trace": None if self.trace is None else self.trace.to_json(),
            "snapshot": None if self.snapshot is None else self.snapshot.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> "SourceOffset":
        """Parse a dict written by :meth:`to_json`.

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
        trace = PhaseTrace.from_json(data.get("trace"))
        return cls(
            source_id=source_id,
            positions=from_nested(data.get("positions", {}), "offset field 'positions'"),
            backlog=from_nested(data.get("backlog", {}), "offset field 'backlog'"),
            events_position=events_position,
            event_counts=EventCounts.from_json(data.get("event_counts")),
            trace=trace,
            snapshot=SnapshotState.from_json(data.get("snapshot")),
        )
