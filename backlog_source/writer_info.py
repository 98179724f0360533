"""What ``start_backlog_aware`` needs to know about a ``DataStreamWriter`` before it starts it.

Which process: the user's driver program. PySpark has no public API for a writer's options
or its DataFrame's sources, so this reads them from the JVM objects of classic PySpark
(``writer._jwrite``, ``df._jdf``) with py4j reflection. That is the only place the project
relies on Spark internals; under Spark Connect it raises :class:`ConfigError` saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from backlog_source.errors import ConfigError


@dataclass(frozen=True)
class WriterInfo:
    """The writer's checkpoint location and the options of every ``backlog`` source it reads."""

    checkpoint_location: str | None
    backlog_sources: list[dict[str, str]] = field(default_factory=list)
    other_formats: list[str] = field(default_factory=list)


def describe_writer(writer) -> WriterInfo:
    """Inspect a classic PySpark ``DataStreamWriter``. Raises :class:`ConfigError` when it
    cannot be inspected (e.g. Spark Connect)."""
    jwrite = getattr(writer, "_jwrite", None)
    df = getattr(writer, "_df", None)
    spark = getattr(writer, "_spark", None)
    if jwrite is None or df is None or getattr(df, "_jdf", None) is None:
        raise ConfigError(
            "start_backlog_aware needs a classic PySpark DataStreamWriter (df.writeStream...); "
            "Spark Connect writers cannot be inspected for their checkpoint and source options"
        )
    jvm = spark._jvm
    converters = jvm.scala.jdk.javaapi.CollectionConverters
    options = _private_field(jwrite, "extraOptions")
    writer_options = {str(k).lower(): str(v) for k, v in dict(converters.asJava(options)).items()}
    checkpoint = writer_options.get("checkpointlocation") or _session_checkpoint(spark)

    backlog_sources, other_formats = [], []
    leaves = df._jdf.queryExecution().logical().collectLeaves()
    for index in range(leaves.size()):
        described = _describe_source(leaves.apply(index), converters)
        if described is None:
            continue
        fmt, options = described
        if fmt.lower() == "backlog":
            backlog_sources.append(options)
        else:
            other_formats.append(fmt)
    return WriterInfo(checkpoint, backlog_sources, other_formats)


def _describe_source(leaf, converters) -> tuple[str, dict[str, str]] | None:
    """``(format, options)`` of a streaming source leaf, or None for any other leaf.

    A DataFrame straight from ``load()`` has an unresolved leaf (``format()``,
    ``options()``); once transformed (``select``, ``withColumn``...) its leaf is resolved:
    a ``StreamingRelationV2`` (``sourceName()``, ``extraOptions()``) for DSv2 and Python
    sources, or a v1 ``StreamingRelation`` (``sourceName()``, ``dataSource().options()``).
    """
    fmt = _call(leaf, "format")
    if fmt is not None:
        return str(fmt), {str(k): str(v) for k, v in dict(converters.asJava(leaf.options())).items()}
    name = _call(leaf, "sourceName")
    if name is None:
        return None
    extra = _call(leaf, "extraOptions")
    if extra is not None:
        return str(name), {str(k): str(v) for k, v in dict(extra.asCaseSensitiveMap()).items()}
    data_source = _call(leaf, "dataSource")
    options = data_source.options() if data_source is not None else None
    if options is None:
        return str(name), {}
    return str(name), {str(k): str(v) for k, v in dict(converters.asJava(options)).items()}


def _private_field(obj, name: str):
    field_ = obj.getClass().getDeclaredField(name)
    field_.setAccessible(True)
    return field_.get(obj)


def _call(obj, method: str):
    try:
        return getattr(obj, method)()
    except Exception:  # py4j raises for a missing method: not a data source leaf
        return None


def _session_checkpoint(spark) -> str | None:
    root = spark.conf.get("spark.sql.streaming.checkpointLocation", None)
    return root or None


def last_checkpointed_backlog_flags(spark, checkpoint_location: str) -> list[bool] | None:
    """``processing_backlog`` of every backlog-source entry in the checkpoint's newest offset
    log file, or None when the checkpoint has no offsets yet (a new query).

    Read through Hadoop's FileSystem, so any checkpoint URI Spark supports works.
    """
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    offsets_dir = jvm.org.apache.hadoop.fs.Path(checkpoint_location, "offsets")
    fs = offsets_dir.getFileSystem(conf)
    if not fs.exists(offsets_dir):
        return None
    batch_ids = []
    for status in fs.listStatus(offsets_dir):
        name = status.getPath().getName()
        if name.isdigit():
            batch_ids.append(int(name))
    if not batch_ids:
        return None
    stream = fs.open(jvm.org.apache.hadoop.fs.Path(offsets_dir, str(max(batch_ids))))
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    flags = []
    # Line 1 is the log version, line 2 the batch metadata, then one line per source.
    for line in str(text).splitlines()[2:]:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and "processing_backlog" in entry and "source_id" in entry:
            flags.append(bool(entry["processing_backlog"]))
    return flags
