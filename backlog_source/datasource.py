"""The Spark-facing surface: ``spark.readStream.format("backlog")`` and ``spark.read``.

Thin adapters only: each hook translates between Spark's types (JSON dicts, read limits,
input partitions) and the enumerator's, the splits' or the reader's. Planning lives in
:mod:`backlog_source.enumerator`, the splits of a batch in :mod:`backlog_source.split`, reading
in :mod:`backlog_source.reader`; the readers Spark asks for are in
:mod:`backlog_source.stream_reader` and :mod:`backlog_source.batch_reader`.

Which process runs what:

* ``BacklogDataSource.__init__`` and ``schema``: the Python worker Spark starts when the
  query calls ``load()`` (a bad option fails there, before any data is read). That process
  imports this module and no more: the readers, the enumerator and Arrow are imported by
  ``streamReader`` / ``reader``, in the processes that plan or read (a fresh process per
  ``load()``, so what it imports is paid at every query start and restart).
* ``BacklogStreamReader.initialOffset``, ``latestOffset``, ``partitions``, ``commit``,
  ``getDefaultReadLimit``, ``reportLatestOffset``, ``prepareForTriggerAvailableNow``: one
  long-lived Python worker on the driver, for the life of the query run.
* ``BacklogStreamReader.read``: Python workers on executors, on a copy of the reader that
  Spark pickled when it planned the query. That copy holds settings only.
* ``BacklogBatchReader.partitions`` (``spark.read``): the Python worker Spark starts on the
  driver to plan the read; ``BacklogBatchReader.read``: Python workers on executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from backlog_source.core.errors import ConfigError
from backlog_source.core.schema import kafka_schema
from backlog_source.core.settings import SourceSettings, include_headers, parse_options, parse_options_at_load
from backlog_source.core.spark_version import require_supported_pyspark
from backlog_source.core.tracing import exporter

if TYPE_CHECKING:
    from backlog_source.batch_reader import BacklogBatchReader
    from backlog_source.stream_reader import BacklogStreamReader


class BacklogDataSource(DataSource):
    """A drop-in replacement for Spark's Kafka source, registered as ``"backlog"``.

    >>> spark.dataSource.register(BacklogDataSource)
    >>> spark.readStream.format("backlog").option("subscribe", "orders")...
    """

    def __init__(self, options) -> None:
        # load(), in a worker of the Spark that runs the query: an older one is refused here.
        require_supported_pyspark()
        super().__init__(options)
        # A bad option fails load(), unless whether the read is a stream or a batch decides
        # which problem Spark reports first: then the reader Spark asks for reports it.
        self._settings: SourceSettings | None = parse_options_at_load(options)
        exporter.validate_environment()  # so does a bad OTEL_* setting

    def __getstate__(self) -> dict:
        # Spark pickles the data source into every task (for name()); the parsed settings
        # stay behind and are parsed again where they are needed (the planner worker).
        return {**self.__dict__, "_settings": None}

    @classmethod
    def name(cls) -> str:
        # spark.dataSource.register() asks for the name first: an older PySpark is refused
        # there, in the user's program (load() checks the Spark that runs the query).
        require_supported_pyspark()
        return "backlog"

    def schema(self) -> StructType:
        if self._settings is not None:
            return kafka_schema(self._settings.include_headers)
        return kafka_schema(include_headers(self.options))

    def streamReader(self, schema: StructType) -> BacklogStreamReader:
        from backlog_source.stream_reader import BacklogStreamReader

        # The options first, then the schema, as Spark's sourceSchema checks them.
        settings = parse_options(self.options, read="stream")
        self._check_schema(schema, settings)
        return BacklogStreamReader(settings)

    def reader(self, schema: StructType) -> BacklogBatchReader:
        """``spark.read.format("backlog")``: a batch read of the range the starting and ending
        options give, as ``format("kafka")`` reads it."""
        from backlog_source.batch_reader import BacklogBatchReader

        settings = parse_options(self.options, read="batch")
        self._check_schema(schema, settings)
        return BacklogBatchReader(settings)

    def _check_schema(self, schema: StructType, settings: SourceSettings) -> None:
        expected = kafka_schema(settings.include_headers)
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
