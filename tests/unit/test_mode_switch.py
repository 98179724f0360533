"""The listener and the controller, driven by recorded progress events and fake queries."""

from __future__ import annotations

import itertools
import json
import threading
import time
from types import SimpleNamespace

import pytest

from backlog_source.errors import ConfigError
from backlog_source.mode_switch import (
    BacklogAwareQuery,
    BacklogModeListener,
    Mode,
    backlog_flag,
    parse_interval_seconds,
)
from backlog_source.broker import wait_for


PHASE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def source(processing_backlog=None, raw=None, traceparent=None):
    if raw is not None:
        return SimpleNamespace(endOffset=raw)
    offset = {"v": 1, "source_id": "s", "positions": {}, "processing_backlog": processing_backlog}
    if traceparent:
        offset["trace"] = {"traceparent": traceparent, "started_ms": 1}
    return SimpleNamespace(endOffset=json.dumps(offset))


def progress_event(query_id, run_id, batch_id, *sources):
    return SimpleNamespace(progress=SimpleNamespace(id=query_id, runId=run_id, batchId=batch_id, sources=list(sources)))


class RecordingController:
    def __init__(self):
        self.calls = []

    def on_progress(self, *args):
        self.calls.append(("progress", *args))

    def on_idle(self, *args):
        self.calls.append(("idle", *args))

    def on_terminated(self, *args):
        self.calls.append(("terminated", *args))


def test_listener_reports_the_backlog_flag_of_recorded_progress_events():
    controller = RecordingController()
    listener = BacklogModeListener(controller)
    listener.onQueryProgress(progress_event("q", "r1", 0, source(True, traceparent=PHASE)))
    listener.onQueryProgress(progress_event("q", "r1", 1, source(False), source(True)))
    listener.onQueryProgress(progress_event("q", "r1", 2, source(raw='{"kafka": {"0": 5}}')))  # not ours
    listener.onQueryProgress(progress_event("q", "r1", 3, source(False)))
    listener.onQueryIdle(SimpleNamespace(id="q", runId="r1"))
    listener.onQueryTerminated(SimpleNamespace(id="q", runId="r1", exception=None))
    assert controller.calls == [
        ("progress", "q", "r1", 0, True, PHASE),  # the phase's trace context comes along
        ("progress", "q", "r1", 1, True, None),
        ("progress", "q", "r1", 3, False, None),
        ("idle", "q", "r1"),
        ("terminated", "q", "r1", None),
    ]


def test_backlog_flag_of_a_progress_without_backlog_sources_is_none():
    assert backlog_flag(SimpleNamespace(sources=[])) is None
    assert backlog_flag(SimpleNamespace(sources=[source(raw="not json")])) is None


@pytest.mark.parametrize(
    "text, seconds", [("0 seconds", 0), ("1 second", 1), ("500 milliseconds", 0.5), ("2 minutes", 120), ("1h", 3600)]
)
def test_intervals_parse(text, seconds):
    assert parse_interval_seconds("x", text) == seconds


def test_bad_interval_says_what_is_allowed():
    with pytest.raises(ConfigError, match="low_latency_interval must be an interval such as '0 seconds'"):
        parse_interval_seconds("low_latency_interval", "soon")


# ----------------------------------------------------------------------------- controller


class FakeQuery:
    ids = itertools.count()

    def __init__(self, spark, trigger):
        self.id, self.runId = "query-1", f"run-{next(self.ids)}"
        self.trigger = trigger
        self.stopped = False
        self.spark = spark
        self.failure = None
        self.lastProgress = None

    @property
    def status(self):
        return {"isTriggerActive": False}

    def stop(self):
        self.stopped = True
        # Spark reports the termination of a stopped run on the listener bus.
        for listener in self.spark.listeners:
            listener.onQueryTerminated(SimpleNamespace(id=self.id, runId=self.runId, exception=None))

    def exception(self):
        return self.failure


class FakeSpark:
    def __init__(self):
        self.listeners = []
        self.streams = SimpleNamespace(addListener=self.listeners.append, removeListener=self.listeners.remove)


class FakeWriter:
    def __init__(self):
        self._spark = FakeSpark()
        self.started: list[FakeQuery] = []
        self._trigger = None

    def trigger(self, processingTime):
        self._trigger = processingTime
        return self

    def start(self):
        query = FakeQuery(self._spark, self._trigger)
        self.started.append(query)
        return query


def emit(writer, batch_id, processing_backlog, run=None):
    query = writer.started[-1] if run is None else run
    event = progress_event(query.id, query.runId, batch_id, source(processing_backlog))
    query.lastProgress = event.progress
    for listener in list(writer._spark.listeners):
        listener.onQueryProgress(event)


def make_handle(initial=Mode.HIGH_THROUGHPUT):
    writer = FakeWriter()
    handle = BacklogAwareQuery(writer, "0 seconds", "1 second", initial).start()
    return writer, handle


