"""Switch a query's trigger between high-throughput and low-latency modes.

Spark fixes a query's trigger at ``start()``; the documented way to change it is to stop
the query and start it again on the same checkpoint. :func:`start_backlog_aware` does that
when the source's ``processing_backlog`` flag (in every progress event's ``endOffset``)
changes:

* :class:`BacklogModeListener` (a ``StreamingQueryListener``, on Spark's listener thread)
  only reads the flag and hands it to a controller; it never blocks.
* :class:`BacklogAwareQuery` is the controller and the user's handle. Its own thread does the
  stop and start, after the batch that reported the change has committed.

Which process: the user's driver program. The read limit per mode is the source's own
business (``backlog.maxOffsetsPerTrigger`` while processing backlog, see the source options),
so a switch only changes the trigger interval.

Exactly-once: every run uses the same checkpoint. The controller waits for the running
trigger to finish before it stops the query; if a batch is interrupted anyway, Spark replays
it from its offset log on restart with the same offsets, so file sinks and idempotent
``foreachBatch`` functions (keyed by ``batch_id``) see each record once.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Protocol

from pyspark.sql.streaming import StreamingQueryListener

from backlog_source import span_names, telemetry
from backlog_source.errors import BacklogSourceError, ConfigError
from backlog_source.trace_context import SpanContextIds, SpanRecord, new_span_id, new_trace_id

log = logging.getLogger(__name__)


class Mode(str, Enum):
    HIGH_THROUGHPUT = "high-throughput"
    LOW_LATENCY = "low-latency"


@dataclass(frozen=True)
class Transition:
    """One switch: the batch whose progress asked for it, when, and what the restart took
    (from the decision to the new query's ``start()`` returning)."""

    from_mode: str
    to_mode: str
    batch_id: int
    at: float
    restart_seconds: float


_INTERVAL = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\s*$", re.IGNORECASE
)
_UNIT_SECONDS = {"ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001, "s": 1, "sec": 1, "secs": 1,
                 "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
                 "h": 3600, "hour": 3600, "hours": 3600}


