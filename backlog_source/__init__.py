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

The names of the user's driver program (the mode switch, the metrics) and the stream reader
are imported when first used: Spark's Python processes (the one ``load()`` starts, the
source's runner on the driver, every executor worker) import this package to unpickle the
source and its splits, and a fresh one pays every import at query start-up; ``load()``'s
needs only the data source, not the read path and Arrow that the stream reader imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from backlog_source.datasource import BacklogDataSource

if TYPE_CHECKING:
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
    from backlog_source.stream_reader import BacklogStreamReader

#: Imported on first use (PEP 562): name -> its module.
_LAZY = {
    **dict.fromkeys(("BacklogAwareQuery", "BacklogModeListener", "Mode", "SessionModeSwitch", "StopTimeoutError",
                     "SwitchMethod", "Transition", "disable_metrics", "enable_metrics", "install",
                     "start_backlog_aware"), "backlog_source.mode_switch"),
    "lag_metrics": "backlog_source.metrics",
    "BacklogStreamReader": "backlog_source.stream_reader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'backlog_source' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

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
