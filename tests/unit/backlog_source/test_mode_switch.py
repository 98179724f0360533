"""The listener, the controller and the switch policy, driven by recorded progress events,
fake queries, a fake switcher and a fake clock. The controller has no thread of its own:
the tests hand it the listener's messages on their own thread, so no test waits on a sleep;
the handle's thread is tested with a switch held on an event."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from backlog_source.core.durations import duration_seconds
from backlog_source.core.errors import ConfigError, ModeSwitchError
from backlog_source.mode_switch import BacklogAwareQuery, BacklogModeListener, Mode, backlog_flag
from backlog_source.mode_switch.controller import ModeController
from backlog_source.mode_switch.listener import BatchCommitted, QueryTerminated, TriggerIdle
from backlog_source.mode_switch.policy import AskedMethod, SwitchPolicy
from backlog_source.mode_switch.switchers import InPlaceSwitcher, RestartSwitcher
from backlog_source.mode_switch.writer_info import WriterInfo
from tests.fakes import FakeClock, FakeInPlaceSwitcher, FakeWriter

PHASE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
T0 = 1_800_000_000.0  # the fake wall clock's start, seconds


def source(processing_backlog=None, raw=None, traceparent=None):
    if raw is not None:
        return SimpleNamespace(endOffset=raw)
    offset = {"v": 2, "source_id": "s", "positions": {"t": {"0": 3}},
              "backlog": {"t": {"0": 5}} if processing_backlog else {}}
    if traceparent:
        offset["trace"] = {"traceparent": traceparent, "started_ms": 1}
    return SimpleNamespace(endOffset=json.dumps(offset))


def progress_event(query_id, run_id, batch_id, *sources, at_ms=0):
    timestamp = f"2027-01-15T08:00:{at_ms // 1000:02d}.{at_ms % 1000:03d}Z"
    return SimpleNamespace(progress=SimpleNamespace(id=query_id, runId=run_id, batchId=batch_id, timestamp=timestamp,
                                                    sources=list(sources)))


class Recording:
    def __init__(self):
        self.messages = []

    def receive(self, message):
        self.messages.append(message)


def test_listener_sends_typed_messages_from_recorded_progress_events():
    controller = Recording()
    listener = BacklogModeListener(controller)
    listener.onQueryProgress(progress_event("q", "r1", 0, source(True, traceparent=PHASE), at_ms=1500))
    listener.onQueryProgress(progress_event("q", "r1", 1, source(False), source(True)))
    listener.onQueryProgress(progress_event("q", "r1", 2, source(raw='{"kafka": {"0": 5}}')))  # not ours
    listener.onQueryProgress(progress_event("q", "r1", 3, source(False)))
    listener.onQueryIdle(SimpleNamespace(id="q", runId="r1", timestamp="2027-01-15T08:00:04.000Z"))
    listener.onQueryTerminated(SimpleNamespace(id="q", runId="r1", exception=None))
    first, second, third, idle, done = controller.messages
    assert (first.batch_id, first.processing_backlog, first.traceparent) == (0, True, PHASE)
    assert first.trigger_started_ms % 60_000 == 1500
    assert (second.batch_id, second.processing_backlog, third.batch_id, third.processing_backlog) == (1, True, 3, False)
    assert isinstance(idle, TriggerIdle) and isinstance(done, QueryTerminated) and done.exception is None


def test_backlog_flag_of_a_progress_without_backlog_sources_is_none():
    assert backlog_flag(SimpleNamespace(sources=[])) is None
    assert backlog_flag(SimpleNamespace(sources=[source(raw="not json")])) is None


@pytest.mark.parametrize(
    "text, seconds", [("0 seconds", 0), ("1 second", 1), ("500 milliseconds", 0.5), ("2 minutes", 120), ("1h", 3600)]
)
def test_intervals_parse(text, seconds):
    assert duration_seconds("x", text) == seconds


def test_bad_interval_says_what_is_allowed():
    with pytest.raises(ConfigError, match="low_latency_interval must be a duration such as '500ms'.*'0 seconds'"):
        duration_seconds("low_latency_interval", "soon")


# ----------------------------------------------------------------------------- the controller


class ChosenPolicy(SwitchPolicy):
    """The real policy, except that the in-place switcher it chooses is ``in_place`` (a
    fake) instead of one prepared on a JVM query; records every switcher it made."""

    def __init__(self, method="in-place", in_place=FakeInPlaceSwitcher, **policy):
        super().__init__(**policy)
        object.__setattr__(self, "made", [])
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "in_place", in_place)

    def choose(self, query, restart):
        switcher = self.in_place(query) if self.method == "in-place" else restart()
        self.made.append(switcher)
        return switcher, "test"


class Harness:
    """A controller on a fake writer with a fake in-place switcher (or the real restart
    one): ``emit`` delivers a progress event through the real listener to the controller,
    on the test's thread."""

    def __init__(self, method="in-place", in_place=FakeInPlaceSwitcher, **policy):
        self.clock = FakeClock(T0)
        self.writer = FakeWriter()
        self.policy = ChosenPolicy(method, in_place, **policy)
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
        event = SimpleNamespace(progress=SimpleNamespace(
            id=query.id, runId=query.runId, batchId=batch_id,
            timestamp=_iso(at_ms), sources=[source(processing_backlog)]))
        query.lastProgress = {"batchId": batch_id, "sources": [{"endOffset": event.progress.sources[0].endOffset}]}
        self.listener.onQueryProgress(event)
        self.clock.advance(started_after_s + 0.01)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
    # still_needed sees batch 2 (backlog) as the last one, so the stop happens...
    h.emit(2, True)
    assert len(h.writer.started) == 3 and h.writer.started[2].interval_ms == 1000  # ...and the new run is low latency
    assert h.controller.mode == "low-latency" and len(h.controller.transitions) == 1


