"""The controller and the handle, driven by recorded progress events, fake queries, a fake
switcher and a fake clock. The controller has no thread of its own: the tests hand it the
listener's messages on their own thread, so no test waits on a sleep; the handle's thread is
tested with a switch held on an event."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from backlog_source.core.errors import ModeSwitchError
from backlog_source.mode_switch import BacklogAwareQuery, BacklogModeListener
from backlog_source.mode_switch.controller import ModeController
from backlog_source.mode_switch.listener import BatchCommitted, QueryTerminated
from tests.fakes import (
    ChosenPolicy,
    FakeClock,
    FakeWriter,
    HeldSwitcher,
    RefusedAttach,
    iso_timestamp,
    progress_event,
    source,
)

T0 = 1_800_000_000.0  # the fake wall clock's start, seconds


class Harness:
    """A controller on a fake writer with a fake in-place switcher (or the real restart
    one): ``emit`` delivers a progress event through the real listener to the controller,
    on the test's thread."""

    def __init__(self, method="in-place", in_place=None, **policy):
        self.clock = FakeClock(T0)
        self.writer = FakeWriter()
        self.policy = ChosenPolicy(method, **({"in_place": in_place} if in_place else {}), **policy)
        self.switchers = self.policy.made
        self.controller = ModeController(self.writer, "0 seconds", "1 second", self.policy, clock=self.clock,
                                         settle_timeout_s=0)
        self.controller.start()
        self.attached = self.controller.attach()
        self.listener = BacklogModeListener(self)
        self.running = self.attached

    def receive(self, message):
        """The listener's messages go straight to the controller (the handle would queue them)."""
        if self.running:
            self.running = self.controller.handle(message)

    @property
    def query(self):
        return self.controller.query

    def emit(self, batch_id, processing_backlog, *, run=None, started_after_s=0.0):
        """A progress event of ``run`` (default: the current one) whose trigger started
        ``started_after_s`` after the fake clock's now; the clock then moves past it."""
        query = run or self.controller.query
        at_ms = int((self.clock.now + started_after_s) * 1000)
        event = progress_event(query.id, query.runId, batch_id, source(processing_backlog), at_ms=at_ms)
        query.lastProgress = {"batchId": batch_id, "sources": [{"endOffset": event.progress.sources[0].endOffset}]}
        self.listener.onQueryProgress(event)
        self.clock.advance(started_after_s + 0.01)


def test_the_first_run_starts_in_high_throughput_and_switches_in_place_once_per_phase():
    h = Harness()
    assert h.writer.started[0].interval_ms == 0 and h.controller.mode == "high-throughput"
    query = h.query
    h.emit(0, True)
    h.emit(1, True)
    h.emit(2, False)  # the batch that read the last backlog record: switch now
    h.emit(3, False, started_after_s=0.5)  # the first trigger under the new interval
    h.emit(4, False, started_after_s=1.0)
    assert h.controller.query is query and len(h.writer.started) == 1 and not query.stopped  # same query, same run
    assert h.switchers[0].applied == [1000] and h.controller.mode == "low-latency"
    (transition,) = h.controller.transitions
    assert (transition.from_mode, transition.to_mode, transition.batch_id, transition.method) == (
        "high-throughput", "low-latency", 2, "in-place")
    assert transition.restart_seconds == 0.0
    assert transition.effective_seconds == pytest.approx(0.5, abs=0.02)  # decision -> next trigger's start
    assert h.controller.switch_method == "in-place"


def test_reentry_switches_back_and_forth_once_each():
    h = Harness()
    for batch, flag in enumerate([True, False, False, True, True, False]):
        h.emit(batch, flag)
    assert [(t.from_mode, t.to_mode) for t in h.controller.transitions] == [
        ("high-throughput", "low-latency"), ("low-latency", "high-throughput"), ("high-throughput", "low-latency"),
    ]
    assert h.switchers[0].applied == [1000, 0, 1000]


def test_a_caught_up_query_switches_after_its_first_batch():
    h = Harness()
    h.emit(0, False)
    assert h.controller.mode == "low-latency" and len(h.controller.transitions) == 1


def test_the_restart_method_stops_and_starts_and_ignores_the_replaced_run():
    h = Harness(method="restart")
    first = h.query
    h.emit(0, False)
    assert first.stopped and len(h.writer.started) == 2 and h.writer.started[1].interval_ms == 1000
    (transition,) = h.controller.transitions
    assert transition.method == "restart" and h.controller.query is h.writer.started[1]
    h.emit(1, True, run=first)  # a late event of the stopped run changes nothing
    assert len(h.writer.started) == 2 and h.controller.mode == "low-latency"


