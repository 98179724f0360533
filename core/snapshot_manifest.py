"""The snapshot manifest: ``_manifest.json`` at the snapshot's root, written last.

Shape, version 1::

    {"version": 1, "topic": "orders", "snapshot_id": "7f0c…", "created_ms": 1763800000000,
     "partitions": {"0": {"log_offset": 1234, "rows": 1000,
                          "files": ["data/7f0c…/partition=0/part-0.parquet"]}}}

``log_offset`` is the next offset after the snapshot: the log continues there. ``files`` are
relative to the snapshot's root. A snapshot exists exactly when its manifest does: data
files are written first, the manifest last, so a reader never sees half a snapshot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from backlog_source.core.codec import VersionedCodec
from backlog_source.core.errors import SnapshotError

MANIFEST_NAME = "_manifest.json"
#: The manifest's versions (the shape of :mod:`.codec`): 1 is written and read.
MANIFEST_CODEC = VersionedCodec("snapshot manifest", "version", 1, SnapshotError)


@dataclass(frozen=True)
class PartitionSnapshot:
    log_offset: int
    rows: int
    files: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    topic: str
    snapshot_id: str
    created_ms: int
    partitions: dict[int, PartitionSnapshot]

    def to_json(self) -> dict[str, Any]:
        return MANIFEST_CODEC.stamp({
            "topic": self.topic,
            "snapshot_id": self.snapshot_id,
            "created_ms": self.created_ms,
            "partitions": {
                str(p): {"log_offset": s.log_offset, "rows": s.rows, "files": list(s.files)}
                for p, s in sorted(self.partitions.items())
            },
        })

    def encode(self) -> bytes:
        return (json.dumps(self.to_json(), indent=2) + "\n").encode()

    @classmethod
    def decode(cls, payload: bytes, where: str) -> "Manifest":
        """Parse a manifest read from ``where``; raises :class:`SnapshotError` naming the problem."""
        try:
            data = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SnapshotError(f"{where} is not JSON: {exc}") from None
        data = MANIFEST_CODEC.current_shape(data, where=where)
        try:
            partitions = {
                int(p): PartitionSnapshot(int(s["log_offset"]), int(s["rows"]), tuple(str(f) for f in s["files"]))
                for p, s in data["partitions"].items()
            }
            manifest = cls(str(data["topic"]), str(data["snapshot_id"]), int(data["created_ms"]), partitions)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"{where} is malformed: missing or invalid {exc}") from None
        if any(s.log_offset < 0 or s.rows < 0 for s in partitions.values()):
            raise SnapshotError(f"{where} is malformed: offsets and row counts must be >= 0")
        return manifest

    def check_fits(self, topic: str, partitions: set[int]) -> None:
        """Raise :class:`SnapshotError` unless this snapshot is of ``topic`` and names only
        partitions it has."""
        if self.topic != topic:
            raise SnapshotError(f"the snapshot is of topic {self.topic!r}, not {topic!r}")
        unknown = sorted(set(self.partitions) - partitions)
        if unknown:
            raise SnapshotError(
                f"the snapshot of {topic!r} names partition(s) {unknown} that the topic does not have"
            )


def load_manifest(path: str) -> tuple[pafs.FileSystem, str, Manifest]:
    """The filesystem, root and manifest of the snapshot at ``path``; raises
    :class:`SnapshotError` when there is none (e.g. one still being written) or it is malformed."""
    fs, root = pafs.FileSystem.from_uri(path)
    where = f"{path.rstrip('/')}/{MANIFEST_NAME}"
    try:
        with fs.open_input_stream(f"{root}/{MANIFEST_NAME}") as stream:
            payload = stream.read()
    except FileNotFoundError:
        raise SnapshotError(f"no snapshot at {path}: {MANIFEST_NAME} does not exist (not written, or not yet)") from None
    return fs, root, Manifest.decode(payload, where)
