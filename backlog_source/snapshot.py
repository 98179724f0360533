"""Take a snapshot: read a topic up to its current end offsets, keep the latest record per
key (a null value deletes the key), write Parquet per partition, then the manifest.

Which process: the caller's (``backlog-source snapshot``, or Python). Reads go through the
source's own split reader (:func:`backlog_source.reader.kafka_reader.read_split`), so records arrive as
Arrow batches with the source's output columns and data loss fails the snapshot.
Storage goes through ``pyarrow.fs``: local paths and the URIs pyarrow supports (``s3://``,
``hdfs://``, ``gs://``...).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import SnapshotError
from backlog_source.core.schema import arrow_schema
from backlog_source.core.settings import SourceSettings, parse_options
from backlog_source.core.snapshot_manifest import MANIFEST_NAME, Manifest, PartitionSnapshot
from backlog_source.enumerator.kafka_admin import KafkaAdmin
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit

log = logging.getLogger(__name__)

#: Fold the records read so far into latest-per-key state every this many rows, so memory
#: follows the number of keys rather than the number of records.
COMPACT_EVERY_ROWS = 1_000_000
_ROW = "__row"


def latest_per_key(table: pa.Table, drop_deletes: bool = True) -> pa.Table:
    """The last row of each key in ``table`` (rows in log order), sorted by offset; rows
    whose latest value is null (deletes) are dropped unless ``drop_deletes`` is False.

    Raises :class:`SnapshotError` for a record without a key: a keyed snapshot has no
    place for it.
    """
    if table.num_rows == 0:
        return table
    keys = table.column("key")
    if keys.null_count:
        first = table.filter(pc.is_null(keys)).slice(0, 1).to_pylist()[0]
        raise SnapshotError(
            f"record at offset {first['offset']} of {first['topic']}-{first['partition']} has no key; a snapshot "
            "keeps the latest record per key, so every record needs one"
        )
    indexed = table.append_column(_ROW, pa.array(range(table.num_rows), pa.int64()))
    last_rows = indexed.group_by("key", use_threads=False).aggregate([(_ROW, "max")]).column(f"{_ROW}_max")
    last_rows = pc.take(last_rows, pc.sort_indices(last_rows))  # back in log order
    latest = table.take(last_rows)
    if drop_deletes:
        latest = latest.filter(pc.is_valid(latest.column("value")))
    return latest


def take_snapshot(
    options: Mapping[str, str],
    topic: str,
    path: str,
    *,
    clock: Callable[[], float] = time.time,
) -> Manifest:
    """Snapshot ``topic`` under ``path``; returns the manifest published.

    ``options``: the source's options for reaching the cluster (``kafka.bootstrap.servers``,
    security settings). Each partition is read from its earliest offset to its log end at
    the start (``log_offset`` in the manifest). Data files go to ``data/<snapshot id>/``; the
    manifest replaces any previous one last, atomically, so readers see the old snapshot or
    the new one, never a mix. Older data directories are left for readers still using them.
    Raises :class:`SnapshotError` (no such topic, a record without a key),
    :class:`~backlog_source.core.errors.DataLossError`, or
    :class:`~backlog_source.core.errors.KafkaUnavailableError`.
    """
    settings = parse_options({**options, "subscribe": topic, "failOnDataLoss": "true", "backlog.enabled": "false"})
    client = KafkaAdmin.from_settings(settings)
    try:
        count = client.partition_counts([topic]).get(topic)
        if not count:
            raise SnapshotError(f"topic {topic!r} does not exist")
        buckets = [Bucket(topic, p) for p in range(count)]
        earliest, ends = client.earliest_offsets(buckets), client.latest_offsets(buckets)
    finally:
        client.close()

    fs, root = pafs.FileSystem.from_uri(path)
    snapshot_id = uuid.uuid4().hex
    partitions: dict[int, PartitionSnapshot] = {}
    for bucket in buckets:
        table = _latest_of_partition(settings, bucket, earliest[bucket], ends[bucket])
        relative = f"data/{snapshot_id}/partition={bucket.partition}/part-0.parquet"
        fs.create_dir(f"{root}/data/{snapshot_id}/partition={bucket.partition}", recursive=True)
        pq.write_table(table, f"{root}/{relative}", filesystem=fs)
        partitions[bucket.partition] = PartitionSnapshot(ends[bucket], table.num_rows, (relative,))
        log.info("snapshot of %s: %d keys up to offset %d", bucket, table.num_rows, ends[bucket])
    manifest = Manifest(topic, snapshot_id, int(clock() * 1000), partitions)
    _publish(fs, root, manifest)
    return manifest


def _latest_of_partition(settings: SourceSettings, bucket: Bucket, start: int, end: int) -> pa.Table:
    state = arrow_schema(settings.include_headers).empty_table()
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for batch in read_split(KafkaSplit((KafkaRange(bucket.topic, bucket.partition, start, end),)), settings.reader_config):
        pending.append(batch)
        pending_rows += batch.num_rows
        if pending_rows >= COMPACT_EVERY_ROWS:
            state = latest_per_key(_concat(state, pending), drop_deletes=False)
            pending, pending_rows = [], 0
    return latest_per_key(_concat(state, pending))


def _concat(state: pa.Table, batches: list[pa.RecordBatch]) -> pa.Table:
    if not batches:
        return state
    return pa.concat_tables([state, pa.Table.from_batches(batches)])


def _publish(fs: pafs.FileSystem, root: str, manifest: Manifest) -> None:
    """Write the manifest beside the data, then move it into place in one step."""
    temporary = f"{root}/.{MANIFEST_NAME}.{manifest.snapshot_id}.tmp"
    with fs.open_output_stream(temporary) as out:
        out.write(manifest.encode())
    fs.move(temporary, f"{root}/{MANIFEST_NAME}")
