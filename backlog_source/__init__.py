"""backlog-source: a backlog-aware Kafka source for Spark Structured Streaming.

Register the source, then use it exactly like Spark's ``format("kafka")``::

    from backlog_source import BacklogDataSource
    spark.dataSource.register(BacklogDataSource)
    df = spark.readStream.format("backlog").option("subscribe", "orders")...load()
"""

from backlog_source.datasource import BacklogDataSource, BacklogStreamReader
from backlog_source.errors import (
    BacklogSourceError,
    ConfigError,
    ControlTopicError,
    DataLossError,
    KafkaUnavailableError,
    OffsetFormatError,
)
from backlog_source.settings import SourceSettings, parse_options

__all__ = [
    "BacklogDataSource",
    "BacklogStreamReader",
    "BacklogSourceError",
    "ConfigError",
    "ControlTopicError",
    "DataLossError",
    "KafkaUnavailableError",
    "OffsetFormatError",
    "SourceSettings",
    "parse_options",
]
