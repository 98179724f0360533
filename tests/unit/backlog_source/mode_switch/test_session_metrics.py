"""The session's metrics as the listener and the mode switches feed them, with fakes: a
series keeps its attributes from its first export to its last. A named query's mode series
exist from its start, before any batch commits, and must carry the name from then on (a
metrics backend takes a series whose attributes changed for two series)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from backlog_source.metrics import names
from backlog_source.metrics.state import BacklogMetrics
from backlog_source.mode_switch.controller import ModeController
from backlog_source.mode_switch.install import SessionModeSwitch
from backlog_source.mode_switch.listener import BacklogModeListener, BatchCommitted, Mode, QueryTerminated
from backlog_source.mode_switch.session_listener import SessionListener
from backlog_source.mode_switch.query_switch import Transition
from backlog_source.mode_switch.session_metrics import SessionMetrics
from backlog_source.mode_switch.switchers import SwitchMethod
from tests.fakes import (
    ChosenPolicy,
    FakeClock,
    FakeInPlaceSwitcher,
    FakeQuery,
    FakeSpark,
    FakeWriter,
    RecordingReceiver,
    progress_event,
    source,
)

NAME = "orders-job"
INTERVALS = {Mode.HIGH_THROUGHPUT: 0, Mode.LOW_LATENCY: 1_000}


def session_metrics() -> SessionMetrics:
    """The session's metrics without an exporter: the tests read what an export would."""
    return SessionMetrics(BacklogMetrics(tuple(m.value for m in Mode)), export=None)


def exported(metrics: SessionMetrics) -> set[tuple[str, frozenset]]:
    """Every series an export would send now: (metric, attributes)."""
    return {(i.name, frozenset(attrs.items())) for i in names.ALL for _, attrs in metrics.metrics.observe(i)}


def committed(query, batch_id: int, processing_backlog: bool) -> BatchCommitted:
    """The listener's message for a progress event of the named ``query``; the fake query's
    ``lastProgress`` becomes that batch's, as in Spark."""
    event = progress_event(query.id, query.runId, batch_id, source(processing_backlog))
    event.progress.name = query.name
    event.progress.sources[0].latestOffset = json.dumps({"t": {"0": 5}})  # the fake source's topic
    event.progress.sources[0].numInputRows = 3
    query.lastProgress = {"batchId": batch_id, "sources": [{"endOffset": event.progress.sources[0].endOffset}]}
    received = RecordingReceiver()
    BacklogModeListener(received).onQueryProgress(event)
    [message] = received.messages
    return message


def assert_named_and_continued(history: list[set[tuple[str, frozenset]]]) -> None:
    """Each series of every export carries the query's name, and a series exported once is
    exported with the same attributes as long as its metric is reported at all."""
    for series in history:
        assert series, "nothing exported"
        for metric, attributes in series:
            assert dict(attributes).get(names.QUERY_NAME) == NAME, (metric, dict(attributes))
    for earlier, later in zip(history, history[1:]):
        still_reported = {metric for metric, _ in later}
        assert {s for s in earlier if s[0] in still_reported} <= later, (earlier, later)


@pytest.mark.parametrize("method", ["in-place", "restart"])
def test_a_handles_named_query_is_named_on_every_series_from_its_start(method):
    metrics = session_metrics()
    writer = FakeWriter().queryName(NAME)
    controller = ModeController(writer, INTERVALS, ChosenPolicy(method), clock=FakeClock(), settle_timeout_s=0,
                                observers=(metrics,))
    controller.start()
    assert controller.attach()
    history = [exported(metrics)]  # an export before the first batch commits
    assert {metric for metric, _ in history[0]} == {names.MODE.name}

    first = committed(controller.query, 0, processing_backlog=False)  # caught up: a switch follows
    metrics.receive(first)  # the session's listener tells the metrics first, then the handle
    assert controller.handle(first)
    assert controller.mode is Mode.LOW_LATENCY
    history.append(exported(metrics))
    if method == "restart":
        stopped = writer.started[0]
        metrics.receive(QueryTerminated(stopped.id, stopped.runId, None))
        history.append(exported(metrics))
        replayed = committed(controller.query, 0, processing_backlog=False)  # the new run replays it
        metrics.receive(replayed)
        assert controller.handle(replayed)
        history.append(exported(metrics))

    assert {metric for metric, _ in history[-1]} >= {names.MODE.name, names.MODE_SWITCHES.name,
                                                      names.RECORDS_IN.name, names.PENDING_RECORDS.name}
    assert_named_and_continued(history)


def test_an_installations_named_query_is_named_from_its_adoption_whatever_the_metrics_heard_first():
    metrics = session_metrics()
    spark = FakeSpark()
    switch = SessionModeSwitch(spark, INTERVALS, session_listener=SessionListener(), observers=(metrics,),
                               switcher_of=lambda query, intervals: FakeInPlaceSwitcher(query, intervals))
    query = FakeQuery(spark, 0, name=NAME)
    spark.queries[query.id] = query
    first = committed(query, 0, processing_backlog=True)
    switch.handle(first)  # adopted before the metrics heard of the batch
    history = [exported(metrics)]
    assert {metric for metric, _ in history[0]} == {names.MODE.name}
    metrics.receive(first)
    history.append(exported(metrics))
    caught_up = committed(query, 1, processing_backlog=False)
    metrics.receive(caught_up)
    switch.handle(caught_up)
    history.append(exported(metrics))
    assert names.MODE_SWITCHES.name in {metric for metric, _ in history[-1]}
    assert_named_and_continued(history)


def test_a_replaced_runs_late_messages_change_no_series():
    """Under Connect the stopped run's termination arrives after the switch (which names the
    run it replaced): the query must not vanish from the metrics until its new run commits a
    batch, and a late batch of the replaced run counts nothing."""
    metrics = session_metrics()
    query = FakeQuery(FakeSpark(), 0, name=NAME)
    metrics.receive(committed(query, 0, processing_backlog=True))
    switch = SimpleNamespace(query_id=query.id, query_name=NAME, mode=Mode.LOW_LATENCY)  # what a QuerySwitch shows
    old_run = query.runId
    metrics.switched(switch, Transition(Mode.HIGH_THROUGHPUT, Mode.LOW_LATENCY, 0, 0.0, SwitchMethod.RESTART, 1.0),
                     old_run)
    metrics.receive(QueryTerminated(query.id, old_run, None))
    metrics.receive(BatchCommitted(query.id, old_run, 1, True, 0))
    assert {v for v, _ in metrics.metrics.observe(names.RECORDS_IN)} == {3.0}
    assert {v for v, _ in metrics.metrics.observe(names.MODE_SWITCHES)} == {1.0}
    metrics.receive(QueryTerminated(query.id, "run-2", None))  # the new run stopped by its user: the series end
    assert not exported(metrics)
