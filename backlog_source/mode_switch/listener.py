"""The listener: reads the backlog flag from progress events and tells a controller.

Which process: the user's driver program; callbacks run on Spark's listener thread (classic
PySpark) or the client's listener thread (Spark Connect) and must return at once, so the
listener only parses and hands a typed message to a :class:`MessageReceiver`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pyspark.sql.streaming import StreamingQueryListener

from backlog_source.core.text_enum import TextEnum
from backlog_source.mode_switch.classic_events import java_listener
from backlog_source.enumerator.state import SourceOffset
from backlog_source.enumerator.state_codec import parse_reported


class Mode(TextEnum):
    HIGH_THROUGHPUT = "high-throughput"
    LOW_LATENCY = "low-latency"

    @classmethod
    def for_backlog(cls, processing_backlog: bool) -> "Mode":
        return cls.HIGH_THROUGHPUT if processing_backlog else cls.LOW_LATENCY


@dataclass(frozen=True)
class BatchCommitted:
    """A progress event of a backlog-aware query: batch ``batch_id`` committed;
    ``processing_backlog`` is whether backlog is left after it; ``trigger_started_ms`` is
    when its trigger started (Spark's progress timestamp); ``traceparent`` the context of
    the (current or last) backlog phase; ``query_name`` the query's name (None if it has
    none); ``ends`` each backlog source's end offset (the batch's), parsed; ``progress``
    Spark's progress itself, for a receiver that reads more of it (the metrics)."""

    query_id: str
    run_id: str
    batch_id: int
    processing_backlog: bool
    trigger_started_ms: int
    traceparent: str | None = None
    query_name: str | None = None
    ends: tuple[SourceOffset, ...] = ()
    progress: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class TriggerIdle:
    """A trigger found no new data (Spark's ``onQueryIdle``)."""

    query_id: str
    run_id: str
    at_ms: int


@dataclass(frozen=True)
class QueryTerminated:
    """A run ended; ``exception`` is Spark's text of its failure, or None after a stop."""

    query_id: str
    run_id: str
    exception: str | None


class MessageReceiver(Protocol):
    """What :class:`BacklogModeListener` reports to (the handle of
    :func:`~backlog_source.mode_switch.start_backlog_aware` queues them for its controller).
    ``receive`` must not block."""

    def receive(self, message: BatchCommitted | TriggerIdle | QueryTerminated) -> None: ...


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def backlog_offsets(progress: Any) -> list[SourceOffset]:
    """The end offsets of the progress's ``format("backlog")`` sources, parsed."""
    offsets = (parse_reported(_get(source, "endOffset")) for source in _get(progress, "sources") or [])
    return [offset for offset in offsets if offset is not None]


def backlog_flag(progress: Any) -> bool | None:
    """True if some backlog source of this progress has backlog left after its batch, False
    if none has, None if the progress has no backlog source. Takes a
    ``StreamingQueryProgress`` or its dict form."""
    flags = [offset.processing_backlog for offset in backlog_offsets(progress)]
    return any(flags) if flags else None


def mode_called_for(progress: Any) -> Mode | None:
    """The mode a progress event calls for (high-throughput while backlog is left), or None
    when there is no progress or it has no backlog source."""
    flag = None if progress is None else backlog_flag(progress)
    return None if flag is None else Mode.for_backlog(flag)


def timestamp_ms(text: str) -> int:
    """Spark's progress timestamp (``2026-11-22T20:25:12.001Z``) in ms since the epoch."""
    return int(datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp() * 1000)


class BacklogModeListener(StreamingQueryListener):
    """Reads ``processing_backlog`` from progress events and reports it to a controller.

    Usable on its own: register it with ``spark.streams.addListener`` and give it any
    :class:`MessageReceiver`. Callbacks return at once.
    """

    def __init__(self, controller: MessageReceiver) -> None:
        self._controller = controller

    @property
    def _jlistener(self) -> Any:
        """What classic PySpark's ``addListener`` registers: events read as JSON, one py4j
        call each (classic_events.py says why), else PySpark's own bridge. Spark Connect
        does not use it."""
        if getattr(self, "_jlistenerobj", None) is None:
            self._jlistenerobj = java_listener(self) or StreamingQueryListener._jlistener.fget(self)
        return self._jlistenerobj

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        ends = tuple(backlog_offsets(progress))
        if ends:
            self._controller.receive(BatchCommitted(
                str(progress.id), str(progress.runId), progress.batchId,
                any(end.processing_backlog for end in ends), timestamp_ms(progress.timestamp),
                next((end.trace.ids.traceparent for end in ends if end.trace is not None), None),
                getattr(progress, "name", None) or None, ends, progress,
            ))

    def onQueryIdle(self, event) -> None:
        self._controller.receive(TriggerIdle(str(event.id), str(event.runId), timestamp_ms(event.timestamp)))

    def onQueryTerminated(self, event) -> None:
        self._controller.receive(QueryTerminated(str(event.id), str(event.runId), event.exception))
