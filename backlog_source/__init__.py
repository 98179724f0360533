"""backlog-source: a backlog-aware Kafka source for Spark Structured Streaming.

Register the source, then use it exactly like Spark's ``format("kafka")``::

    from backlog_source import BacklogDataSource
    spark.dataSource.register(BacklogDataSource)
    df = spark.readStream.format("backlog").option("subscribe", "orders")...load()

This package is the top layer (the Spark-facing surface, the mode switch, the command line,
the demo and the snapshot command); ``enumerator``, ``reader``, ``events`` and
``backlog_core`` are below it and never import it.
"""

from backlog_core import __version__
from backlog_core.errors import (
    BacklogSourceError,
    ConfigError,
    ControlTopicError,
    DataLossError,
    KafkaUnavailableError,
    MalformedRecordError,
    ModeSwitchError,
    OffsetFormatError,
    SnapshotError,
)
from backlog_core.settings import SourceSettings, parse_options
from backlog_source.datasource import BacklogDataSource, BacklogStreamReader
from backlog_source.metrics import lag_metrics
from backlog_source.mode_switch import BacklogAwareQuery, BacklogModeListener, Mode, Transition, start_backlog_aware

__all__ = [
    "BacklogAwareQuery",
    "BacklogDataSource",
    "BacklogModeListener",
    "BacklogSourceError",
    "BacklogStreamReader",
    "ConfigError",
    "ControlTopicError",
    "DataLossError",
    "KafkaUnavailableError",
    "MalformedRecordError",
    "Mode",
    "ModeSwitchError",
    "OffsetFormatError",
    "SnapshotError",
    "SourceSettings",
    "Transition",
    "__version__",
    "lag_metrics",
    "parse_options",
    "start_backlog_aware",
]
