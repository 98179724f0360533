"""The Spark-facing surface: ``spark.readStream.format("backlog")``.

Thin adapters only: each hook translates between Spark's types (JSON dicts, read limits,
input partitions) and the enumerator's, the splits' or the reader's. Planning lives in
:mod:`backlog_source.enumerator`, the splits of a batch in :mod:`backlog_source.split`, reading
in :mod:`backlog_source.reader`.

Which process runs what:

* ``BacklogDataSource.__init__`` and ``schema``: the Python worker Spark starts when the
  query calls ``load()`` (a bad option fails there, before any data is read).
* ``BacklogStreamReader.initialOffset``, ``latestOffset``, ``partitions``, ``commit``,
  ``getDefaultReadLimit``, ``reportLatestOffset``, ``prepareForTriggerAvailableNow``: one
  long-lived Python worker on the driver, for the life of the query run.
* ``BacklogStreamReader.read``: Python workers on executors, on a copy of the reader that
  Spark pickled when it planned the query. That copy holds settings only.
* ``BacklogBatchReader.partitions`` (``spark.read``): the Python worker Spark starts on the
  driver to plan the read; ``BacklogBatchReader.read``: Python workers on executors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from backlog_source.core import step_timings
from backlog_source.core.buckets import to_nested
from backlog_source.core.errors import ConfigError
from backlog_source.core.schema import kafka_schema
from backlog_source.core.settings import ReaderConfig, SourceSettings, parse_options
from backlog_source.core.tracing import exporter
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.batch_range import batch_reads
from backlog_source.enumerator.enumerator import Enumerator
from backlog_source.enumerator.kafka_admin import KafkaAdmin
from backlog_source.events.control_topic import ControlTopic
from backlog_source.reader.kafka_reader import read_split
from backlog_source.reader.snapshot_reader import read_snapshot_split
from backlog_source.reader.worker_heap import prepare_once
from backlog_source.split.batch_splits import plan_splits
from backlog_source.split.kafka_split import KafkaSplit, SnapshotSplit
from backlog_source.split.planning import ReadBudget


class BacklogDataSource(DataSource):
    """A drop-in replacement for Spark's Kafka source, registered as ``"backlog"``.

    >>> spark.dataSource.register(BacklogDataSource)
    >>> spark.readStream.format("backlog").option("subscribe", "orders")...
    """

    def __init__(self, options) -> None:
        super().__init__(options)
        # A bad option fails load(). Whether the read is a stream or a batch is not known yet:
        # each reader checks the options of its kind (the ending options, the batch range).
        self._settings: SourceSettings | None = parse_options(options)
        exporter.validate_environment()  # so does a bad OTEL_* setting

    def __getstate__(self) -> dict:
        # Spark pickles the data source into every task (for name()); the parsed settings
        # stay behind and are parsed again where they are needed (the planner worker).
        return {**self.__dict__, "_settings": None}

    @property
    def settings(self) -> SourceSettings:
        if self._settings is None:
            self._settings = parse_options(self.options)
        return self._settings

    @classmethod
    def name(cls) -> str:
        return "backlog"

    def schema(self) -> StructType:
        return kafka_schema(self.settings.include_headers)

    def streamReader(self, schema: StructType) -> "BacklogStreamReader":
        self._check_schema(schema)
        return BacklogStreamReader(parse_options(self.options, read="stream"))

    def reader(self, schema: StructType) -> "BacklogBatchReader":
        """``spark.read.format("backlog")``: a batch read of the range the starting and ending
        options give, as ``format("kafka")`` reads it."""
        self._check_schema(schema)
        return BacklogBatchReader(parse_options(self.options, read="batch"))

    def _check_schema(self, schema: StructType) -> None:
        expected = kafka_schema(self.settings.include_headers)
        if schema != expected:
            raise ConfigError(
                "format('backlog') has a fixed schema, like Spark's Kafka source; remove the "
                f".schema(...) call. Expected {expected.simpleString()}, got {schema.simpleString()}"
            )


def set_worker_environment(spark, env: Mapping[str, str | None]) -> None:
    """Set (None: remove) variables for the Python workers of queries started from now on.

    Which process: the user's driver program. Spark passes ``SparkContext.environment``
    (filled from ``spark.executorEnv.*``) to the driver's and executors' Python workers, but
    captures it when a data source is registered, so this registers the source again. Each
    distinct environment gets its own pool of Python workers.
    """
    environment = spark.sparkContext.environment
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    spark.dataSource.register(BacklogDataSource)


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


class BacklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's stream-reader hooks, delegating to :class:`~backlog_source.enumerator.enumerator.Enumerator`
    on the driver and to :func:`~backlog_source.reader.kafka_reader.read_split` on executors."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings: SourceSettings | None = settings
        self.reader_config: ReaderConfig = settings.reader_config
        self._enumerator: Enumerator | None = None

    def __getstate__(self) -> dict:
        # Spark pickles this object into every task: executors get the narrow reader
        # configuration only, never the planner's settings or a Kafka client.
        return {"settings": None, "reader_config": self.reader_config, "_enumerator": None}

    @property
    def enumerator(self) -> Enumerator:
        if self._enumerator is None:
            settings = self._driver_settings()
            client = KafkaAdmin.from_settings(settings)
            control = ControlTopic(settings, client) if settings.backlog_enabled else None
            self._enumerator = Enumerator(settings, client, control)
        return self._enumerator

    def _driver_settings(self) -> SourceSettings:
        if self.settings is None:
            raise RuntimeError("the planner's settings are not shipped to executors")
        return self.settings

    # -- driver --------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return offset_codec.encode(self.enumerator.initial_offset())

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark's Python API has no composite limit, and the limit must follow the backlog
        # state, which changes while the query runs. So the default limit is a marker that
        # means "the source's own options decide" (see _budget).
        budget = ReadBudget.from_settings(self._driver_settings())
        if budget.caps:
            return ReadMaxRows(max(budget.caps))
        if budget.min_records is not None:
            return ReadMinRows(budget.min_records)
        if budget.backlog_max_bytes is not None:
            return ReadMaxBytes(budget.backlog_max_bytes)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start_offset = offset_codec.decode(start)
        end = self.enumerator.latest_offset(start_offset, self._budget(limit))
        # Returning the very dict Spark gave us tells it there is nothing new to run.
        return start if end == start_offset else offset_codec.encode(end)

    def _budget(self, limit: ReadLimit) -> ReadBudget:
        """The batch budget for Spark's ``limit``.

        Our default limit means: the source's own options decide (:meth:`ReadBudget.from_settings`):
        ``backlog.maxOffsetsPerTrigger``, ``backlog.maxBytesPerTrigger`` and
        ``backlog.targetBatchDuration`` while processing backlog (the enumerator applies them
        once it knows this batch's backlog state), else ``maxOffsetsPerTrigger`` (or
        everything), with ``minOffsetsPerTrigger`` applied too. Spark hands the default limit
        back for processing-time triggers and ``Trigger.AvailableNow``; any other limit is
        honoured as given: ``ReadAllAvailable``, which Spark passes for ``Trigger.Once``
        (``MicroBatchExecution``: a one-time trigger reads everything), reads everything, as
        Spark's Kafka source does there.
        """
        if limit == self.getDefaultReadLimit() and not isinstance(limit, ReadAllAvailable):
            return ReadBudget.from_settings(self._driver_settings())
        if isinstance(limit, ReadMaxRows):
            return ReadBudget(max_records=limit.max_rows)
        if isinstance(limit, ReadMinRows):
            return ReadBudget(min_records=limit.min_rows)
        return ReadBudget()

    def reportLatestOffset(self) -> dict | None:
        latest = self.enumerator.report_latest()
        return to_nested(latest) if latest else None

    def prepareForTriggerAvailableNow(self) -> None:
        self.enumerator.prepare_for_available_now()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The splits of the batch ``[start, end)``, planned by the enumerator
        (:func:`~backlog_source.split.batch_splits.plan_splits`): a pure function of the two
        offsets, so a replayed batch gets the same splits."""
        with step_timings.step("driver.partitions"):
            reads = offset_codec.decode(end).reads_since(offset_codec.decode(start))
            return plan_splits(reads, self._driver_settings())

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._enumerator is not None:
            self._enumerator.close()
            self._enumerator = None

    # -- executors -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        prepare_once()
        if isinstance(partition, SnapshotSplit):
            return read_snapshot_split(partition, self.reader_config)
        if not isinstance(partition, KafkaSplit):
            raise TypeError(f"expected a KafkaSplit or SnapshotSplit, got {type(partition).__name__}")
        return read_split(partition, self.reader_config)
