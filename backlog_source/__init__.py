"""backlog-source: a backlog-aware Kafka source for Spark Structured Streaming.

Register the source, then use it exactly like Spark's ``format("kafka")``::

    from backlog_source import BacklogDataSource
    spark.dataSource.register(BacklogDataSource)
    df = spark.readStream.format("backlog").option("subscribe", "orders")...load()

This package is the top layer (the Spark-facing surface, the mode switch, the command line,
the demo and the snapshot command); ``enumerator``, ``reader``, ``events`` and
``backlog_core`` are below it and never import it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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

# The rest is imported on first use (PEP 562). Every Python streaming query starts a fresh
# Python process on the driver that unpickles the source and so imports this package; it
# needs the data source, not the mode switch (benchmarks/query_startup.py).
_LAZY = {
    "BacklogDataSource": "backlog_source.datasource",
    "BacklogStreamReader": "backlog_source.datasource",
    "SourceSettings": "backlog_core.settings",
    "parse_options": "backlog_core.settings",
    "lag_metrics": "backlog_source.metrics",
    "BacklogAwareQuery": "backlog_source.mode_switch",
    "BacklogModeListener": "backlog_source.mode_switch",
    "Mode": "backlog_source.mode_switch",
    "Transition": "backlog_source.mode_switch",
    "start_backlog_aware": "backlog_source.mode_switch",
}

if TYPE_CHECKING:
    from backlog_core.settings import SourceSettings, parse_options
    from backlog_source.datasource import BacklogDataSource, BacklogStreamReader
    from backlog_source.metrics import lag_metrics
    from backlog_source.mode_switch import BacklogAwareQuery, BacklogModeListener, Mode, Transition, start_backlog_aware


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'backlog_source' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


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
