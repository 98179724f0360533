"""backlog-source: a backlog-aware Kafka source for Spark Structured Streaming.

Register the source, then use it exactly like Spark's ``format("kafka")``::

    from backlog_source import BacklogDataSource
    spark.dataSource.register(BacklogDataSource)
    df = spark.readStream.format("backlog").option("subscribe", "orders")...load()

One installed namespace, in floors (each imports only floors below it, at module level;
``tests/unit/test_layers.py``), each a top-level folder of the repository:
``backlog_source.core`` (``core/``: errors, options, Kafka config, codecs, tracing context and
export), ``backlog_source.split`` (``split/``: splits, read budgets and range planning) and
``backlog_source.events`` (``events/``: the BacklogFinishEvent and the control topic), then
``backlog_source.enumerator`` (``enumerator/``: driver-side planning and the checkpointed
state) and ``backlog_source.reader`` (``reader/``: the executors' read path), then this
package's own modules: the Spark data source, the mode switch, the command line, the snapshot
command, and ``backlog_source.demo`` (the demo and the brokers it starts, which tests and
benchmarks use too; never on a query's path).
"""

from __future__ import annotations

from backlog_source.core import __version__
from backlog_source.core.errors import (
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
from backlog_source.core.settings import SourceSettings, parse_options
from backlog_source.datasource import BacklogDataSource, BacklogStreamReader
from backlog_source.metrics import lag_metrics
from backlog_source.mode_switch import (
    BacklogAwareQuery,
    BacklogModeListener,
    Mode,
    SessionModeSwitch,
    StopTimeoutError,
    SwitchMethod,
    Transition,
    disable_metrics,
    enable_metrics,
    install,
    start_backlog_aware,
)

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
    "SessionModeSwitch",
    "SourceSettings",
    "StopTimeoutError",
    "SwitchMethod",
    "Transition",
    "__version__",
    "disable_metrics",
    "enable_metrics",
    "install",
    "lag_metrics",
    "parse_options",
    "start_backlog_aware",
]
