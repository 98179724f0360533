"""install(): every backlog query of a session switches with its backlog, with fakes."""

import logging
import threading
from types import SimpleNamespace

import pytest
from pyspark.sql.connect.streaming.query import StreamingQueryListenerBus
from pyspark.sql.streaming.listener import QueryStartedEvent

from backlog_source.core.errors import ConfigError, ModeSwitchError
from backlog_source.mode_switch import connect_starts
from backlog_source.mode_switch.connect_starts import ConnectStarts
from backlog_source.mode_switch.install import SessionModeSwitch, install
from backlog_source.mode_switch.listener import BatchCommitted, Mode, QueryTerminated
from backlog_source.mode_switch.query_switch import SwitchObserver
from backlog_source.mode_switch.session_listener import SessionListener
from tests.fakes import FakeInPlaceSwitcher, FakeQuery, FakeSpark

INTERVALS = {Mode.HIGH_THROUGHPUT: 0, Mode.LOW_LATENCY: 1_000}


def installed(spark):
    routes = SessionListener()
    switch = SessionModeSwitch(spark, INTERVALS, session_listener=routes,
                               switcher_of=lambda query, intervals: FakeInPlaceSwitcher(query, intervals))
    return switch, routes


def query(spark, query_id, interval_ms):
    q = FakeQuery(spark, interval_ms)
    q.id = query_id
    spark.queries[query_id] = q
    return q


def committed(q, batch_id, backlog):
    return BatchCommitted(q.id, q.runId, batch_id, backlog, 0)


def test_a_backlog_query_started_with_its_own_trigger_is_adopted_and_switches_with_its_backlog():
    spark = FakeSpark()
    switch, _ = installed(spark)
    q = query(spark, "orders", 5_000)
    switch.handle(committed(q, 0, True))  # adopted; its 5 s is none of ours: high-throughput at once
    assert q.interval_ms == 0 and switch.adopted["orders"].mode is Mode.HIGH_THROUGHPUT
    assert switch.adopted["orders"].started_interval_ms == 5_000
    switch.handle(committed(q, 1, True))
    switch.handle(committed(q, 2, False))
    assert q.interval_ms == 1_000 and switch.adopted["orders"].mode is Mode.LOW_LATENCY
    switch.handle(committed(q, 3, True))  # a burst: back to high throughput
    assert q.interval_ms == 0


def test_a_query_on_its_own_interval_is_never_reported_in_a_mode_before_its_first_switch_is_made():
    """Adopting a query whose interval is none of ours starts it in the other mode than the
    batch calls for, so that the batch switches it; read while that switch is being made,
    ``adopted`` named that placeholder (low latency, the user's 3 s still running) on a loaded
    machine. It lists the query once the switch is made."""
    spark = FakeSpark()
    seen_during_switch, told = [], []

    class Watching(FakeInPlaceSwitcher):
        def switch(self, to):
            seen_during_switch.append(dict(installation.adopted))
            return super().switch(to)

    class Observer(SwitchObserver):  # as the session metrics' mode gauge is told
        def adopted(self, switch):
            told.append(("adopted", switch.mode))

        def switched(self, switch, transition, replaced_run):
            told.append(("switched", switch.mode))

    installation = SessionModeSwitch(spark, INTERVALS, session_listener=SessionListener(),
                                     switcher_of=lambda q, intervals: Watching(q, intervals), observers=[Observer()])
    q = query(spark, "orders", 3_000)
    installation.handle(committed(q, 0, True))
    assert seen_during_switch == [{}]
    assert installation.adopted["orders"].mode is Mode.HIGH_THROUGHPUT and q.interval_ms == 0
    assert told == [("switched", Mode.HIGH_THROUGHPUT), ("adopted", Mode.HIGH_THROUGHPUT)]


def test_several_queries_switch_independently_and_a_query_a_handle_follows_is_left_to_it():
    spark = FakeSpark()
    switch, routes = installed(spark)
    a, b, handled = query(spark, "a", 1_000), query(spark, "b", 1_000), query(spark, "h", 1_000)

    class Handle:
        def receive(self, message):
            pass

    routes.attach(spark, Handle()).follow("h")
    switch.handle(committed(a, 0, True))
    switch.handle(committed(b, 0, False))
    switch.handle(committed(handled, 0, True))
    assert (a.interval_ms, b.interval_ms, handled.interval_ms) == (0, 1_000, 1_000)
    assert set(switch.adopted) == {"a", "b"}


