"""A split: the immutable plan of one Spark input partition.

Created on the driver by ``partitions(start, end)``, pickled to an executor, read there by
:func:`reader.kafka_reader.read_split`. It holds plain values only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from backlog_core.buckets import Bucket
from backlog_core.errors import OffsetFormatError

SPLIT_VERSION = 1


@dataclass(frozen=True)
class KafkaSplit(InputPartition):
    """Read offsets ``[start, end)`` of one bucket.

    ``boundary`` is the bucket's backlog boundary (a log end offset) while the bucket is in
    backlog, else None; the reader that moves the consumer position from below the boundary
    to at or past it reports that the bucket finished its backlog. ``source_id`` names the
    source instance (stable across restarts of one checkpoint); ``traceparent`` is the W3C
    trace context of the backlog phase, or None.
    """

    topic: str
    partition: int
    start: int
    end: int
    boundary: int | None = None
    source_id: str = ""
    traceparent: str | None = None

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"split of {self.topic}-{self.partition} has an invalid range [{self.start}, {self.end})")

    @property
    def bucket(self) -> Bucket:
        return Bucket(self.topic, self.partition)

    @property
    def crosses_boundary(self) -> bool:
        """True when reading this split takes the position from below the boundary to it."""
        return self.boundary is not None and self.start < self.boundary <= self.end

    def to_json(self) -> dict[str, Any]:
        return {"v": SPLIT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any) -> "KafkaSplit":
        if not isinstance(data, dict) or data.get("v") != SPLIT_VERSION:
            version = data.get("v") if isinstance(data, dict) else None
            raise OffsetFormatError(
                f"split version {version!r} is not understood; this release reads version {SPLIT_VERSION}"
            )
        fields = {k: v for k, v in data.items() if k != "v"}
        try:
            return cls(**fields)
        except TypeError as exc:
            raise OffsetFormatError(f"malformed split: {exc}") from None


@dataclass(frozen=True)
class SnapshotSplit(InputPartition):
    """Read one bucket's snapshot: Parquet ``files`` (relative to ``root``, a path or a
    ``pyarrow.fs`` URI) holding the latest record per key up to ``log_offset``.

    ``boundary`` is the bucket's backlog boundary when the batch was planned, or None; when
    it is <= ``log_offset`` the snapshot is the bucket's whole backlog, and the reader that
    read it reports the bucket finished.
    """

    topic: str
    partition: int
    root: str
    files: tuple[str, ...]
    log_offset: int
    boundary: int | None = None
    source_id: str = ""
    traceparent: str | None = None

    @property
    def bucket(self) -> Bucket:
        return Bucket(self.topic, self.partition)

    @property
    def finishes_backlog(self) -> bool:
        return self.boundary is not None and self.boundary <= self.log_offset
