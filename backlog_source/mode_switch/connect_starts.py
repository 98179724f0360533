"""Under Spark Connect, how each backlog query of a session was started, so that ``install``
can start it again with the other trigger; and its user's stops, so that a stop wins over a
restart in flight.

Which process: the user's driver program (a Spark Connect client). ``record`` runs on the
thread that called ``writer.start()``, :meth:`ConnectStarts.stopped_by_user` on the thread
that called a query's ``stop()``, :meth:`ConnectStarts.ask_again` on the thread that called
``spark.streams.get()``; ``starter``, ``interval_ms`` and ``replace`` on the installation's
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
location, and its sink can restart from it; nothing of it is logged.

A user's stop wins over a restart. Spark cannot tell a switch's stop of a run from its
user's (a ``QueryTerminatedEvent`` does not say who stopped the run), and between the
switch's ``stop()`` and its ``start()`` the query is simply not active: a user's stop
there would reach nothing, and ``spark.streams.get(id)`` would return None. So the same
wrapping covers Connect's ``StreamingQuery.stop`` and ``StreamingQueryManager.get``, for the
installed session's queries only, and each recorded query has a *lineage*: the run its user
started and the runs the switches started after it, under the same id.

* ``stop()`` on an object of any run of a lineage (the one ``start()`` returned, or one
  ``spark.streams.get`` returned, before or after a switch) is the user's: it marks the
  lineage stopped, stops that run and the lineage's running one, and, while a switch is
  between its stop and its start, waits (at most ``STOP_WAIT_S``) until that switch has
  stopped its new run again. A switch that has not stopped its run yet finds the mark and
  stops nothing. No run of a lineage its user stopped is ever started.
* ``spark.streams.get(id)`` that finds no active run of a lineage not stopped by its user
  waits for a switch between runs to end, and asks again: it returns the new run.
* Neither waits on the switch's own thread, nor inside a listener callback: the Connect
  client delivers events holding its bus lock, which the switch's ``start()`` takes to
  post the new run's ``QueryStartedEvent`` (see :mod:`.session_listener`). A stop made
  there returns at once, and the switch stops its new run as soon as its start returns.

The wrappers go when the last installation that asked for them ends; a user start of a
query id starts a new lineage.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backlog_source.core.durations import parsed_duration_ms, processing_time
from backlog_source.core.errors import ModeSwitchError
from backlog_source.mode_switch.policy import restart_problem
from backlog_source.mode_switch.writer_info import describe_writer

log = logging.getLogger(__name__)

#: How long a user's ``stop()`` or ``spark.streams.get()`` waits for a switch between the
#: old run's stop and the new run's start (a restart-method switch: the stop of a run whose
#: trigger ended, then a start, seconds under Spark Connect).
STOP_WAIT_S = 120.0

_patch_lock = threading.Lock()  # guards the wrappers and the list of recorders
_recorders: list["ConnectStarts"] = []
_originals: dict[tuple[type, str], Callable[..., Any]] = {}  # (class, attribute) -> what the wrapper replaced
_delivering: set[Any] = set()  # the code of the Connect bus's post_to_all: a listener callback runs inside it
_switching = threading.local()  # query_id: the query whose runs this thread swaps (its stops and start are the switch's)


@dataclass(eq=False)
class _Lineage:
    """A query's runs since its user started it (see the module docstring). ``running`` is
    the ``StreamingQuery`` of the run started last; ``swapping`` is true while a switch is
    between its stop of one run and its start of the next."""

    runs: set[str]
    running: Any
    stopped_by_user: bool = False
    swapping: bool = False


def kept_copy(writer: Any) -> Any | None:
    """A copy of a Connect ``writer`` that can start its query again, or None when the query
    cannot restart (no ``format("backlog")`` source, no checkpoint location, a sink that
    cannot restart from its checkpoint)."""
    info = describe_writer(writer)
    if not info.backlog_enabled or not info.checkpoint_location or restart_problem(info):
        return None
    kept = type(writer)(writer._write_stream._child, writer._session)
    kept._write_proto.CopyFrom(writer._write_proto)
    return kept


class ConnectStarts:
    """The writers and lineages of one Connect session's backlog queries, by query id (see the
    module docstring). Thread-safe. ``keep`` (replaced by unit tests only) makes the copy of
    a writer that is started again."""

    def __init__(self, spark: Any, *, keep: Callable[[Any], Any | None] = kept_copy,
                 stop_wait_s: float = STOP_WAIT_S) -> None:
        self._spark = spark
        self._keep = keep
        self._stop_wait_s = stop_wait_s
        self._changed = threading.Condition()  # guards the two tables; notified when a switch leaves a lineage
        self._writers: dict[str, Any] = {}
        self._lineages: dict[str, _Lineage] = {}

    def begin(self) -> "ConnectStarts":
        """Record this session's starts and stops from now on. For a Spark Connect session
        only (classic PySpark switches in place): the caller checks."""
        from pyspark.sql.connect.streaming.query import (  # Connect's extras only
            StreamingQuery,
            StreamingQueryListenerBus,
            StreamingQueryManager,
        )
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter

        with _patch_lock:
            if not _originals:
                _wrap(DataStreamWriter, "_start_internal", _recording)
                _wrap(StreamingQuery, "stop", _stopping)
                _wrap(StreamingQueryManager, "get", _getting)
                _delivering.add(StreamingQueryListenerBus.post_to_all.__code__)
            _recorders.append(self)
        return self

    def end(self) -> None:
        """Stop recording; the wrappers go when no installation needs them. Call it once no
        switch is in flight. Idempotent."""
        with _patch_lock:
            if self in _recorders:
                _recorders.remove(self)
            if not _recorders:
                for (owner, name), original in _originals.items():
                    setattr(owner, name, original)
                _originals.clear()
                _delivering.clear()
        with self._changed:
            self._writers.clear()
            self._lineages.clear()

    # -- the user's threads -----------------------------------------------------------------

    def record(self, writer: Any, query: Any) -> None:
        """After ``writer`` started ``query``: keep a copy of it if it qualifies, and begin the
        query's lineage. Never raises (a start the user made must not fail because of this
        bookkeeping). The start a switch makes is part of its lineage already."""
        if writer._session is not self._spark:
            return
        query_id = str(query.id)
        if _switching_here(query_id):
            return  # the switch's own start (replace() adds it to the lineage)
        try:
            kept = self._keep(writer)
        except Exception:  # process boundary: the hook on the user's start(); bookkeeping must never fail their start
            log.debug("install(): could not keep the writer of query %s", query_id, exc_info=True)
            return
        if kept is None:
            return
        with self._changed:
            self._writers[query_id] = kept
            self._lineages[query_id] = _Lineage({str(query.runId)}, query)

    def stopped_by_user(self, query: Any, stop: Callable[[Any], None]) -> bool:
        """A ``stop()`` of ``query`` (``stop`` is Spark's own): False when ``query`` is no run
        of a lineage kept here, or it is a switch stopping the run it replaces (the caller
        then stops it as Spark would). Else it is the user's stop of the query: mark the
        lineage, stop ``query``, wait for a switch between two runs (not where that could
        block the switch: see the module docstring), stop the lineage's running run, and
        return True: no run of the query is active then, and none is started after. Raises
        :class:`ModeSwitchError` when a switch between runs did not end within
        ``stop_wait_s`` (the switch still stops its new run when its start returns)."""
        if getattr(query, "_session", None) is not self._spark or _switching_here(query.id):
            return False
        with self._changed:
            lineage = self._lineages.get(str(query.id))
            if lineage is None or (str(query.runId) not in lineage.runs and not lineage.swapping):
                return False  # not a run of a lineage; while a switch swaps, a run unknown yet is its new one
            lineage.stopped_by_user = True
            wait = lineage.swapping and not _in_listener_callback()
        stop(query)
        with self._changed:
            if wait and lineage.swapping:
                log.debug("stop(): query %s waits for its switch between two runs", query.id)
            if wait and not self._changed.wait_for(lambda: not lineage.swapping, self._stop_wait_s):
                raise ModeSwitchError(
                    f"stop(): query {query.id} was between two runs of a restart-method switch for "
                    f"{self._stop_wait_s:g} s; its new run is stopped as soon as its start returns")
            running = lineage.running
        if str(running.runId) != str(query.runId):
            stop(running)
        return True

    def ask_again(self, session: Any, query_id: Any) -> bool:
        """``spark.streams.get(query_id)`` found no active run: True when it should ask Spark
        again, after waiting (at most ``stop_wait_s``) for a switch between two runs of the
        query to end; False for a query not recorded here or stopped by its user, and where
        the wait could block the switch (on its own thread, inside a listener callback)."""
        if session is not self._spark:
            return False
        with self._changed:
            lineage = self._lineages.get(str(query_id))
            if lineage is None or lineage.stopped_by_user:
                return False
            if lineage.swapping:
                if _switching_here(query_id) or _in_listener_callback():
                    return False
                log.debug("spark.streams.get(): query %s waits for its switch between two runs", query_id)
                self._changed.wait_for(lambda: not lineage.swapping, self._stop_wait_s)
            return True

    # -- the installation's thread ----------------------------------------------------------

    def knows(self, query_id: str) -> bool:
        with self._changed:
            return str(query_id) in self._writers

    def interval_ms(self, query_id: str) -> int | None:
        """The processing-time interval the query's running start was given (no trigger: 0,
        Spark's default), or None when it has another trigger (``availableNow``, ``once``,
        continuous, real time), none was recorded, or its text is not a duration."""
        with self._changed:
            writer = self._writers.get(str(query_id))
        if writer is None:
            return None
        proto = writer._write_proto
        which = proto.WhichOneof("trigger")
        if which is None:
            return 0
        if which != "processing_time_interval":
            return None
        return parsed_duration_ms(proto.processing_time_interval.removeprefix("interval "), bare_number_unit="ms")

    def starter(self, query_id: str) -> Callable[[int], Any]:
        """``start(interval_ms)``: start the recorded query again with a processing-time
        trigger of ``interval_ms``."""
        with self._changed:
            writer = self._writers[str(query_id)]

        def start(interval_ms: int) -> Any:
            return writer.trigger(processingTime=processing_time(interval_ms)).start()

        return start

    def replace(self, running: Any, start_next: Callable[[], Any]) -> Any | None:
        """The :class:`~.switchers.RunSwap` of a restart-method switch: stop ``running``, then
        return ``start_next()``'s run, unless the query's user stopped it: then None, with
        nothing stopped (stopped before), nothing started (stopped during the old run's
        stop) or the new run stopped again (stopped during its start). A user's stop or
        ``spark.streams.get`` meanwhile waits for this to return."""
        with self._changed:
            lineage = self._lineages.get(str(running.id))
            if lineage is None or lineage.stopped_by_user or str(running.runId) not in lineage.runs:
                return None
            lineage.swapping = True
        _switching.query_id = str(running.id)  # the stop wrapper and record() know the switch's own calls
        try:
            running.stop()
            with self._changed:
                if lineage.stopped_by_user:
                    return None
            new = start_next()
            with self._changed:
                lineage.runs.add(str(new.runId))
                stopped = lineage.stopped_by_user
                if not stopped:
                    lineage.running = new
            if stopped:  # the user's stop came during the start: it waits for this one
                new.stop()
                return None
            return new
        finally:
            _switching.query_id = None
            with self._changed:
                lineage.swapping = False
                self._changed.notify_all()


def _recorders_now() -> list[ConnectStarts]:
    with _patch_lock:
        return list(_recorders)


def _wrap(owner: type, name: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """With ``_patch_lock`` held."""
    original = getattr(owner, name)
    _originals[(owner, name)] = original
    setattr(owner, name, wrapper(original))


def _switching_here(query_id: Any) -> bool:
    """Whether this thread is a switch swapping the runs of ``query_id`` (for any installation)."""
    return getattr(_switching, "query_id", None) == str(query_id)


def _in_listener_callback() -> bool:
    """Whether this thread is inside the Connect client's listener bus delivering an event
    (``post_to_all``, which holds the bus lock a start needs): a frame of it is on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in _delivering:
            return True
        frame = frame.f_back
    return False


def _recording(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _start_internal(writer: Any, *args: Any, **kwargs: Any) -> Any:
        query = original(writer, *args, **kwargs)
        for recorder in _recorders_now():
            recorder.record(writer, query)
        return query

    return _start_internal


def _stopping(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def stop(query: Any) -> None:
        for recorder in _recorders_now():
            if recorder.stopped_by_user(query, original):
                return
        original(query)

    return stop


def _getting(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get(manager: Any, id: Any) -> Any:  # noqa: A002 - Spark's parameter name
        found = original(manager, id)
        if found is None and any(recorder.ask_again(manager._session, id) for recorder in _recorders_now()):
            found = original(manager, id)
        return found

    return get