def test_a_query_that_cannot_switch_in_place_keeps_its_trigger_with_one_warning_until_a_new_run(caplog):
    spark = FakeSpark()
    switch, _ = installed(spark)
    q = query(spark, "once", 1_000)
    q.in_place_refused = "the trigger executor is a MultiBatchExecutor, not a ProcessingTimeExecutor"
    with caplog.at_level(logging.WARNING):
        switch.handle(committed(q, 0, True))
        switch.handle(committed(q, 1, True))
    assert caplog.text.count("keeps its trigger") == 1 and "start_backlog_aware" in caplog.text
    assert q.interval_ms == 1_000 and "once" not in switch.adopted
    # The user restarts it with a processing-time trigger: the new run is adopted.
    switch.handle(QueryTerminated(q.id, q.runId, None))
    q.runId, q.in_place_refused = "run-new", None
    switch.handle(committed(q, 2, True))
    assert q.interval_ms == 0


def test_a_query_restarted_by_the_user_is_adopted_again_in_its_new_run():
    spark = FakeSpark()
    switch, _ = installed(spark)
    q = query(spark, "orders", 1_000)
    switch.handle(committed(q, 0, False))
    assert switch.adopted["orders"].mode is Mode.LOW_LATENCY
    switch.handle(QueryTerminated(q.id, q.runId, None))
    assert "orders" not in switch.adopted
    restarted = query(spark, "orders", 2_000)  # same id (its checkpoint), new run, new trigger
    switch.handle(committed(restarted, 5, True))
    assert restarted.interval_ms == 0 and switch.adopted["orders"].run_id == restarted.runId


def test_install_registers_once_and_uninstall_leaves_the_listener_registered_and_queries_as_they_run():
    spark = FakeSpark()
    first = install(spark, "0 seconds", "2 seconds")
    second = install(spark, "0 seconds", "2 seconds")
    assert len(spark.listeners) == 1  # one listener for the session, whatever installs it
    first.uninstall()
    second.uninstall()
    assert len(spark.listeners) == 1


def test_intervals_must_be_durations():
    with pytest.raises(ConfigError, match="low_latency_interval must be a duration"):
        install(FakeSpark(), "0 seconds", "soon")


def test_the_session_metrics_hear_each_adopted_mode_and_switch():
    class Metrics(SwitchObserver):
        def __init__(self):
            self.calls = []

        def adopted(self, switch):
            self.calls.append(("adopted", switch.query_id, switch.mode))

        def switched(self, switch, transition, replaced_run):
            self.calls.append(("switched", switch.query_id, transition.to_mode))

    spark, metrics = FakeSpark(), Metrics()
    switch = SessionModeSwitch(spark, INTERVALS, session_listener=SessionListener(), observers=(metrics,),
                               switcher_of=lambda query, intervals: FakeInPlaceSwitcher(query, intervals))
    q = query(spark, "orders", 0)  # already at the high-throughput interval
    switch.handle(committed(q, 0, True))
    switch.handle(committed(q, 1, False))
    assert metrics.calls == [("adopted", "orders", Mode.HIGH_THROUGHPUT), ("switched", "orders", Mode.LOW_LATENCY)]


def test_a_query_whose_source_sets_its_own_intervals_switches_between_those():
    from backlog_source.enumerator.state import SourceOffset, TriggerIntervals

    spark = FakeSpark()
    switch, _ = installed(spark)
    own, plain = query(spark, "own", 0), query(spark, "plain", 0)

    def batch(q, batch_id, backlog):
        end = SourceOffset("s", {}, intervals=TriggerIntervals(None, 5_000))
        return BatchCommitted(q.id, q.runId, batch_id, backlog, 0, ends=(end,))

    switch.handle(batch(own, 0, True))
    switch.handle(batch(own, 1, False))
    switch.handle(committed(plain, 0, True))
    switch.handle(committed(plain, 1, False))
    assert own.interval_ms == 5_000 and plain.interval_ms == 1_000
    assert switch.adopted["own"].intervals_ms == {Mode.HIGH_THROUGHPUT: 0, Mode.LOW_LATENCY: 5_000}