def test_a_flag_that_flips_back_while_waiting_causes_no_restart():
    h = Harness(method="restart")
    h.emit(0, False)
    query = h.query
    query.lastProgress = {"batchId": 5, "sources": [{"endOffset": source(False).endOffset}]}
    # Batch 4 asked for backlog, but batch 5 (already committed) did not.
    h.listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(
        id=query.id, runId=query.runId, batchId=4, timestamp=_iso(int(h.clock.now * 1000)), sources=[source(True)])))
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

    class SlowSwitcher(FakeInPlaceSwitcher):
        def switch(self, interval_ms):
            entered.set()
            release.wait(30)
            return super().switch(interval_ms)

    controller = ModeController(writer, "0 seconds", "1 second", ChosenPolicy(in_place=SlowSwitcher))
    handle = BacklogAwareQuery(controller, writer._spark).start()
    try:
        query = handle.query
        listener = writer._spark.listeners[0]
        listener.onQueryProgress(progress_event(query.id, query.runId, 0, source(False)))
        assert entered.wait(30)  # the controller thread is inside the slow switch now
        listener.onQueryProgress(progress_event(query.id, query.runId, 1, source(False)))  # returns at once
        listener.onQueryIdle(SimpleNamespace(id=query.id, runId=query.runId, timestamp="2027-01-15T08:00:04.000Z"))
        assert handle.mode == "high-throughput"  # still switching, and the callbacks did not wait for it
    finally:
        release.set()
        handle.stop()
    assert handle.transitions and handle.transitions[0].to_mode == "low-latency"


# ----------------------------------------------------------------------------- switchers


EXECUTOR = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"


class JavaField:
    def __init__(self, value, refuse=False, drift=0, kind="long", final_refused=False):
        self.value, self.refuse, self.drift, self.kind = value, refuse, drift, kind
        self.final_refused = final_refused  # a JVM that enforces JEP 500: writes to final fields refused

    def setAccessible(self, flag):
        if self.refuse:
            raise RuntimeError("java.lang.reflect.InaccessibleObjectException: module does not open")

    def getType(self):
        return SimpleNamespace(getName=lambda: self.kind)

    def getLong(self, obj):
        return self.value

    def setLong(self, obj, value):
        if self.final_refused:
            raise RuntimeError("java.lang.IllegalAccessException: Can not set final long field "
                               "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor.intervalMs")
        self.value = value + self.drift


class JavaClass:
    def __init__(self, name, field=None):
        self.name, self.field = name, field

    def getName(self):
        return self.name

    def getDeclaredField(self, name):
        if self.field is None or name != "intervalMs":
            raise RuntimeError(f"java.lang.NoSuchFieldException: {name}")
        return self.field


class JavaStreamExecution:
    """``query._jsq.streamingQuery()``: its class (whose loader knows ``loadable`` classes)
    and ``triggerExecutor()``, which answers from ``executors`` (None: not created yet)."""

    def __init__(self, field, *, loadable=(EXECUTOR,), running=EXECUTOR, executors=None, active=True):
        self.field, self.loadable, self.active = field, loadable, active
        executor = SimpleNamespace(getClass=lambda: JavaClass(running, field))
        self.executors = list(executors) if executors is not None else [executor]
        self.executor = executor
        self.asked = 0

    def getClass(self):
        def load(name):
            if name not in self.loadable:
                raise RuntimeError(f"java.lang.ClassNotFoundException: {name}")
            return JavaClass(name, self.field)

        return SimpleNamespace(
            getName=lambda: "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
            getPackage=lambda: SimpleNamespace(getName=lambda: "org.apache.spark.sql.execution.streaming.runtime"),
            getClassLoader=lambda: SimpleNamespace(loadClass=load))

    def triggerExecutor(self):
        self.asked += 1
        answer = self.executors.pop(0) if len(self.executors) > 1 else self.executors[0]
        return None if answer is None else self.executor

    def isActive(self):
        return self.active