def test_one_switch_per_backlog_phase_with_the_right_triggers():
    writer, handle = make_handle()
    assert writer.started[0].trigger == "0 seconds" and handle.mode == "high-throughput"
    emit(writer, 0, True)
    emit(writer, 1, True)
    emit(writer, 2, False)
    wait_for(lambda: len(writer.started) == 2, 5, "the switch")
    emit(writer, 3, False)
    emit(writer, 4, False)
    time.sleep(0.1)
    assert len(writer.started) == 2 and writer.started[0].stopped
    assert writer.started[1].trigger == "1 second" and handle.mode == "low-latency"
    (transition,) = handle.transitions
    assert (transition.from_mode, transition.to_mode, transition.batch_id) == ("high-throughput", "low-latency", 2)
    assert transition.restart_seconds >= 0
    handle.stop()
    assert handle.await_termination(1) is True and writer.started[-1].stopped


def test_reentry_switches_back_and_forth_once_each():
    writer, handle = make_handle()
    for batch, flag in enumerate([True, False, False, True, True, False]):
        emit(writer, batch, flag)
        time.sleep(0.05)
    wait_for(lambda: len(handle.transitions) == 3, 5, "three transitions")
    assert [(t.from_mode, t.to_mode) for t in handle.transitions] == [
        ("high-throughput", "low-latency"), ("low-latency", "high-throughput"), ("high-throughput", "low-latency"),
    ]
    handle.stop()


def test_progress_from_a_replaced_run_is_ignored():
    writer, handle = make_handle()
    first = writer.started[0]
    emit(writer, 0, False)
    wait_for(lambda: len(writer.started) == 2, 5, "the switch")
    emit(writer, 1, True, run=first)  # late event of the stopped run
    time.sleep(0.1)
    assert len(writer.started) == 2 and handle.mode == "low-latency"
    handle.stop()


def test_a_caught_up_start_begins_in_low_latency_without_restart():
    writer, handle = make_handle(initial=Mode.LOW_LATENCY)
    emit(writer, 0, False)
    time.sleep(0.1)
    assert len(writer.started) == 1 and writer.started[0].trigger == "1 second" and handle.transitions == []
    handle.stop()


def test_a_failed_query_surfaces_its_error_and_is_not_restarted():
    writer, handle = make_handle()
    query = writer.started[0]
    query.failure = RuntimeError("boom in batch 3")
    for listener in list(writer._spark.listeners):
        listener.onQueryTerminated(SimpleNamespace(id=query.id, runId=query.runId, exception="boom in batch 3"))
    with pytest.raises(RuntimeError, match="boom in batch 3"):
        handle.await_termination(5)
    emit(writer, 4, False)
    time.sleep(0.1)
    assert len(writer.started) == 1
    assert writer._spark.listeners == []


def test_the_listener_callback_never_blocks_even_during_a_slow_switch():
    writer, handle = make_handle()
    release = threading.Event()
    original = writer.started[0].stop
    writer.started[0].stop = lambda: (release.wait(5), original())
    emit(writer, 0, False)
    started = time.monotonic()
    emit(writer, 1, False)  # delivered while the controller is stuck in stop()
    assert time.monotonic() - started < 0.5
    release.set()
    wait_for(lambda: len(writer.started) == 2, 5, "the switch")
    handle.stop()


def test_failure_messages_from_an_unknown_query_are_ignored():
    writer, handle = make_handle()
    for listener in list(writer._spark.listeners):
        listener.onQueryTerminated(SimpleNamespace(id="another-query", runId="x", exception="not ours"))
    assert handle.await_termination(0.2) is False
    handle.stop()


def test_a_flag_change_committed_during_the_switch_decides_the_new_runs_mode():
    """Re-entry seen in batch 2; while the controller waits for the trigger, batch 3 ends the
    re-entered backlog. The new run starts caught up and may never report again, so the
    controller must start it in the mode batch 3 calls for."""
    writer, handle = make_handle(initial=Mode.LOW_LATENCY)
    old = writer.started[0]
    original_stop = old.stop

    def stop_after_one_more_batch():
        emit(writer, 3, False, run=old)  # committed while we waited
        original_stop()

    old.stop = stop_after_one_more_batch
    old_status = FakeQuery.status
    FakeQuery.status = property(lambda self: {"isTriggerActive": False})
    try:
        emit(writer, 2, True)
        wait_for(lambda: len(writer.started) == 2, 5, "the restart")
        time.sleep(0.1)
        assert handle.mode == "low-latency" and writer.started[1].trigger == "1 second"
        assert handle.transitions == []  # nothing to switch in the end
    finally:
        FakeQuery.status = old_status
        handle.stop()


def test_a_flag_that_flips_back_before_the_stop_causes_no_restart():
    writer, handle = make_handle(initial=Mode.LOW_LATENCY)
    emit(writer, 2, True)
    emit(writer, 3, False)  # lastProgress already says caught up when the controller looks
    time.sleep(0.2)
    assert len(writer.started) == 1 and handle.transitions == []
    handle.stop()