def test_each_switch_is_a_mode_switch_span_ended_by_the_first_trigger_under_the_new_interval(otel_env, receiver):
    from backlog_source.core.tracing import exporter

    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    spark, now = FakeSpark(), [100.0]
    switch = SessionModeSwitch(spark, INTERVALS, session_listener=SessionListener(), clock=lambda: now[0],
                               switcher_of=lambda query, intervals: FakeInPlaceSwitcher(query, intervals))
    q = query(spark, "orders", 0)
    switch.handle(committed(q, 0, True))  # adopted in high-throughput
    switch.handle(BatchCommitted(q.id, q.runId, 1, False, 99_000))  # switch decided and applied at 100 s
    now[0] = 101.0
    switch.handle(BatchCommitted(q.id, q.runId, 2, False, 100_500))  # its trigger started after: ends the span
    exporter.flush()
    [span] = receiver.wait_for(lambda spans: len(spans) == 1, timeout=30)
    assert span["name"] == "backlog.mode_switch"
    attributes = span["attributes"]
    assert (attributes["backlog.mode.from"], attributes["backlog.mode.to"]) == ("high-throughput", "low-latency")
    assert (attributes["backlog.mode_switch.method"], attributes["backlog.mode_switch.ended_by"]) == ("in-place", "batch")
    assert (attributes["backlog.trigger.from_interval_seconds"], attributes["backlog.trigger.to_interval_seconds"]) == (0, 1)
    assert (span["start_ns"], span["end_ns"]) == (100 * 10**9, int(100.5 * 10**9))


#: Bounds every wait of these tests (none is expected to take more than moments).
WAIT_S = 30.0


class ConnectRun(FakeQuery):
    """A run of a query started through Spark Connect while ``install(..., allow_restart=True)``
    wraps Connect's ``StreamingQuery.stop``: its ``stop()`` is that wrapper around Spark's
    (``spark_stops`` counts the stops that reached Spark). A test may set ``on_status``,
    ``on_active_check`` (each run once, right after the next ``status`` or ``isActive`` read)
    and ``on_spark_stop`` (run once, when the next stop reaches Spark)."""

    def __init__(self, spark, interval_ms):
        super().__init__(spark, interval_ms)
        self._session = spark
        self.spark_stops = 0
        self.on_status = self.on_active_check = self.on_spark_stop = None

    @property
    def status(self):
        status = super().status
        hook, self.on_status = self.on_status, None
        if hook is not None:
            hook()
        return status

    @property
    def isActive(self):
        active = super().isActive
        hook, self.on_active_check = self.on_active_check, None
        if hook is not None:
            hook()
        return active

    def _spark_stop(self):
        FakeQuery.stop(self)
        self.spark_stops += 1
        hook, self.on_spark_stop = self.on_spark_stop, None
        if hook is not None:
            hook()

    stop = connect_starts._stopping(_spark_stop)


class RecordedStarts(ConnectStarts):
    """The real :class:`~backlog_source.mode_switch.connect_starts.ConnectStarts` (lineages,
    the user's stops, the switch's swap) over fake writers: the queries whose starts it
    recorded, their trigger (None: not a processing-time one), and a start that makes a new
    :class:`ConnectRun` under the same id. ``runs`` holds every run started; a test may set
    ``before_start`` (run between the old run's stop and the new run's start) and
    ``after_start(run)`` (the new run started, its start not returned yet)."""

    def __init__(self, spark, **options):
        super().__init__(spark, keep=lambda writer: writer, **options)
        self.spark, self.intervals, self.ended, self.runs = spark, {}, False, []
        self.before_start = lambda: None
        self.after_start = lambda run: None

    def user_started(self, query_id, interval_ms):
        """The user's ``writer.start()`` of ``query_id``, recorded: a new lineage."""
        run = self._run(query_id, interval_ms)
        self.record(SimpleNamespace(_session=self.spark), run)
        return run

    def knows(self, query_id):
        return query_id in self.intervals

    def interval_ms(self, query_id):
        return self.intervals[query_id]

    def starter(self, query_id):
        def start(interval_ms):
            self.before_start()
            run = self._run(query_id, interval_ms)
            self.record(SimpleNamespace(_session=self.spark), run)  # the wrapper sees every start; this is the switch's
            self.after_start(run)
            return run
        return start

    def end(self):
        self.ended = True
        super().end()

    def active(self):
        return [run for run in self.runs if run.isActive]

    def _run(self, query_id, interval_ms):
        run = ConnectRun(self.spark, interval_ms)
        run.id = query_id
        self.spark.queries[query_id] = run
        self.intervals[query_id] = interval_ms
        self.runs.append(run)
        return run


