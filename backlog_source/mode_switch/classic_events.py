"""Spark's listener events for a classic PySpark session, read with one py4j call each.

Which process: the user's driver program (classic PySpark only; Spark Connect sends events as
JSON already). The callbacks run on Spark's listener-bus thread for streaming queries
(``spark-listener-group-streams``), which waits for them: py4j pins the Java thread that called
Python, and every call Python makes back runs on it.

Why: PySpark's own bridge (``JStreamingQueryListener`` in pyspark/sql/streaming/listener.py)
builds each event from the Java object a field at a time: dozens of py4j calls per progress
event, and reading each Java map ends in an exception whose conversion asks the JVM for class
names that do not exist, each a scan of every jar on the class path. Measured on the suite's
mode-switch files (Java Flight Recorder), that scanning was ~38 % of the driver JVM's CPU, and
the session's listener hears every progress event of every query of the session (a
low-latency query: several a second). Every event also has ``json()`` (the form Spark Connect
sends); :class:`EventsAsJson` reads that once and builds the same event types with PySpark's
own ``fromJson``, so a listener sees what Connect's listeners see.

Contract: :func:`java_listener` returns the JVM object ``spark.streams.addListener`` registers
for ``listener`` (what PySpark's ``StreamingQueryListener._jlistener`` returns), or None when this
PySpark lacks the pieces (then PySpark's own bridge is used, slower, never wrong). A callback
that raises is logged by py4j/Spark as PySpark's would be.
"""

from __future__ import annotations

import json
from typing import Any

from py4j.java_gateway import JavaClass
from pyspark import SparkContext
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)


class EventsAsJson:
    """The Python side of Spark's ``PythonStreamingQueryListener`` (py4j calls these): each
    event read as its JSON and handed to ``listener`` as PySpark's event type."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        self._listener.onQueryStarted(_read(QueryStartedEvent, jevent))

    def onQueryProgress(self, jevent: Any) -> None:
        self._listener.onQueryProgress(_read(QueryProgressEvent, jevent))

    def onQueryIdle(self, jevent: Any) -> None:
        self._listener.onQueryIdle(_read(QueryIdleEvent, jevent))

    def onQueryTerminated(self, jevent: Any) -> None:
        self._listener.onQueryTerminated(_read(QueryTerminatedEvent, jevent))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def _read(event_type: Any, jevent: Any) -> Any:
    """``event_type`` from the event's JSON; from the Java object, as PySpark's own bridge
    reads it, when the JSON cannot be read: Spark leaves a NaN or infinite rate out of it
    (which PySpark's ``fromJson`` requires) and cannot render every observed metric. An event
    lost here could be the batch that ends a backlog phase, so none is."""
    try:
        return event_type.fromJson(json.loads(jevent.json()))
    except Exception:  # process boundary: whatever the JVM rendered, the slow path reads every event
        return event_type.fromJObject(jevent)


def java_listener(listener: StreamingQueryListener) -> Any | None:
    """The JVM listener wrapping :class:`EventsAsJson` of ``listener`` in the active classic
    SparkContext, or None without one (or on a PySpark without Spark's Python listener wrapper)."""
    jvm = SparkContext._jvm
    if jvm is None:
        return None
    # py4j answers a name it cannot find with a JavaPackage, not an error.
    wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
    return wrapper(EventsAsJson(listener)) if isinstance(wrapper, JavaClass) else None