def java_query(execution):
    return SimpleNamespace(_jsq=SimpleNamespace(streamingQuery=lambda: execution))


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_in_place_is_prepared_without_the_running_executor_then_attached_and_reads_its_writes_back():
    field = JavaField(0)
    execution = JavaStreamExecution(field, executors=[None, None, "ready"])
    switcher, why = SwitchPolicy().choose(java_query(execution), lambda: pytest.fail("no restart"))
    assert isinstance(switcher, InPlaceSwitcher) and "intervalMs is reachable" in why
    assert execution.asked == 0  # start() does not wait for the query's plan
    with pytest.raises(ModeSwitchError, match="not attached"):
        switcher.switch(1000)
    clock = Clock()
    assert switcher.attach(0, clock=clock, sleep=clock.sleep) is True
    assert execution.asked == 3 and clock.slept == [0.01, 0.01]  # waited for the stream thread to create it
    switcher.switch(1000)
    assert field.value == 1000


@pytest.mark.parametrize("execution, reason", [
    (lambda: JavaStreamExecution(JavaField(0), loadable=()),
     "no ProcessingTimeExecutor class beside .*MicroBatchExecution: java.lang.ClassNotFoundException"),
    (lambda: JavaStreamExecution(None), "intervalMs is not reachable: java.lang.NoSuchFieldException"),
    (lambda: JavaStreamExecution(JavaField(0, refuse=True)),
     "not reachable: java.lang.reflect.InaccessibleObjectException"),
    (lambda: JavaStreamExecution(JavaField(0, kind="int")), "intervalMs is a int, not a long"),
])
def test_where_in_place_is_impossible_at_start_the_restart_method_is_chosen_and_says_why(execution, reason):
    with pytest.raises(ModeSwitchError, match=reason):
        InPlaceSwitcher.prepare(java_query(execution()))
    restart = RestartSwitcher(java_query(execution()), start=lambda ms: None)
    switcher, why = SwitchPolicy().choose(java_query(execution()), lambda: restart)
    assert switcher is restart and why.startswith("in place is impossible: ")
    # Unless a restart is not allowed: then starting fails, saying why.
    for refusing in (SwitchPolicy(restart_refused="the memory sink cannot restart"),
                     SwitchPolicy(asked=AskedMethod.IN_PLACE)):
        with pytest.raises(ConfigError, match=f"in place is impossible on this Spark runtime \\(.*{reason}"):
            refusing.choose(java_query(execution()), lambda: restart)


@pytest.mark.parametrize("execution, reason", [
    (lambda: JavaStreamExecution(JavaField(0), running="org.apache.spark.sql.execution.streaming.runtime.MultiBatchExecutor"),
     "the trigger executor is a .*MultiBatchExecutor, not a ProcessingTimeExecutor"),
    (lambda: JavaStreamExecution(JavaField(250)), "holds 250 ms, not the trigger's 0 ms"),
    (lambda: JavaStreamExecution(JavaField(0, drift=1)), "reads 1 ms after writing 0 ms"),
    (lambda: JavaStreamExecution(JavaField(0), executors=[None]), "did not appear within 30 s"),
    (lambda: JavaStreamExecution(JavaField(0, final_refused=True)),
     "IllegalAccessException: Can not set final long field .*; the JVM refuses to change a final field "
     "\\(JEP 500\\); to keep switching in place, start the driver JVM with --enable-final-field-mutation=ALL-UNNAMED"),
])
def test_the_running_executor_is_checked_when_attaching(execution, reason):
    clock = Clock()
    switcher = InPlaceSwitcher.prepare(java_query(execution()))
    with pytest.raises(ModeSwitchError, match=reason):
        switcher.attach(0, clock=clock, sleep=clock.sleep)


def test_attaching_gives_up_quietly_when_the_query_ends_or_the_handle_stops_first():
    ended = JavaStreamExecution(JavaField(0), executors=[None], active=False)
    assert InPlaceSwitcher.prepare(java_query(ended)).attach(0) is False
    clock = Clock()
    waiting = JavaStreamExecution(JavaField(0), executors=[None])
    assert InPlaceSwitcher.prepare(java_query(waiting)).attach(0, cancelled=lambda: clock.now > 1, clock=clock,
                                                               sleep=clock.sleep) is False