@pytest.fixture(autouse=True)
def no_wrappers_left():
    """Each test's installations end, and Connect's classes get their own methods back."""
    yield
    for recorder in connect_starts._recorders_now():
        recorder.end()


def user_get(spark):
    """``spark.streams.get`` of a Connect session, wrapped by ``install``: Spark returns the
    query's active run, or None."""
    def spark_get(manager, query_id):
        found = spark.queries.get(query_id)
        return found if found is not None and found.isActive else None

    wrapped, manager = connect_starts._getting(spark_get), SimpleNamespace(_session=spark)
    return lambda query_id: wrapped(manager, query_id)


class Logged(logging.Handler):
    """The records of one logger that a test waits for (the log line a wait writes before
    it waits: the only sign, from outside, that another thread waits)."""

    def __init__(self, logger):
        super().__init__(logging.DEBUG)
        self.logger, self.messages, self.arrived = logger, [], threading.Condition()

    def __enter__(self):
        self.logger.addHandler(self)
        self.level_before = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)

    def emit(self, record):
        with self.arrived:
            self.messages.append(record.getMessage())
            self.arrived.notify_all()

    def wait_for(self, text):
        with self.arrived:
            return self.arrived.wait_for(lambda: any(text in m for m in self.messages), WAIT_S)


class Thread(threading.Thread):
    """A daemon thread that keeps what its target returned or raised."""

    def __init__(self, target):
        super().__init__(target=self._call, args=(target,), daemon=True)
        self.result = self.error = None

    def _call(self, target):
        try:
            self.result = target()
        except BaseException as exc:
            self.error = exc

    def ended(self):
        self.join(WAIT_S)
        return not self.is_alive()


def connect_installed(spark, session_listener=None, **options):
    """An installation as under Spark Connect: in place always refused, restarts allowed."""
    def no_jvm(query, intervals):
        raise AttributeError("'StreamingQuery' object has no attribute '_jsq'")

    restarts = RecordedStarts(spark, **options).begin()
    return SessionModeSwitch(spark, INTERVALS, session_listener=session_listener or SessionListener(),
                             switcher_of=no_jvm, restarts=restarts), restarts


def test_under_connect_a_recorded_query_switches_by_restart_into_a_new_run_under_the_same_id():
    spark = FakeSpark()
    switch, restarts = connect_installed(spark)
    first = restarts.user_started("orders", 0)
    switch.handle(committed(first, 0, True))
    assert switch.adopted["orders"].method.value == "restart" and switch.adopted["orders"].mode is Mode.HIGH_THROUGHPUT
    switch.handle(committed(first, 1, False))
    second = spark.queries["orders"]
    assert first.stopped and second is not first and second.interval_ms == 1_000
    assert switch.adopted["orders"].run_id == second.runId and switch.adopted["orders"].mode is Mode.LOW_LATENCY
    # The stopped run's termination and a late event of it change nothing.
    switch.handle(QueryTerminated(first.id, first.runId, None))
    switch.handle(committed(first, 1, False))
    assert switch.adopted["orders"].run_id == second.runId
    switch.handle(committed(second, 2, True))  # a burst: restarted again, at the high-throughput interval
    third = spark.queries["orders"]
    assert second.stopped and third.interval_ms == 0 and switch.adopted["orders"].run_id == third.runId
    switch.handle(QueryTerminated(third.id, third.runId, None))  # the user stops it: forgotten
    assert "orders" not in switch.adopted
    switch.uninstall()
    assert restarts.ended


