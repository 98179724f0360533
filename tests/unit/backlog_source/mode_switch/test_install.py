"""install(): every backlog query of a session switches with its backlog, with fakes."""

import logging

import pytest

from backlog_source.core.errors import ConfigError
from backlog_source.mode_switch.install import SessionModeSwitch, install
from backlog_source.mode_switch.listener import BatchCommitted, Mode, QueryTerminated
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
    class Metrics:
        def __init__(self):
            self.calls = []

        def adopted(self, query_id, mode):
            self.calls.append(("adopted", query_id, mode))

        def switched(self, query_id, mode, run_id=None):
            self.calls.append(("switched", query_id, mode))

    spark, metrics = FakeSpark(), Metrics()
    switch = SessionModeSwitch(spark, INTERVALS, session_listener=SessionListener(), metrics=metrics,
                               switcher_of=lambda query, intervals: FakeInPlaceSwitcher(query, intervals))
    q = query(spark, "orders", 0)  # already at the high-throughput interval
    switch.handle(committed(q, 0, True))
    switch.handle(committed(q, 1, False))
    assert metrics.calls == [("adopted", "orders", Mode.HIGH_THROUGHPUT), ("switched", "orders", Mode.LOW_LATENCY)]


def test_a_query_whose_source_sets_its_own_intervals_switches_between_those():
    from backlog_source.enumerator.state import SourceOffset, TriggerIntervals
    from backlog_source.metrics.state import SourceReport

    spark = FakeSpark()
    switch, _ = installed(spark)
    own, plain = query(spark, "own", 0), query(spark, "plain", 0)

    def batch(q, batch_id, backlog):
        end = SourceOffset("s", {}, intervals=TriggerIntervals(None, 5_000))
        return BatchCommitted(q.id, q.runId, batch_id, backlog, 0, sources=(SourceReport(end=end),))

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


class RecordedStarts:
    """What :class:`~backlog_source.mode_switch.connect_starts.ConnectStarts` gives an
    installation: the queries whose starts it recorded, their trigger (None: not a
    processing-time one), and a start that makes a new run under the same id."""

    def __init__(self, spark):
        self.spark, self.intervals, self.ended = spark, {}, False

    def knows(self, query_id):
        return query_id in self.intervals

    def interval_ms(self, query_id):
        return self.intervals[query_id]

    def starter(self, query_id):
        def start(interval_ms):
            self.intervals[query_id] = interval_ms
            return query(self.spark, query_id, interval_ms)
        return start

    def end(self):
        self.ended = True


def connect_installed(spark):
    """An installation as under Spark Connect: in place always refused, restarts allowed."""
    def no_jvm(query, intervals):
        raise AttributeError("'StreamingQuery' object has no attribute '_jsq'")

    restarts = RecordedStarts(spark)
    return SessionModeSwitch(spark, INTERVALS, session_listener=SessionListener(), switcher_of=no_jvm,
                             restarts=restarts), restarts


def test_under_connect_a_recorded_query_switches_by_restart_into_a_new_run_under_the_same_id():
    spark = FakeSpark()
    switch, restarts = connect_installed(spark)
    first = query(spark, "orders", 0)
    restarts.intervals["orders"] = 0
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
