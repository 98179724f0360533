"""The executor read path of a snapshot split: Parquet files -> Arrow record batches.

Which process: a Python worker on an executor. Batches come straight from pyarrow (no
per-row Python), conformed to the source's output schema.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from backlog_source.core.errors import SnapshotError
from backlog_source.core.schema import arrow_schema
from backlog_source.core.settings import ReaderConfig
from backlog_source.events.control_topic import publish, publish_once
from backlog_source.events.finish_event import BacklogFinishEvent
from backlog_source.split.kafka_split import SnapshotSplit

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 10_000


def read_snapshot_split(
    split: SnapshotSplit,
    config: ReaderConfig,
    *,
    publish_event: Callable[[ReaderConfig, BacklogFinishEvent], bool] = publish,
) -> Iterator[pa.RecordBatch]:
    """Yield the snapshot's rows; when the snapshot is the bucket's whole backlog, publish
    its BacklogFinishEvent (once per worker) after the last row, unless there is no control
    topic or the split's readers do not publish (``SnapshotSplit.publish_events``). Raises
    :class:`SnapshotError` naming a missing file."""
    fs, root = pafs.FileSystem.from_uri(split.root)
    schema = arrow_schema(config.include_headers)
    for relative in split.files:
        try:
            source = fs.open_input_file(f"{root}/{relative}")
        except FileNotFoundError:
            raise SnapshotError(
                f"snapshot file {relative} of {split.bucket} is missing under {split.root}; was the snapshot's "
                "data directory deleted while a query still needed it?"
            ) from None
        with source:
            for batch in pq.ParquetFile(source).iter_batches(batch_size=BATCH_ROWS):
                yield _conform(batch, schema)
    publishing = config.events_topic is not None and split.publish_events
    if publishing and split.finishes_backlog and split.boundary is not None:
        event = BacklogFinishEvent(
            source_id=split.source_id, topic=split.topic, partition=split.partition,
            boundary_offset=split.boundary, reached_offset=split.log_offset,
            emitted_at_ms=int(time.time() * 1000), traceparent=split.traceparent,
        )
        publish_once(config, event, publish_event)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """The batch in the query's schema: ``headers`` NULL when the snapshot has none (taken
    without ``includeHeaders``), as Spark's Kafka source gives NULL for a record without
    headers; an empty list is a value it never produces."""
    columns = []
    for field in schema:
        if field.name in batch.schema.names:
            columns.append(batch.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(batch.num_rows, field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