def test_under_connect_a_query_not_recorded_or_not_on_a_processing_time_trigger_keeps_its_trigger(caplog):
    spark = FakeSpark()
    switch, restarts = connect_installed(spark)
    before, once = query(spark, "before", 1_000), query(spark, "once", 1_000)
    restarts.intervals["once"] = None  # started with trigger(availableNow=True)
    with caplog.at_level(logging.WARNING):
        switch.handle(committed(before, 0, True))
        switch.handle(committed(once, 0, True))
    assert not before.stopped and not once.stopped and switch.adopted == {}
    assert "started before install()" in switch.skipped[before.runId]
    assert "not a processing-time one" in switch.skipped[once.runId]


def test_without_restarts_the_warning_says_how_to_allow_them(caplog):
    spark = FakeSpark()
    switch = SessionModeSwitch(spark, INTERVALS, session_listener=SessionListener(),
                               switcher_of=lambda q, i: (_ for _ in ()).throw(AttributeError("no _jsq")))
    q = query(spark, "orders", 1_000)
    switch.handle(committed(q, 0, True))
    assert "allow_restart=True" in switch.skipped[q.runId]


# -- a user's stop wins over a restart-method switch in flight -------------------------------
#
# Each race is played in a fixed order: a hook of the fake query or start runs the user's
# call at one point of the switch; where the user's call must wait for the switch, it runs
# on a thread of its own and the switch goes on once the call has shown it waits.


def adopted_in_high_throughput(**options):
    spark = FakeSpark()
    switch, restarts = connect_installed(spark, **options)
    first = restarts.user_started("orders", 0)
    switch.handle(committed(first, 0, True))
    assert switch.adopted["orders"].method.value == "restart"
    return spark, switch, restarts, first


def test_a_user_stop_right_after_the_switch_saw_the_query_active_stops_it_and_nothing_starts():
    spark, switch, restarts, first = adopted_in_high_throughput()
    first.on_active_check = first.stop  # the user's stop, right after the switch's check
    switch.handle(committed(first, 1, False))
    assert restarts.runs == [first] and restarts.active() == []
    assert first.spark_stops == 1  # the user's; the switch stopped nothing
    assert user_get(spark)("orders") is None


def test_a_user_stop_between_the_old_runs_stop_and_the_new_start_waits_and_nothing_starts():
    spark, switch, restarts, first = adopted_in_high_throughput()
    user = Thread(first.stop)
    with Logged(connect_starts.log) as logged:
        def users_stop_meanwhile():  # the switch's stop of the old run has reached Spark
            user.start()
            assert logged.wait_for("stop(): query orders waits")

        first.on_spark_stop = users_stop_meanwhile
        switch.handle(committed(first, 1, False))
    assert user.ended() and user.error is None
    assert restarts.runs == [first] and restarts.active() == []


def test_a_user_stop_of_the_run_get_returned_during_the_new_start_stops_that_run_before_it_returns():
    spark, switch, restarts, first = adopted_in_high_throughput()
    got = []
    user = Thread(lambda: got.append(user_get(spark)("orders")) or got[0].stop())
    with Logged(connect_starts.log) as logged:
        def users_stop_meanwhile(new):  # Spark runs the new run; its start has not returned
            user.start()
            assert logged.wait_for("stop(): query orders waits")

        restarts.after_start = users_stop_meanwhile
        switch.handle(committed(first, 1, False))
    assert user.ended() and user.error is None
    assert got == [restarts.runs[1]] and restarts.runs[1].spark_stops >= 1
    assert restarts.active() == []
    restarts.after_start = lambda run: pytest.fail("a run its user stopped was started again")
    switch.handle(committed(first, 2, True))


def test_spark_streams_get_between_the_two_runs_waits_for_the_new_one_instead_of_returning_none():
    spark, switch, restarts, first = adopted_in_high_throughput()
    user = Thread(lambda: user_get(spark)("orders"))
    with Logged(connect_starts.log) as logged:
        def users_get_meanwhile():
            user.start()
            assert logged.wait_for("spark.streams.get(): query orders waits")

        restarts.before_start = users_get_meanwhile
        switch.handle(committed(first, 1, False))
    assert user.ended() and user.result is restarts.runs[1] and restarts.runs[1].isActive