def test_a_restart_follows_the_stopped_runs_last_batch():
    """Re-entry seen in batch 2; while the restart waits for the trigger, batch 3 ends the
    re-entered backlog. The new run may never report again, so it must start in the mode
    batch 3 calls for, and no transition is recorded."""
    h = Harness(method="restart")
    h.emit(0, False)  # high-throughput -> low-latency
    old = h.query
    original_stop = old.stop

    def stop_after_one_more_batch():
        old.lastProgress = {"batchId": 3, "sources": [{"endOffset": source(False).endOffset}]}
        original_stop()

    old.stop = stop_after_one_more_batch
    # While waiting, batch 2 (backlog) is the last one, so the stop happens...
    h.emit(2, True)
    assert len(h.writer.started) == 3 and h.writer.started[2].interval_ms == 1000  # ...and the new run is low latency
    assert h.controller.mode == "low-latency" and len(h.controller.transitions) == 1


def test_a_flag_that_flips_back_while_waiting_causes_no_restart():
    h = Harness(method="restart")
    h.emit(0, False)
    query = h.query
    query.lastProgress = {"batchId": 5, "sources": [{"endOffset": source(False).endOffset}]}
    # Batch 4 asked for backlog, but batch 5 (already committed) did not.
    h.listener.onQueryProgress(progress_event(query.id, query.runId, 4, source(True), at_ms=int(h.clock.now * 1000)))
    assert not query.stopped and len(h.writer.started) == 2 and len(h.controller.transitions) == 1


def test_a_failed_query_surfaces_its_error_and_is_not_restarted():
    h = Harness()
    query = h.query
    query.failure = RuntimeError("boom in batch 3")
    h.listener.onQueryTerminated(SimpleNamespace(id=query.id, runId=query.runId, exception="boom in batch 3"))
    assert not h.running and isinstance(h.controller.failure, RuntimeError)
    assert str(h.controller.failure) == "boom in batch 3" and len(h.writer.started) == 1


def test_messages_about_another_query_are_ignored():
    h = Harness()
    assert h.controller.handle(QueryTerminated("another-query", "x", "not ours"))
    assert h.controller.handle(BatchCommitted("another-query", "x", 0, False, 0))
    assert h.controller.failure is None and h.controller.mode == "high-throughput" and h.controller.transitions == []


def test_the_handle_ends_with_the_querys_failure_and_removes_its_listener():
    writer = FakeWriter()
    handle = BacklogAwareQuery(ModeController(writer, "0 seconds", "1 second", ChosenPolicy()), writer._spark).start()
    query = handle.query
    query.failure = RuntimeError("boom in batch 3")
    writer._spark.listeners[0].onQueryTerminated(SimpleNamespace(id=query.id, runId=query.runId, exception="boom"))
    with pytest.raises(RuntimeError, match="boom in batch 3"):
        handle.await_termination(30)  # returns when the controller thread has ended
    assert writer._spark.listeners == []


def test_the_listener_callback_never_blocks_even_during_a_slow_switch():
    writer = FakeWriter()
    release, entered = threading.Event(), threading.Event()

    policy = ChosenPolicy(in_place=lambda query, intervals: HeldSwitcher(query, intervals, release, entered))
    controller = ModeController(writer, "0 seconds", "1 second", policy)
    handle = BacklogAwareQuery(controller, writer._spark).start()
    try:
        query = handle.query
        listener = writer._spark.listeners[0]
        listener.onQueryProgress(progress_event(query.id, query.runId, 0, source(False)))
        assert entered.wait(30)  # the controller thread is inside the slow switch now
        listener.onQueryProgress(progress_event(query.id, query.runId, 1, source(False)))  # returns at once
        listener.onQueryIdle(SimpleNamespace(id=query.id, runId=query.runId, timestamp=iso_timestamp(4000)))
        assert handle.mode == "high-throughput"  # still switching, and the callbacks did not wait for it
    finally:
        release.set()
        handle.stop()
    assert handle.transitions and handle.transitions[0].to_mode == "low-latency"


def test_an_executor_failing_the_checks_after_start_means_switching_by_restart(caplog):
    h = Harness(in_place=RefusedAttach)
    first = h.query
    h.emit(0, False)
    assert h.controller.switch_method == "restart" and first.stopped and len(h.writer.started) == 2
    assert h.controller.transitions[0].method == "restart"
    assert "mode switches are by restart after all" in caplog.text and "x.Other" in caplog.text


def test_an_executor_failing_the_checks_ends_the_controller_when_the_sink_cannot_restart():
    h = Harness(in_place=RefusedAttach, restart_refused="the memory sink cannot restart")
    assert h.attached is False
    with pytest.raises(ModeSwitchError, match=r"in place is impossible on the running query \(the trigger executor "
                                              r"is a x.Other.*\), and the memory sink cannot restart"):
        raise h.controller.failure
    assert len(h.writer.started) == 1 and not h.query.stopped and h.controller.transitions == []