def parse_interval_seconds(name: str, text: str) -> float:
    """Seconds of a trigger interval such as ``"0 seconds"``, ``"500 milliseconds"``, ``"2 minutes"``."""
    match = _INTERVAL.match(str(text))
    if not match:
        raise ConfigError(
            f"{name} must be an interval such as '0 seconds', '500 milliseconds' or '1 minute', got {text!r}"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _backlog_offsets(progress: Any) -> list[dict]:
    """The end offsets of the progress's ``format("backlog")`` sources, parsed."""
    offsets = []
    for source in _get(progress, "sources") or []:
        end = _get(source, "endOffset")
        if not end:
            continue
        try:
            offset = json.loads(end) if isinstance(end, str) else end
        except json.JSONDecodeError:
            continue
        if isinstance(offset, dict) and "processing_backlog" in offset and "source_id" in offset:
            offsets.append(offset)
    return offsets


def backlog_flag(progress: Any) -> bool | None:
    """True if some backlog source of this progress is processing backlog, False if none is,
    None if the progress has no backlog source. Takes a ``StreamingQueryProgress`` or its
    dict form."""
    flags = [bool(offset["processing_backlog"]) for offset in _backlog_offsets(progress)]
    return any(flags) if flags else None


def backlog_traceparent(progress: Any) -> str | None:
    """The W3C context of the (current or last) backlog phase of the progress's first
    backlog source that has one: the parent of a mode switch this progress causes."""
    for offset in _backlog_offsets(progress):
        trace = offset.get("trace")
        if isinstance(trace, dict) and isinstance(trace.get("traceparent"), str):
            return trace["traceparent"]
    return None


class ModeController(Protocol):
    """What :class:`BacklogModeListener` reports to. Implementations must not block."""

    def on_progress(
        self, query_id: str, run_id: str, batch_id: int, processing_backlog: bool, traceparent: str | None = None
    ) -> None: ...

    def on_idle(self, query_id: str, run_id: str) -> None: ...

    def on_terminated(self, query_id: str, run_id: str, exception: str | None) -> None: ...


class BacklogModeListener(StreamingQueryListener):
    """Reads ``processing_backlog`` from progress events and reports it to a controller.

    Usable on its own: register it with ``spark.streams.addListener`` and give it any
    :class:`ModeController`. Callbacks run on Spark's listener thread and return at once.
    """

    def __init__(self, controller: ModeController) -> None:
        self._controller = controller

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        flag = backlog_flag(progress)
        if flag is not None:
            self._controller.on_progress(
                str(progress.id), str(progress.runId), progress.batchId, flag, backlog_traceparent(progress)
            )

    def onQueryIdle(self, event) -> None:
        self._controller.on_idle(str(event.id), str(event.runId))

    def onQueryTerminated(self, event) -> None:
        self._controller.on_terminated(str(event.id), str(event.runId), event.exception)


class BacklogAwareQuery:
    """The handle :func:`start_backlog_aware` returns, and the controller behind it.

    ``mode``, ``transitions`` and ``query`` may be read from any thread.
    """

    def __init__(
        self,
        writer,
        high_throughput_interval: str,
        low_latency_interval: str,
        initial_mode: Mode,
        *,
        settle_timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._writer = writer
        self._intervals = {Mode.HIGH_THROUGHPUT: high_throughput_interval, Mode.LOW_LATENCY: low_latency_interval}
        self._mode = initial_mode
        self._settle_timeout_s = settle_timeout_s
        self._clock = clock
        self._transitions: list[Transition] = []
        self._lock = threading.Lock()
        self._inbox: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._failure: BaseException | None = None
        self._query = None
        self._query_id: str | None = None
        self._run_id: str | None = None
        self._stopping = False
        self._listener = BacklogModeListener(self)
        self._switch_span = _SwitchSpan()
        self._thread = threading.Thread(target=self._run, name="backlog-mode-controller", daemon=True)

    # -- public handle -------------------------------------------------------------------

    @property
    def mode(self) -> str:
        with self._lock:
            return self._mode.value

    @property
    def transitions(self) -> list[Transition]:
        with self._lock:
            return list(self._transitions)

    @property
    def query(self):
        return self._query

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until the handle is stopped or the query fails; mode switches do not count.
        Returns False on timeout. Raises the query's exception if it failed."""
        finished = self._done.wait(timeout)
        if self._failure is not None:
            raise self._failure
        return finished

    def stop(self) -> None:
        """Stop the query and the controller; no restart follows."""
        with self._lock:
            self._stopping = True
        self._inbox.put(("stop",))
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=120)
        self._finish()

    # -- controller ----------------------------------------------------------------------

    def on_progress(
        self, query_id: str, run_id: str, batch_id: int, processing_backlog: bool, traceparent: str | None = None
    ) -> None:
        if query_id == self._query_id:
            self._inbox.put(("progress", run_id, batch_id, processing_backlog, traceparent))

    def on_idle(self, query_id: str, run_id: str) -> None:
        if query_id == self._query_id:
            self._inbox.put(("idle", run_id))

    def on_terminated(self, query_id: str, run_id: str, exception: str | None) -> None:
        if query_id == self._query_id:
            self._inbox.put(("terminated", run_id, exception))

    def start(self) -> "BacklogAwareQuery":
        spark = self._writer._spark
        spark.streams.addListener(self._listener)
        try:
            self._start_query(self._mode)
        except BaseException:
            spark.streams.removeListener(self._listener)
            raise
        self._thread.start()
        log.info("started in %s mode (trigger %s)", self._mode.value, self._intervals[self._mode])
        return self

    def _start_query(self, mode: Mode, transition: Transition | None = None) -> Transition | None:
        """Start a run in ``mode``; record ``transition`` (with its restart time) if given and
        return the recorded one."""
        query = self._writer.trigger(processingTime=self._intervals[mode]).start()
        with self._lock:
            # Mode and transitions change together, so readers never see one without the other.
            self._query, self._query_id, self._run_id, self._mode = query, str(query.id), str(query.runId), mode
            if transition is None:
                return None
            recorded = replace(transition, restart_seconds=self._clock() - transition.at)
            self._transitions.append(recorded)
            return recorded

    def _run(self) -> None:
        while True:
            message = self._inbox.get()
            log.debug("controller: %s (current run %s, mode %s)", message, self._run_id, self._mode.value)
            kind = message[0]
            if kind == "stop":
                self._stop_query()
                self._switch_span.end(span_names.SWITCH_ENDED_BY_STOP)
                return
            if kind in ("progress", "idle") and message[1] == self._run_id:
                # The new run's first trigger ends the switch.
                ended_by = span_names.SWITCH_ENDED_BY_BATCH if kind == "progress" else span_names.SWITCH_ENDED_BY_IDLE
                self._switch_span.end(ended_by)
            if kind == "idle":
                continue
            if kind == "terminated":
                _, run_id, exception = message
                if run_id != self._run_id or self._stopping:
                    continue  # a run we stopped to switch, or the user's stop
                self._failure = _query_failure(self._query, exception)
                log.error("the query terminated%s; not restarting", f": {exception}" if exception else "")
                self._finish()
                return
            _, run_id, batch_id, processing_backlog, traceparent = message
            if run_id != self._run_id or self._stopping:
                continue  # progress of a run already replaced
            wanted = Mode.HIGH_THROUGHPUT if processing_backlog else Mode.LOW_LATENCY
            if wanted is not self._mode:
                try:
                    self._switch(wanted, batch_id, traceparent)
                except BaseException as exc:  # a failed restart ends the handle, visibly
                    self._failure = exc
                    self._finish()
                    return

    def _switch(self, wanted: Mode, batch_id: int, traceparent: str | None = None) -> None:
        decided = self._clock()
        decided_ns = time.time_ns()
        old, previous = self._query, self._mode
        self._wait_for_batch_boundary(old, batch_id)
        # The run kept going while we waited: if its latest batch flipped the flag back,
        # there is nothing to switch.
        latest = _mode_of(_last_progress(old))
        if latest is previous:
            log.info("backlog flag flipped back before the switch to %s; staying in %s", wanted.value, previous.value)
            return
        old.stop()
        # The new run starts from the old run's last committed batch; if that batch already
        # changed the flag again (e.g. a re-entered backlog finished meanwhile), the new run
        # may never report it (no new batch), so its mode must follow that batch now.
        target = _mode_of(_last_progress(old)) or wanted
        pending = Transition(previous.value, target.value, batch_id, decided, 0.0)
        transition = self._start_query(target, pending if target is not previous else None)
        if transition is None:
            log.info("restarted in %s: the last batch before the stop ended the change", previous.value)
            return
        log.info(
            "switched %s -> %s after batch %d in %.2f s", previous.value, target.value, batch_id,
            transition.restart_seconds,
        )
        self._switch_span.begin(
            transition, traceparent, decided_ns, self._intervals, query_id=self._query_id, run_id=self._run_id
        )

    def _wait_for_batch_boundary(self, query, batch_id: int) -> None:
        """Return when the running trigger is idle or a batch after ``batch_id`` committed.

        Stopping between batches avoids redoing an interrupted batch (correct either way:
        Spark replays it with the same offsets). With back-to-back batches the trigger is
        never seen idle, so the next commit is the boundary; bounded by the settle timeout.
        """
        deadline = time.monotonic() + self._settle_timeout_s
        while time.monotonic() < deadline:
            try:
                if not query.status.get("isTriggerActive", False):
                    return
                progress = query.lastProgress
                if progress is not None and _get(progress, "batchId") > batch_id:
                    return
            except Exception:
                return
            time.sleep(0.01)

    def _stop_query(self) -> None:
        if self._query is not None:
            try:
                self._query.stop()
            except Exception as exc:  # already failed or stopped
                log.debug("stopping the query: %s", exc)

    def _finish(self) -> None:
        self._switch_span.end(span_names.SWITCH_ENDED_BY_STOP)
        telemetry.flush()
        if not self._done.is_set():
            try:
                self._writer._spark.streams.removeListener(self._listener)
            except Exception:  # the session may be gone
                pass
            self._done.set()


class _SwitchSpan:
    """The ``backlog.mode_switch`` span: from the decision to the new run's first trigger.

    The controller thread and :meth:`BacklogAwareQuery.stop` call it; it exports once, when
    it ends, through :mod:`backlog_source.telemetry`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: tuple[Transition, SpanContextIds | None, int, dict] | None = None

    def begin(self, transition: Transition, traceparent: str | None, decided_ns: int, intervals: dict, *,
              query_id: str | None, run_id: str | None) -> None:
        self.end(span_names.SWITCH_ENDED_BY_STOP)  # a switch before the last one's first trigger
        attributes = {
            span_names.MODE_FROM: transition.from_mode,
            span_names.MODE_TO: transition.to_mode,
            span_names.BATCH_ID: transition.batch_id,
            span_names.INTERVAL_FROM_S: parse_interval_seconds("interval", intervals[Mode(transition.from_mode)]),
            span_names.INTERVAL_TO_S: parse_interval_seconds("interval", intervals[Mode(transition.to_mode)]),
            span_names.RESTART_SECONDS: transition.restart_seconds,
            span_names.QUERY_ID: query_id or "",
            span_names.RUN_ID: run_id or "",
        }
        with self._lock:
            self._open = (transition, SpanContextIds.parse(traceparent), decided_ns, attributes)

    def end(self, ended_by: str) -> None:
        with self._lock:
            if self._open is None:
                return
            _, parent, decided_ns, attributes = self._open
            self._open = None
        ids = SpanContextIds(parent.trace_id if parent else new_trace_id(), new_span_id())
        record = SpanRecord(
            span_names.MODE_SWITCH, ids, parent, decided_ns, time.time_ns(),
            {**attributes, span_names.SWITCH_ENDED_BY: ended_by},
        )
        telemetry.export([record])


def _last_progress(query):
    try:
        return query.lastProgress
    except Exception:  # the query object may be unusable after a failure
        return None


def _mode_of(progress) -> Mode | None:
    """The mode a progress event calls for, or None when it carries no backlog flag."""
    flag = None if progress is None else backlog_flag(progress)
    if flag is None:
        return None
    return Mode.HIGH_THROUGHPUT if flag else Mode.LOW_LATENCY


def _query_failure(query, exception_text: str | None) -> BaseException | None:
    if exception_text is None:
        return None
    try:
        failure = query.exception() if query is not None else None
    except Exception:
        failure = None
    return failure or BacklogSourceError(f"the query failed: {exception_text}")


def start_backlog_aware(
    writer,
    high_throughput_interval: str = "0 seconds",
    low_latency_interval: str = "1 second",
) -> BacklogAwareQuery:
    """Start ``writer`` with the trigger of the mode its backlog calls for, and switch modes
    whenever the source's ``processing_backlog`` flag changes.

    ``writer``: a ``DataStreamWriter`` with its sink and ``checkpointLocation`` set and no
    trigger, over a DataFrame that reads ``format("backlog")``. Raises :class:`ConfigError`,
    saying what to change, when the writer or the intervals do not qualify.
    """
    from backlog_source.writer_info import describe_writer

    high = parse_interval_seconds("high_throughput_interval", high_throughput_interval)
    low = parse_interval_seconds("low_latency_interval", low_latency_interval)
    if high < 0:
        raise ConfigError("high_throughput_interval must be >= 0 seconds")
    if low <= 0:
        raise ConfigError(
            f"low_latency_interval must be > 0 seconds, got {low_latency_interval!r}: a zero interval "
            "would keep triggering even when caught up"
        )
    telemetry.validate_environment()
    info = describe_writer(writer)
    if not info.checkpoint_location:
        raise ConfigError(
            "set .option('checkpointLocation', ...) on the writer: a mode switch restarts the query "
            "from its checkpoint, so it must have one"
        )
    if not info.backlog_sources:
        formats = ", ".join(info.other_formats) or "none found"
        raise ConfigError(
            "the writer's DataFrame reads no format('backlog') source (sources: "
            f"{formats}); start_backlog_aware switches modes on that source's backlog signal"
        )
    from backlog_source.settings import parse_options

    settings = [parse_options(options) for options in info.backlog_sources]
    if not all(s.backlog_enabled for s in settings):
        raise ConfigError("a format('backlog') source has backlog.enabled=false; remove it to switch modes")
    initial = _initial_mode(writer, info.checkpoint_location, settings)
    return BacklogAwareQuery(writer, high_throughput_interval, low_latency_interval, initial).start()


def _initial_mode(writer, checkpoint_location: str, settings) -> Mode:
    """The mode the first batch will call for, decided before the first start."""
    from backlog_source.writer_info import last_checkpointed_backlog_flags

    flags = last_checkpointed_backlog_flags(writer._spark, checkpoint_location)
    if flags is not None:
        # A restart: the first batch carries the checkpointed flag (re-entry aside).
        return Mode.HIGH_THROUGHPUT if any(flags) else Mode.LOW_LATENCY
    from enumerator.enumerator import Enumerator
    from enumerator.kafka_admin import KafkaOffsetsClient

    for source in settings:
        probe_settings = source.model_copy(update={"backlog_enabled": False})
        client = KafkaOffsetsClient(probe_settings)
        try:
            if Enumerator(probe_settings, client).probe_initial_backlog():
                return Mode.HIGH_THROUGHPUT
        finally:
            client.close()
    return Mode.LOW_LATENCY
