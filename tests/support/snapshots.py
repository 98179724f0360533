"""Test tooling: the rows of a published snapshot, read back whole to compare with a replay of
the log. (A query reads a snapshot split by split: :mod:`backlog_source.reader.snapshot_reader`.)"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from backlog_source.core.errors import SnapshotError
from backlog_source.core.snapshot_manifest import Manifest


def read_partition(fs: pafs.FileSystem, root: str, manifest: Manifest, partition: int) -> pa.Table:
    """The rows of one partition's snapshot; raises :class:`SnapshotError` for a missing file."""
    entry = manifest.partitions.get(partition)
    if entry is None:
        raise SnapshotError(f"the snapshot of {manifest.topic!r} has no partition {partition}")
    tables = []
    for relative in entry.files:
        try:
            tables.append(pq.read_table(f"{root}/{relative}", filesystem=fs))
        except FileNotFoundError:
            raise SnapshotError(
                f"snapshot {manifest.snapshot_id} lists {relative} for partition {partition}, but the file is missing"
            ) from None
    return pa.concat_tables(tables) if tables else pa.table({})