def test_spark_connect_and_a_forced_restart_choose_the_restart_method():
    restart = RestartSwitcher(SimpleNamespace(), start=lambda ms: None)
    connect_query = SimpleNamespace(id="q")  # no _jsq: a Spark Connect client's query
    assert SwitchPolicy(connect=True).choose(connect_query, lambda: restart) == (
        restart, "a Spark Connect query has no JVM objects in this process to change in place")
    forced = SwitchPolicy(asked=AskedMethod.RESTART)
    assert forced.choose(java_query(JavaStreamExecution(JavaField(0))), lambda: restart) == (
        restart, "the restart method was asked for")


class RefusedAttach(FakeInPlaceSwitcher):
    """An in-place switcher whose running executor fails the checks."""

    def attach(self, interval_ms, *, cancelled=lambda: False):
        raise ModeSwitchError("the trigger executor is a x.Other, not a ProcessingTimeExecutor")


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


def writer_info(sink_format=None, output_mode=None, connect=False):
    return WriterInfo("/checkpoint", sink_format, output_mode, connect=connect)


@pytest.mark.parametrize("switch_method, writer, error", [
    ("sometimes", writer_info(), "switch_method must be one of auto, in-place, restart, got 'sometimes'"),
    ("in-place", writer_info(connect=True), "switch_method='in-place' is impossible under Spark Connect"),
    ("restart", writer_info(sink_format="memory"), "the memory sink cannot restart from its checkpoint"),
    ("auto", writer_info(connect=True, sink_format="memory"), "switches under Spark Connect restart the query"),
])
def test_the_policy_refuses_what_cannot_work_saying_what_to_change(switch_method, writer, error):
    with pytest.raises(ConfigError, match=error):
        SwitchPolicy.decide(switch_method, writer)


def test_the_policy_remembers_what_forbids_a_fallback_to_restarts():
    assert SwitchPolicy.decide("auto", writer_info()).why_no_restart is None
    assert "memory sink" in SwitchPolicy.decide("auto", writer_info(sink_format="memory")).why_no_restart
    assert SwitchPolicy.decide("auto", writer_info(sink_format="memory", output_mode="complete")).why_no_restart is None
    assert "'in-place' was asked for" in SwitchPolicy.decide("in-place", writer_info()).why_no_restart


class BackToBackQuery:
    """A query whose trigger is never seen idle (a ``0 seconds`` interval) and whose batch
    ``7`` commits after ``commits_after`` status checks."""

    def __init__(self, commits_after: int | None):
        self.commits_after = commits_after
        self.checks = 0
        self.stopped = False

    @property
    def status(self):
        self.checks += 1
        return {"isTriggerActive": True}

    @property
    def lastProgress(self):
        committed = self.commits_after is not None and self.checks > self.commits_after
        return {"batchId": 8 if committed else 7}

    def stop(self):
        self.stopped = True


@pytest.mark.parametrize("commits_after, waited_s", [(3, 0.03), (None, 5.0)])
def test_a_restart_under_back_to_back_batches_stops_once_the_running_batch_commits(commits_after, waited_s):
    clock = FakeClock(0.0)
    query = BackToBackQuery(commits_after)
    started = []
    switcher = RestartSwitcher(query, start=lambda ms: started.append(ms) or "new run", settle_timeout_s=5.0,
                               clock=clock, sleep=clock.advance)
    assert switcher.switch(1000) == "new run" and query.stopped and started == [1000]
    # Stopped when batch 7 committed, not after the whole settle timeout; without a commit,
    # the timeout still bounds the wait.
    assert clock.now == pytest.approx(waited_s, abs=0.011)  # one 10 ms check of float drift


def test_a_jvm_refusing_the_final_field_write_falls_back_to_restarts_naming_the_flag(caplog):
    """JEP 500: a JDK that refuses writes to final fields makes attach fail; under "auto"
    the policy falls back to restarts with a log line that says how to keep in place."""
    switcher = InPlaceSwitcher.prepare(java_query(JavaStreamExecution(JavaField(0, final_refused=True))))
    restart = RestartSwitcher(SimpleNamespace(), start=lambda ms: None)
    with pytest.raises(ModeSwitchError) as refused:
        switcher.attach(0)
    assert SwitchPolicy().fall_back(refused.value, lambda: restart) is restart
    assert "mode switches are by restart after all" in caplog.text
    assert "--enable-final-field-mutation=ALL-UNNAMED" in caplog.text
