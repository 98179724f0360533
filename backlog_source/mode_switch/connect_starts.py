"""Under Spark Connect, how each backlog query of a session was started, so that ``install``
can start it again with the other trigger.

Which process: the user's driver program (a Spark Connect client). ``record`` runs on the
thread that called ``writer.start()``; ``starter`` and ``interval_ms`` on the installation's
thread.

Why this exists: a Connect client holds no JVM objects, so a query the user started with the
plain ``writeStream...trigger(processingTime=...).start()`` cannot be switched in place; it
can only be stopped and started again from the same plan on the same checkpoint, and
Connect has no call that returns a running query's plan. So ``install(spark, ...,
allow_restart=True)`` wraps the Connect ``DataStreamWriter._start_internal`` (the one path
``start()`` and ``toTable()`` take, after which the writer's protobuf holds everything the
start was given: sink, path or table, options, ``foreachBatch`` function, trigger). For the
installed session's writers only, after a start that succeeded, a copy of the writer is kept
under the query's id when its DataFrame reads ``format("backlog")``, it has a checkpoint
location, and its sink can restart from it; nothing of it is logged. The wrapper is removed
when the last installation that asked for it ends.

What a user must know (the README says it): after a restart-method switch the query runs as
a new run under the same id, so the ``StreamingQuery`` object ``start()`` returned refers to
the stopped run; ``spark.streams.get(query_id)`` (or the installation's ``query(query_id)``)
returns the running one.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from backlog_source.core.durations import duration_ms
from backlog_source.core.errors import ConfigError
from backlog_source.mode_switch.policy import restart_problem
from backlog_source.mode_switch.writer_info import describe_writer

log = logging.getLogger(__name__)

_patch_lock = threading.Lock()  # guards the wrapper and the list of recorders
_recorders: list["ConnectStarts"] = []
_original_start: Callable[..., Any] | None = None


class ConnectStarts:
    """The writers of one Connect session's backlog queries, by query id (see the module
    docstring). Thread-safe."""

    def __init__(self, spark: Any) -> None:
        self._spark = spark
        self._lock = threading.Lock()
        self._writers: dict[str, Any] = {}

    def begin(self) -> "ConnectStarts":
        """Record this session's starts from now on. Raises :class:`ConfigError` when the
        session is not a Spark Connect one (classic PySpark switches in place)."""
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter  # Connect's extras only

        global _original_start
        with _patch_lock:
            if _original_start is None:
                _original_start = DataStreamWriter._start_internal
                DataStreamWriter._start_internal = _recording(_original_start)
            _recorders.append(self)
        return self

    def end(self) -> None:
        """Stop recording; the wrapper goes when no installation needs it. Idempotent."""
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter

        global _original_start
        with _patch_lock:
            if self in _recorders:
                _recorders.remove(self)
            if not _recorders and _original_start is not None:
                DataStreamWriter._start_internal = _original_start
                _original_start = None
        with self._lock:
            self._writers.clear()

    def record(self, writer: Any, query: Any) -> None:
        """Keep a copy of ``writer`` for ``query`` if it qualifies (a ``format("backlog")``
        source, a checkpoint location, a sink that can restart); never raises (a start the user
        made must not fail because of this bookkeeping)."""
        if writer._session is not self._spark:
            return
        try:
            info = describe_writer(writer)
            if not info.backlog_enabled or not info.checkpoint_location or restart_problem(info):
                return
            kept = type(writer)(writer._write_stream._child, writer._session)
            kept._write_proto.CopyFrom(writer._write_proto)
        except Exception:  # noqa: BLE001 - bookkeeping only
            log.debug("install(): could not keep the writer of query %s", query.id, exc_info=True)
            return
        with self._lock:
            self._writers[str(query.id)] = kept

    def knows(self, query_id: str) -> bool:
        with self._lock:
            return str(query_id) in self._writers

    def interval_ms(self, query_id: str) -> int | None:
        """The processing-time interval the query's running start was given (no trigger: 0,
        Spark's default), or None when it has another trigger (``availableNow``, ``once``,
        continuous, real time) or none was recorded."""
        with self._lock:
            writer = self._writers.get(str(query_id))
        if writer is None:
            return None
        proto = writer._write_proto
        which = proto.WhichOneof("trigger")
        if which is None:
            return 0
        if which != "processing_time_interval":
            return None
        try:
            return duration_ms("trigger(processingTime)", proto.processing_time_interval.removeprefix("interval "),
                               bare_number_unit="ms")
        except ConfigError:
            return None

    def starter(self, query_id: str) -> Callable[[int], Any]:
        """``start(interval_ms)``: start the recorded query again with a processing-time
        trigger of ``interval_ms`` (the copy is recorded again for the new run)."""
        with self._lock:
            writer = self._writers[str(query_id)]

        def start(interval_ms: int) -> Any:
            return writer.trigger(processingTime=f"{interval_ms} milliseconds").start()

        return start


def _recording(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _start_internal(writer: Any, *args: Any, **kwargs: Any) -> Any:
        query = original(writer, *args, **kwargs)
        with _patch_lock:
            recorders = list(_recorders)
        for recorder in recorders:
            recorder.record(writer, query)
        return query

    return _start_internal
