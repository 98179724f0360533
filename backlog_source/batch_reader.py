"""``spark.read.format("backlog")``: the reader of a batch query (which process runs which
hook: :mod:`backlog_source.datasource`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from backlog_source.core.settings import ReaderConfig, SourceSettings
from backlog_source.enumerator.batch_range import batch_reads
from backlog_source.enumerator.kafka_admin import KafkaAdmin
from backlog_source.reader.kafka_reader import read_split
from backlog_source.reader.worker_heap import prepare_once
from backlog_source.split.batch_splits import plan_splits
from backlog_source.split.kafka_split import KafkaSplit


class BacklogBatchReader(DataSourceReader):
    """``spark.read.format("backlog")``: the range from the starting to the ending options
    (:func:`~backlog_source.enumerator.batch_range.batch_reads`), in the same splits and read by
    the same read path (and consumer pool) as a streaming batch, without backlog boundaries
    or events.

    ``partitions`` runs in the Python worker Spark starts on the driver to plan the read;
    ``read`` on executors, on a pickled copy holding only the reader configuration."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings: SourceSettings | None = settings
        self.reader_config: ReaderConfig = replace(settings.reader_config, events_topic=None)

    def __getstate__(self) -> dict:
        return {"settings": None, "reader_config": self.reader_config}

    def partitions(self) -> list[InputPartition]:
        settings = self.settings
        if settings is None:
            raise RuntimeError("the planner's settings are not shipped to executors")
        client = KafkaAdmin.from_settings(settings)
        try:
            reads = batch_reads(settings, client)
        finally:
            client.close()
        splits = [s for s in plan_splits(reads, settings) if not isinstance(s, KafkaSplit) or s.ranges]
        # Nothing to read: one split of no range (PySpark replaces an empty list with a bare
        # InputPartition, which no reader of ours could read).
        return splits or [KafkaSplit(())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        prepare_once()
        if not isinstance(partition, KafkaSplit):
            raise TypeError(f"expected a KafkaSplit, got {type(partition).__name__}")
        return read_split(partition, self.reader_config)
