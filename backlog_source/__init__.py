"""backlog-source: a backlog-aware Kafka source for Spark Structured Streaming.

Register the source, then use it exactly like Spark's ``format("kafka")``::

    from backlog_source import BacklogDataSource
    spark.dataSource.register(BacklogDataSource)
    df = spark.readStream.format("backlog").option("subscribe", "orders")...load()

Public names are imported on first use (PEP 562): the ``reader`` and ``enumerator``
packages import ``backlog_source.settings`` and ``backlog_source.errors``, and an eager
import of the data source here would make those imports circular.
"""

from __future__ import annotations

import importlib
from typing import Any

#: The package version; also the instrumentation scope version of exported spans.
__version__ = "0.1.0"

_EXPORTS = {
    "BacklogDataSource": "backlog_source.datasource",
    "BacklogStreamReader": "backlog_source.datasource",
    "BacklogSourceError": "backlog_source.errors",
    "ConfigError": "backlog_source.errors",
    "ControlTopicError": "backlog_source.errors",
    "DataLossError": "backlog_source.errors",
    "KafkaUnavailableError": "backlog_source.errors",
    "OffsetFormatError": "backlog_source.errors",
    "SourceSettings": "backlog_source.settings",
    "parse_options": "backlog_source.settings",
    "lag_metrics": "backlog_source.metrics",
    "start_backlog_aware": "backlog_source.mode_switch",
    "BacklogAwareQuery": "backlog_source.mode_switch",
    "BacklogModeListener": "backlog_source.mode_switch",
    "Mode": "backlog_source.mode_switch",
    "Transition": "backlog_source.mode_switch",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'backlog_source' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
