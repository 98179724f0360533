"""EventsAsJson: Spark's Java events read through their json(), handed on as PySpark's types."""

from __future__ import annotations

import json
import uuid

from pyspark.sql.streaming.listener import StreamingQueryListener

from backlog_source.mode_switch import classic_events
from backlog_source.mode_switch.classic_events import EventsAsJson, java_listener

QUERY, RUN = str(uuid.uuid4()), str(uuid.uuid4())
END = {"source_id": "s", "positions": {"t": {"0": 5}}}


class JavaEvent:
    """What py4j hands the callback: a Java event; only json() is used, once."""

    def __init__(self, value: dict) -> None:
        self.value, self.calls = value, 0

    def json(self) -> str:
        self.calls += 1
        return json.dumps(self.value)


class Recording(StreamingQueryListener):
    def __init__(self) -> None:
        self.events = []

    def onQueryStarted(self, event):
        self.events.append(("started", event))

    def onQueryProgress(self, event):
        self.events.append(("progress", event))

    def onQueryIdle(self, event):
        self.events.append(("idle", event))

    def onQueryTerminated(self, event):
        self.events.append(("terminated", event))


def progress_json() -> dict:
    # The shape Spark's QueryProgressEvent.json renders (offsets as JSON values, not text).
    return {"progress": {
        "id": QUERY, "runId": RUN, "name": None, "timestamp": "2026-11-28T09:00:00.000Z", "batchId": 3,
        "batchDuration": 12, "durationMs": {"latestOffset": 4}, "stateOperators": [], "numInputRows": 7,
        "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 2.0,
        "sources": [{"description": "backlog", "startOffset": None, "endOffset": END, "latestOffset": END,
                     "numInputRows": 7, "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 2.0}],
        "sink": {"description": "noop", "numOutputRows": -1},
    }}


def test_every_event_is_read_with_one_call_and_arrives_as_pysparks_type():
    listener = Recording()
    bridge = EventsAsJson(listener)
    progress = JavaEvent(progress_json())
    bridge.onQueryStarted(JavaEvent({"id": QUERY, "runId": RUN, "name": "q", "timestamp": "t", "jobTags": ["a"]}))
    bridge.onQueryProgress(progress)
    bridge.onQueryIdle(JavaEvent({"id": QUERY, "runId": RUN, "timestamp": "t"}))
    bridge.onQueryTerminated(JavaEvent({"id": QUERY, "runId": RUN, "exception": "boom",
                                        "errorClassOnException": None}))

    assert [kind for kind, _ in listener.events] == ["started", "progress", "idle", "terminated"]
    started, got, idle, terminated = (event for _, event in listener.events)
    assert str(started.id) == QUERY and started.name == "q" and started.jobTags == {"a"}
    assert progress.calls == 1
    assert str(got.progress.id) == QUERY and got.progress.batchId == 3 and got.progress.numInputRows == 7
    # The end offset arrives as JSON text, as PySpark's own bridge hands it over.
    assert json.loads(got.progress.sources[0].endOffset) == END
    assert str(idle.runId) == RUN and terminated.exception == "boom"


def test_without_a_classic_spark_context_there_is_no_bridge(monkeypatch):
    monkeypatch.setattr(classic_events.SparkContext, "_jvm", None)
    assert java_listener(Recording()) is None


class UnrenderedJavaEvent(JavaEvent):
    """An event whose JSON PySpark's fromJson cannot read: Spark leaves a NaN rate out."""

    def __init__(self) -> None:
        value = progress_json()
        del value["progress"]["sources"][0]["inputRowsPerSecond"]
        super().__init__(value)


def test_an_event_whose_json_cannot_be_read_is_read_from_the_java_object_as_pyspark_does(monkeypatch):
    listener, from_java = Recording(), []
    monkeypatch.setattr(classic_events.QueryProgressEvent, "fromJObject",
                        classmethod(lambda cls, jevent: from_java.append(jevent) or "read from the Java object"))
    event = UnrenderedJavaEvent()
    EventsAsJson(listener).onQueryProgress(event)
    assert from_java == [event] and listener.events == [("progress", "read from the Java object")]
