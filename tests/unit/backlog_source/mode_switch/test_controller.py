"""The controller and the handle, driven by recorded progress events, fake queries, a fake
switcher and a fake clock. The controller has no thread of its own: the tests hand it the
listener's messages on their own thread, so no test waits on a sleep; the handle's thread is
tested with a switch held on an event."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace

import pytest
from pyspark.sql.streaming import StreamingQueryListener

from backlog_source.core.errors import ModeSwitchError
from backlog_source.mode_switch import BacklogAwareQuery, BacklogModeListener
from backlog_source.mode_switch.controller import ModeController, QueryFailedError, StopTimeoutError
from backlog_source.mode_switch.listener import BatchCommitted, QueryTerminated
from backlog_source.mode_switch.query_switch import mode_intervals
from backlog_source.mode_switch.session_listener import SessionListener
from tests.fakes import (
    ChosenPolicy,
    FakeClock,
    FakeConnectSession,
    FakeConnectWriter,
    FakeSpark,
    FakeWriter,
    HeldSwitcher,
    RefusedAttach,
    SignallingSwitcher,
    WaitingReceiver,
    idle_event,
    iso_timestamp,
    progress_event,
    source,
)

T0 = 1_800_000_000.0  # the fake wall clock's start, seconds
INTERVALS = mode_intervals("0 seconds", "1 second")


class Harness:
    """A controller on a fake writer with a fake in-place switcher (or the real restart
    one): ``emit`` delivers a progress event through the real listener to the controller,
    on the test's thread."""

    def __init__(self, method="in-place", in_place=None, **policy):
        self.clock = FakeClock(T0)
        self.writer = FakeWriter()
        self.policy = ChosenPolicy(method, **({"in_place": in_place} if in_place else {}), **policy)
        self.switchers = self.policy.made
        self.controller = ModeController(self.writer, INTERVALS, self.policy, clock=self.clock,
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


def test_a_failure_spark_cannot_hand_over_is_a_query_failed_error_with_its_text():
    h = Harness()
    query = h.query
    query.failure = None  # query.exception() has nothing (Spark Connect, or the JVM gone)
    h.listener.onQueryTerminated(SimpleNamespace(id=query.id, runId=query.runId, exception="boom in batch 3"))
    assert isinstance(h.controller.failure, QueryFailedError)
    assert str(h.controller.failure) == "the query failed: boom in batch 3"


def test_messages_about_another_query_are_ignored():
    h = Harness()
    assert h.controller.handle(QueryTerminated("another-query", "x", "not ours"))
    assert h.controller.handle(BatchCommitted("another-query", "x", 0, False, 0))
    assert h.controller.failure is None and h.controller.mode == "high-throughput" and h.controller.transitions == []


def test_the_handle_ends_with_the_querys_failure_and_detaches_leaving_the_session_listener_registered():
    writer = FakeWriter()
    handle = BacklogAwareQuery(ModeController(writer, INTERVALS, ChosenPolicy()), writer._spark).start()
    query = handle.query
    query.failure = RuntimeError("boom in batch 3")
    listener = writer._spark.listeners[0]
    listener.onQueryTerminated(SimpleNamespace(id=query.id, runId=query.runId, exception="boom"))
    with pytest.raises(RuntimeError, match="boom in batch 3"):
        handle.await_termination(30)  # returns when the controller thread has ended
    assert writer._spark.listeners == [listener]  # never removed: a removal can hang Spark Connect
    assert not SessionListener.of(writer._spark).follows(query.id)  # the handle detached


def test_the_listener_callback_never_blocks_even_during_a_slow_switch():
    writer = FakeWriter()
    release, entered = threading.Event(), threading.Event()

    policy = ChosenPolicy(in_place=lambda query, intervals: HeldSwitcher(query, intervals, release, entered))
    controller = ModeController(writer, INTERVALS, policy)
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


# -- stop() never hangs (issue 33, item 4) --------------------------------------------------

WAIT_S = 10.0  # bound of every wait for something that must happen
POINTS = ("mid-backlog", "during-switch", "right-after-switch", "low-latency")


def bounded(*actions, within: float, what: str) -> None:
    """Run each action on a thread of its own, all at once, and fail (instead of hanging the
    test run) if one has not returned within ``within`` seconds; re-raise what one raised."""
    failures, finished = [], []

    def run(action, done):
        try:
            action()
        except BaseException as exc:
            failures.append(exc)
        finally:
            done.set()

    for action in actions:
        finished.append(threading.Event())
        threading.Thread(target=run, args=(action, finished[-1]), name=f"bounded: {what}", daemon=True).start()
    deadline = time.monotonic() + within
    for done in finished:
        assert done.wait(max(0.0, deadline - time.monotonic())), f"{what} did not return within {within} s"
    if failures:
        raise failures[0]


class ConnectSession:
    """A Spark Connect session, its client-side bus (PySpark's locking), and handles
    switching by restart, as under Connect. Events come from the server's side, delivered
    on the bus's event thread."""

    name = "connect"

    def __init__(self):
        self.session = FakeConnectSession()
        self.bus = self.session.streams._sqlb

    def start(self):
        writer = FakeConnectWriter(self.session)
        policy = ChosenPolicy("restart", connect=True)
        handle = BacklogAwareQuery(ModeController(writer, INTERVALS, policy, settle_timeout_s=0),
                                   self.session).start()
        return handle, writer, policy

    def post(self, event):
        self.bus.server_post(event)

    def switched(self, writer, policy) -> bool:
        return writer.wait_started(2, WAIT_S)  # the restart's new run has started

    def check_listener(self):
        assert self.session.streams.added == 1, "one listener for the session, registered once"
        assert self.session.streams.removed == 0 and self.bus.removals == 0, "never removed"
        probe = WaitingReceiver()  # the event thread is not stuck: a new event still arrives
        attachment = SessionListener.of(self.session).attach(self.session, probe)
        attachment.follow("probe")
        self.post(idle_event(SimpleNamespace(id="probe", runId="p"), 1))
        assert probe.wait_messages(1, WAIT_S), "the Connect event thread is stuck"
        attachment.detach()


class ClassicSession:
    """A classic session: the JVM's listener bus calls the listener on its own thread
    (``post`` here runs on the test's or the ticker's thread); switches are in place."""

    name = "classic"

    def __init__(self):
        self.spark = FakeSpark()

    def start(self):
        writer = FakeWriter()
        writer._spark = self.spark
        policy = ChosenPolicy("in-place", in_place=SignallingSwitcher)
        handle = BacklogAwareQuery(ModeController(writer, INTERVALS, policy), self.spark).start()
        return handle, writer, policy

    def post(self, event):
        self.spark.post(event)

    def switched(self, writer, policy) -> bool:
        return policy.made[0].switched.wait(WAIT_S)

    def check_listener(self):
        assert len(self.spark.listeners) == 1, "one listener for the session, never removed"


class Ticker:
    """Spark's side of a low-latency query: idle and progress events of the running run, one
    after another, until stopped (so that events are on their way while the handle stops)."""

    def __init__(self, session, handle):
        self._session, self._handle = session, handle
        self._stop = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="ticker", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive()

    def _run(self):
        batch = 100
        while not self._stop.is_set():
            run = self._handle.query
            batch += 1
            self._session.post(idle_event(run, batch * 1000))
            run.lastProgress = {"batchId": batch, "sources": [{"endOffset": source(False).endOffset}]}
            self._session.post(progress_event(run.id, run.runId, batch, source(False), at_ms=batch * 1000 + 1))
            self.sent += 2
            if self.sent >= 2_000:  # enough to overlap any stop; never an unbounded flood
                return


def emit(session, run, batch_id, processing_backlog):
    run.lastProgress = {"batchId": batch_id, "sources": [{"endOffset": source(processing_backlog).endOffset}]}
    session.post(progress_event(run.id, run.runId, batch_id, source(processing_backlog), at_ms=1_000 + batch_id))


@pytest.mark.parametrize("make_session", [ConnectSession, ClassicSession], ids=lambda s: s.name)
def test_twenty_stops_in_a_row_at_random_points_each_end_in_time(make_session):
    """One session, twenty handles, each stopped at a random point: mid-backlog (progress
    events on their way), during the switch, right after it (a Connect restart's terminated
    and started events on their way), or in low latency with events streaming. Each stop()
    returns within its bound, stops every run, and leaves the session's one listener
    registered and delivering. Sometimes a second thread stops the same handle at once (the
    old handle's two threads both called removeListener)."""
    rng = random.Random(33_4)
    points = [POINTS[i % len(POINTS)] for i in range(20)]
    rng.shuffle(points)
    session = make_session()
    for round_, point in enumerate(points):
        handle, writer, policy = session.start()
        first = handle.query
        backlog_batches = rng.randint(0, 3)
        for batch in range(backlog_batches):
            emit(session, first, batch, True)
        twice = rng.random() < 0.3
        ticker = None
        if point != "mid-backlog":
            emit(session, first, backlog_batches, False)  # the last backlog record read: switch to low latency
            if point in ("right-after-switch", "low-latency"):
                assert session.switched(writer, policy), f"round {round_}: the switch did not happen"
            if point == "low-latency":
                ticker = Ticker(session, handle).__enter__()
        stop = lambda: handle.stop(timeout=WAIT_S)  # noqa: E731
        try:
            bounded(*[stop] * (2 if twice else 1), within=WAIT_S + 5, what=f"round {round_} ({point}): stop()")
            bounded(stop, within=WAIT_S + 5, what=f"round {round_}: stop() again")
        finally:
            if ticker is not None:
                ticker.__exit__(None, None, None)
        assert handle.await_termination(0) is True, f"round {round_} ({point}): the handle did not end"
        assert all(run.stopped for run in writer.started), f"round {round_} ({point}): a run still runs"
        if point in ("right-after-switch", "low-latency"):
            assert handle.mode == "low-latency" and [t.to_mode for t in handle.transitions] == ["low-latency"]
    session.check_listener()


def test_stop_gives_up_in_time_when_the_querys_stop_does_not_return(caplog):
    """A query whose stop() never returns (a batch that cannot be interrupted): the wait is
    bounded, and the error and the log say where the controller thread is."""
    writer = FakeWriter()
    handle = BacklogAwareQuery(ModeController(writer, INTERVALS, ChosenPolicy()), writer._spark).start()
    release, entered = threading.Event(), threading.Event()
    handle.query.stop = lambda: (entered.set(), release.wait(WAIT_S))
    try:
        with pytest.raises(StopTimeoutError, match=r"gave up after 0\.2 s: the controller thread has not stopped "
                                                   r"the query \(it is in .*\)"):
            handle.stop(timeout=0.2)
        assert entered.is_set() and "stop() gave up" in caplog.text
    finally:
        release.set()
    assert handle.await_termination(WAIT_S)  # it ends once the query's stop returns


def test_stop_stops_the_query_in_time_after_the_controller_ended_first():
    """The in-place checks refused and the sink cannot restart: the controller ended, the
    query still runs in its first mode; stop() stops it (on a thread of its own, so its wait
    is bounded too)."""
    writer = FakeWriter()
    policy = ChosenPolicy(in_place=RefusedAttach, restart_refused="the memory sink cannot restart")
    handle = BacklogAwareQuery(ModeController(writer, INTERVALS, policy), writer._spark).start()
    with pytest.raises(ModeSwitchError):
        handle.await_termination(WAIT_S)
    query = handle.query
    assert not query.stopped
    release = threading.Event()
    original_stop = query.stop
    query.stop = lambda: (release.wait(WAIT_S), original_stop())
    with pytest.raises(StopTimeoutError, match="the query's stop\\(\\) has not returned"):
        handle.stop(timeout=0.2)
    release.set()
    bounded(lambda: handle.stop(timeout=WAIT_S), within=WAIT_S + 5, what="stop() once the query's stop returns")
    assert query.stopped


def test_stop_on_the_listener_thread_of_a_connect_session_does_not_hang():
    """A user's own listener callback may call stop(): it runs with the Connect bus lock
    held, and stop() must not want that lock (the old one called removeListener there)."""
    session = ConnectSession()
    handle, writer, policy = session.start()
    query = handle.query
    finished = threading.Event()

    class StopsOnIdle(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            pass

        def onQueryIdle(self, event):
            handle.stop(timeout=WAIT_S)
            finished.set()

        def onQueryTerminated(self, event):
            pass

    session.session.streams.addListener(StopsOnIdle())
    session.post(idle_event(query, 5000))
    assert finished.wait(WAIT_S + 5) and query.stopped


def test_a_controller_asked_before_start_says_so_even_under_python_o():
    """An explicit raise, not an assert (asserts vanish under ``python -O``)."""
    controller = ModeController(FakeWriter(), INTERVALS, ChosenPolicy())
    ended = QueryTerminated("q", "r", None)
    for ask in (lambda: controller.switch_method, controller.attach, lambda: controller.handle(ended)):
        with pytest.raises(ModeSwitchError, match=r"start\(\) first"):
            ask()