def test_a_stop_of_the_object_start_returned_after_a_switch_stops_the_running_run():
    spark, switch, restarts, first = adopted_in_high_throughput()
    switch.handle(committed(first, 1, False))
    second = restarts.runs[1]
    assert second.isActive and switch.adopted["orders"].run_id == second.runId
    first.stop()  # the object the user's start() returned names the stopped run
    assert restarts.active() == []


def test_a_query_its_user_stopped_and_started_again_is_switched_again():
    spark, switch, restarts, first = adopted_in_high_throughput()
    first.stop()
    switch.handle(QueryTerminated(first.id, first.runId, None))
    again = restarts.user_started("orders", 0)  # the same checkpoint: the same id, a new lineage
    switch.handle(committed(again, 5, True))
    switch.handle(committed(again, 6, False))
    assert restarts.runs[-1].isActive and restarts.runs[-1].interval_ms == 1_000 and not again.isActive


def test_a_stop_inside_a_listener_callback_does_not_wait_for_the_switch_which_stops_its_new_run():
    """Connect delivers events holding its bus lock, which a start takes to post its
    QueryStartedEvent: a stop that waited there for the switch's start would wait forever."""
    spark, switch, restarts, first = adopted_in_high_throughput(stop_wait_s=2.0)
    between, go_on, failures = threading.Event(), threading.Event(), []
    restarts.before_start = lambda: between.set() or go_on.wait(WAIT_S)
    switcher = Thread(lambda: switch.handle(committed(first, 1, False)))
    switcher.start()
    assert between.wait(WAIT_S)

    class StopsOnEvent:
        def onQueryStarted(self, event):
            try:
                first.stop()
            except Exception as exc:  # post_to_all would only warn
                failures.append(exc)

    bus = StreamingQueryListenerBus(SimpleNamespace())  # Spark's own post_to_all, holding its lock
    bus._listener_bus.append(StopsOnEvent())
    bus.post_to_all(QueryStartedEvent("other", "run", None, "2024-01-01T00:00:00.000Z", set()))
    go_on.set()
    assert switcher.ended() and switcher.error is None and failures == []
    assert restarts.active() == [] and len(restarts.runs) == 2  # started, then stopped by the switch


def test_a_user_stop_waits_for_the_switch_at_most_its_bound_and_the_switch_still_stops_its_new_run():
    spark, switch, restarts, first = adopted_in_high_throughput(stop_wait_s=0.05)
    between, go_on = threading.Event(), threading.Event()
    restarts.before_start = lambda: between.set() or go_on.wait(WAIT_S)  # a start that hangs
    switcher = Thread(lambda: switch.handle(committed(first, 1, False)))
    switcher.start()
    assert between.wait(WAIT_S)
    with pytest.raises(ModeSwitchError, match="between two runs of a restart-method switch"):
        first.stop()
    go_on.set()
    assert switcher.ended() and restarts.active() == []


def test_uninstall_while_a_switch_waits_for_the_running_trigger_gives_the_switch_up():
    spark, switch, restarts, first = adopted_in_high_throughput()
    first.trigger_active = True  # a batch runs: the switch waits for it
    first.on_status = switch.uninstall
    switch.handle(committed(first, 1, False))
    assert restarts.runs == [first] and first.spark_stops == 0 and first.isActive and restarts.ended


def test_uninstall_lets_a_switch_between_two_runs_finish_and_drops_the_switches_not_begun():
    spark, routes = FakeSpark(), SessionListener()
    switch, restarts = connect_installed(spark, session_listener=routes)
    a, b = restarts.user_started("a", 0), restarts.user_started("b", 0)
    between, go_on = threading.Event(), threading.Event()
    switch.start()
    switch.receive(committed(a, 0, True))
    switch.receive(committed(b, 0, True))
    restarts.before_start = lambda: between.set() or go_on.wait(WAIT_S)
    switch.receive(committed(a, 1, False))  # a's switch: held between its two runs
    switch.receive(committed(b, 1, False))  # b's: queued behind it
    assert between.wait(WAIT_S)
    user = Thread(switch.uninstall)
    user.start()
    assert switch._closing.wait(WAIT_S)
    go_on.set()
    assert user.ended() and user.error is None
    assert [run.id for run in restarts.runs] == ["a", "b", "a"]  # a's new run; b never restarted
    assert {run.id for run in restarts.active()} == {"a", "b"} and restarts.ended
