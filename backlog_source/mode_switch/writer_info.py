"""What ``start_backlog_aware`` needs to know about a ``DataStreamWriter`` before it starts it.

Which process: the user's driver program. PySpark has no public API for a writer's options
or its DataFrame's sources, so this reads them from classic PySpark's JVM objects
(``writer._jwrite``, ``df._jdf``, through py4j) or from a Spark Connect writer's plan (the
client-side protobuf and logical plan). It reads exactly what it needs by name: the
checkpoint location, the sink's format and output mode, each source's format and its
``backlog.enabled``; never another option's value (py4j logs every value it carries at
DEBUG, and a source's options hold credentials).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BACKLOG_FORMAT = "backlog"
BACKLOG_ENABLED = "backlog.enabled"


@dataclass(frozen=True)
class WriterInfo:
    """The writer's checkpoint location and sink, and the sources its DataFrame reads:
    ``backlog_enabled`` per ``format("backlog")`` source (its option's raw text, or None
    when unset), and the other sources' formats."""

    checkpoint_location: str | None
    sink_format: str | None
    output_mode: str | None
    backlog_enabled: list[str | None] = field(default_factory=list)
    other_formats: list[str] = field(default_factory=list)
    connect: bool = False


def session_of(writer: Any) -> Any:
    """The SparkSession of a classic or Spark Connect writer."""
    return getattr(writer, "_spark", None) or writer._session


def describe_writer(writer: Any) -> WriterInfo:
    """Inspect a classic PySpark or Spark Connect ``DataStreamWriter``."""
    if getattr(writer, "_jwrite", None) is not None:
        return _describe_classic(writer)
    return _describe_connect(writer)


# -- classic PySpark: the JVM objects, through py4j --------------------------------------


def _describe_classic(writer: Any) -> WriterInfo:
    spark = writer._spark
    jwrite = writer._jwrite
    extra = _private_field(jwrite, "extraOptions")  # a CaseInsensitiveMap: read by key only
    checkpoint = _option(extra, "checkpointLocation") or spark.conf.get("spark.sql.streaming.checkpointLocation", None)
    sink = _private_field(jwrite, "source")
    output_mode = _private_field(jwrite, "outputMode")
    enabled, others = [], []
    leaves = writer._df._jdf.queryExecution().logical().collectLeaves()
    for index in range(leaves.size()):
        described = _describe_leaf(leaves.apply(index))
        if described is None:
            continue
        fmt, read_enabled = described
        if fmt.lower() == BACKLOG_FORMAT:
            enabled.append(read_enabled())
        else:
            others.append(fmt)
    return WriterInfo(checkpoint or None, str(sink) if sink is not None else None,
                      str(output_mode) if output_mode is not None else None, enabled, others)


def _describe_leaf(leaf: Any) -> tuple[str, Any] | None:
    """``(format, reader of backlog.enabled)`` of a streaming source leaf, or None.

    A DataFrame straight from ``load()`` has an unresolved leaf (``format()``,
    ``options()``); once transformed its leaf is resolved: a ``StreamingRelationV2``
    (``sourceName()``, ``extraOptions()``) for DSv2 and Python sources, or a v1
    ``StreamingRelation`` (``sourceName()``, ``dataSource().options()``).
    """
    fmt = _call(leaf, "format")
    if fmt is not None:
        return str(fmt), lambda: _option(leaf.options(), BACKLOG_ENABLED)
    name = _call(leaf, "sourceName")
    if name is None:
        return None
    extra = _call(leaf, "extraOptions")
    if extra is not None:
        return str(name), lambda: _option(extra, BACKLOG_ENABLED)
    data_source = _call(leaf, "dataSource")
    return str(name), lambda: _option(data_source.options(), BACKLOG_ENABLED) if data_source is not None else None


def _option(options: Any, key: str) -> str | None:
    """One option's value from a JVM options map (Java ``Map``, Scala ``Map`` or
    ``CaseInsensitiveStringMap``), matched case-insensitively, without reading any other."""
    for candidate in (key, key.lower()):
        value = _call_with(options, "get", candidate)
        if value is None:
            continue
        if hasattr(value, "isDefined"):  # a Scala Option
            if not value.isDefined():
                continue
            value = value.get()
        return str(value)
    return None


def _private_field(obj: Any, name: str) -> Any:
    try:
        field_ = obj.getClass().getDeclaredField(name)
    except Exception:  # process boundary: py4j into the JVM (a Java exception arrives as py4j's)
        return None
    field_.setAccessible(True)
    return field_.get(obj)


def _call(obj: Any, method: str) -> Any:
    try:
        return getattr(obj, method)()
    except Exception:  # process boundary: py4j into the JVM (a Java exception arrives as py4j's)
        return None


def _call_with(obj: Any, method: str, argument: str) -> Any:
    try:
        return getattr(obj, method)(argument)
    except Exception:  # process boundary: py4j into the JVM (a Java exception arrives as py4j's)
        return None


# -- Spark Connect: the client-side plan --------------------------------------------------


def _describe_connect(writer: Any) -> WriterInfo:
    proto = writer._write_proto
    options = {str(k).lower(): str(v) for k, v in proto.options.items() if str(k).lower() == "checkpointlocation"}
    enabled, others = [], []
    for source in _connect_sources(writer._write_stream._child):
        fmt = str(source._format or "")
        if fmt.lower() == BACKLOG_FORMAT:
            values = {str(k).lower(): v for k, v in (source._options or {}).items() if str(k).lower() == BACKLOG_ENABLED}
            enabled.append(values.get(BACKLOG_ENABLED))
        elif fmt:
            others.append(fmt)
    return WriterInfo(options.get("checkpointlocation"), proto.format or None, proto.output_mode or None,
                      enabled, others, connect=True)


def _connect_sources(plan: Any) -> list[Any]:
    """Every ``DataSource`` node of a Connect logical plan (a tree of plan objects)."""
    from pyspark.sql.connect.plan import DataSource, LogicalPlan  # only importable with Connect's extras

    found, stack = [], [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, DataSource):
            found.append(node)
        for value in vars(node).values():
            if isinstance(value, LogicalPlan):
                stack.append(value)
            elif isinstance(value, (list, tuple)):
                stack.extend(v for v in value if isinstance(v, LogicalPlan))
    return found
