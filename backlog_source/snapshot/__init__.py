"""Snapshots of a keyed topic: the latest record per key, as Parquet plus a manifest.

:mod:`.manifest` is the format (and its errors); :mod:`.writer` takes a snapshot
(``backlog-source snapshot`` runs it). Reading a snapshot as the start of a query
(``snapshot.path``) is not built yet.
"""

from backlog_source.snapshot.manifest import MANIFEST_NAME, Manifest, PartitionSnapshot, SnapshotError
from backlog_source.snapshot.writer import latest_per_key, take_snapshot

__all__ = ["MANIFEST_NAME", "Manifest", "PartitionSnapshot", "SnapshotError", "latest_per_key", "take_snapshot"]
