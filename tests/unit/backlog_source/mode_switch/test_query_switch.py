"""One query's switch, as a handle and an installation both use it: decide, apply, span,
observers, once per switch; with fake switchers and a fake clock."""

from __future__ import annotations

import pytest

from backlog_source.core.errors import ConfigError
from backlog_source.core.tracing import exporter
from backlog_source.mode_switch.listener import BatchCommitted, Mode, TriggerIdle
from backlog_source.mode_switch.query_switch import QuerySwitch, SwitchObserver, mode_intervals
from backlog_source.mode_switch.switchers import Switched, SwitchMethod
from tests.fakes import FakeClock, FakeInPlaceSwitcher, FakeQuery, FakeSpark

INTERVALS = {Mode.HIGH_THROUGHPUT: 0, Mode.LOW_LATENCY: 1_000}


class Told(SwitchObserver):
    """Records what a switch tells its observers."""

    def __init__(self):
        self.calls = []

    def adopted(self, switch):
        self.calls.append(("adopted", switch.mode))

    def switched(self, switch, transition, replaced_run):
        self.calls.append(("switched", transition and transition.to_mode, replaced_run, switch.run_id))

    def took_effect(self, switch, transition):
        self.calls.append(("took_effect", transition.effective_seconds))


class RestartingSwitcher:
    """A restart-method switcher: each switch stops the run and starts a new one, in the mode
    given by ``lands_in`` (default: the one asked for)."""

    method = SwitchMethod.RESTART

    def __init__(self, query, lands_in=None):
        self.query = query
        self.lands_in = lands_in

    def switch(self, to):
        self.query.stopped = True
        self.query = FakeQuery(self.query.spark, 0, self.query.name)
        return Switched(self.query, self.lands_in or to)


def made(switcher=None, *, interval_ms=None):
    clock, told, query = FakeClock(100.0), Told(), FakeQuery(FakeSpark(), 0, name="orders")
    switcher = switcher(query) if switcher else FakeInPlaceSwitcher(query, INTERVALS)
    switch = QuerySwitch(query, query.id, query.runId, INTERVALS, Mode.HIGH_THROUGHPUT, switcher,
                         interval_ms=interval_ms, query_name=query.name, clock=clock, observers=(told,))
    return switch, told, clock, query


def batch(switch, batch_id, backlog, started_ms=0, run_id=None):
    return BatchCommitted(switch.query_id, run_id or switch.run_id, batch_id, backlog, started_ms)


def test_a_switch_is_decided_applied_and_told_once_and_takes_effect_at_the_next_trigger():
    switch, told, clock, query = made()
    switch.announce()
    assert switch.committed(batch(switch, 0, True)) is None  # the mode it is in: nothing to do
    transition = switch.committed(batch(switch, 1, False))
    assert (transition.from_mode, transition.to_mode, transition.batch_id, transition.method) == (
        Mode.HIGH_THROUGHPUT, Mode.LOW_LATENCY, 1, SwitchMethod.IN_PLACE)
    assert switch.mode is Mode.LOW_LATENCY and query.interval_ms == 1_000 and transition.restart_seconds == 0
    clock.advance(0.5)
    switch.idle(TriggerIdle(switch.query_id, switch.run_id, 100_500))  # the first trigger under the new interval
    assert told.calls == [("adopted", Mode.HIGH_THROUGHPUT), ("switched", Mode.LOW_LATENCY, None, query.runId),
                          ("took_effect", 0.5)]


def test_a_switch_is_not_made_while_not_allowed_but_its_trigger_still_counts():
    switch, told, _, _ = made()
    switch.committed(batch(switch, 0, False))
    switch.committed(batch(switch, 1, True, started_ms=200_000), may_switch=False)
    assert switch.mode is Mode.LOW_LATENCY and [c[0] for c in told.calls] == ["switched", "took_effect"]


def test_a_restart_follows_the_new_run_and_names_the_run_it_replaced():
    switch, told, _, first = made(RestartingSwitcher)
    transition = switch.committed(batch(switch, 0, False))
    assert transition.method is SwitchMethod.RESTART and transition.restart_seconds == transition.apply_seconds
    assert switch.run_id != first.runId and switch.query is not first and first.stopped
    assert told.calls == [("switched", Mode.LOW_LATENCY, first.runId, switch.run_id)]
    assert not switch.follows(batch(switch, 1, True, run_id=first.runId))  # a late message of the replaced run
    assert switch.follows(batch(switch, 1, True))


def test_a_restart_that_lands_in_the_mode_it_was_in_follows_the_new_run_without_a_transition():
    switch, told, _, first = made(lambda query: RestartingSwitcher(query, lands_in=Mode.HIGH_THROUGHPUT))
    assert switch.committed(batch(switch, 0, False)) is None
    assert switch.mode is Mode.HIGH_THROUGHPUT and switch.run_id != first.runId
    assert told.calls == [("switched", None, first.runId, switch.run_id)]


def test_the_span_names_the_run_that_runs_under_the_new_interval_and_the_interval_held_before(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    switch, _, _, first = made(RestartingSwitcher, interval_ms=5_000)  # adopted holding an interval of its own
    switch.committed(batch(switch, 0, False))
    switch.end()
    exporter.flush()
    [span] = receiver.wait_for(lambda spans: len(spans) == 1, timeout=30)
    attributes = span["attributes"]
    assert attributes["spark.query.run_id"] == switch.run_id != first.runId
    assert attributes["backlog.trigger.from_interval_seconds"] == 5.0
    assert attributes["backlog.restart_seconds"] == attributes["backlog.mode_switch.apply_seconds"]
    assert attributes["backlog.mode_switch.ended_by"] == "stop"


def test_the_intervals_are_parsed_once_with_a_unit_and_named_in_errors():
    assert mode_intervals("0 seconds", "250ms") == {Mode.HIGH_THROUGHPUT: 0, Mode.LOW_LATENCY: 250}
    with pytest.raises(ConfigError, match="high_throughput_interval must be a duration"):
        mode_intervals("5", "1 second")  # a bare number: trigger(processingTime=...) needs a unit
