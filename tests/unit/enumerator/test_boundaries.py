"""Backlog tracking on a fake cluster and a fake control topic: boundaries, the flag of the
batch that reaches them, events that only confirm, restarts and re-entry."""

import json

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.settings import parse_options
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.boundaries import record_boundaries, reentry_boundaries
from backlog_source.enumerator.enumerator import Enumerator
from backlog_source.enumerator.state import BacklogState, SourceOffset, classify
from backlog_source.events.finish_event import MAX_EVENT_BYTES, BacklogFinishEvent
from backlog_source.split.planning import ReadBudget
from tests.fakes import FakeClock, FakeControlTopic, FakeOffsetsClient, FakeRecordSizes

A0, A1, A2, A3 = Bucket("a", 0), Bucket("a", 1), Bucket("a", 2), Bucket("a", 3)
ALL = ReadBudget()
# These tests plan batch after batch on a clock that does not move: no idle-poll bound.
NO_POLL_BOUND = {"backlog.minPollIntervalMs": "0"}


def make(options=None, topics=None, **fake):
    settings = parse_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest", **NO_POLL_BOUND,
         **(options or {})}
    )
    client = FakeOffsetsClient(topics=topics or {"a": [(0, 100), (10, 10), (0, 30)]}, **fake)
    control = FakeControlTopic()
    return Enumerator(settings, client, control, clock=FakeClock(), record_sizes=FakeRecordSizes()), client, control


def restarted(client, options=None, control=None):
    """A new run of the same query (a new enumerator) on the same cluster."""
    settings = parse_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest", **NO_POLL_BOUND,
         **(options or {})}
    )
    return Enumerator(settings, client, control or FakeControlTopic(), clock=FakeClock(), record_sizes=FakeRecordSizes())


def event(offset: SourceOffset, bucket: Bucket, boundary=None, source_id=None) -> bytes:
    boundary = offset.boundaries[bucket] if boundary is None else boundary
    return BacklogFinishEvent(
        source_id=source_id or offset.source_id, topic=bucket.topic, partition=bucket.partition,
        boundary_offset=boundary, reached_offset=boundary, emitted_at_ms=1,
    ).encode()


def checkpointed(offset: SourceOffset) -> SourceOffset:
    return offset_codec.decode(json.loads(json.dumps(offset_codec.encode(offset))))


def test_boundaries_are_the_log_end_at_start_and_empty_buckets_have_none():
    enumerator, _, _ = make()
    start = enumerator.initial_offset()
    assert start.backlog.pending == {A0: 100, A2: 30}  # a-1 is empty: no backlog, no event expected
    assert start.processing_backlog


def test_latest_start_has_no_backlog():
    enumerator, _, _ = make({"startingOffsets": "latest"})
    start = enumerator.initial_offset()
    assert start.backlog.pending == {} and not start.processing_backlog


def test_read_committed_boundary_is_the_last_stable_offset():
    enumerator, _, _ = make({"kafka.isolation.level": "read_committed"}, stable={A0: 80})
    assert enumerator.initial_offset().backlog.pending[A0] == 80


def test_the_batch_that_reaches_every_boundary_already_reports_no_backlog():
    enumerator, _, _ = make()
    first = enumerator.latest_offset(enumerator.initial_offset(), ALL)
    assert not first.processing_backlog  # no extra batch is needed to drop the flag
    assert first.backlog.finishing == {A0: 100, A2: 30} and first.backlog.pending == {}
    assert first.boundaries == {A0: 100, A2: 30}  # its splits still carry them to the readers


def test_events_confirm_finished_buckets_at_the_next_plan_and_duplicates_are_counted():
    enumerator, client, control = make()
    first = enumerator.latest_offset(enumerator.initial_offset(), ALL)
    control.values += [event(first, A0), event(first, A0), event(first, A2)]
    client.append("a", 0, 5)
    second = enumerator.latest_offset(first, ALL)
    counts = second.backlog.event_counts
    assert (counts["handled"], counts["duplicate"], counts["finished_by_position"]) == (2, 1, 0)
    assert second.backlog.finishing == {} and second.events_position == 3


def test_a_lost_event_finishes_the_bucket_by_its_committed_position():
    enumerator, client, _ = make()
    first = enumerator.latest_offset(enumerator.initial_offset(), ALL)
    client.append("a", 0, 5)
    second = enumerator.latest_offset(first, ALL)
    assert second.backlog.event_counts["finished_by_position"] == 2 and second.backlog.finishing == {}


def test_without_a_byte_budget_the_control_topic_is_read_only_when_a_batch_reached_a_boundary():
    enumerator, client, control = make({"maxOffsetsPerTrigger": "13"})
    offset = enumerator.initial_offset()
    offset = enumerator.latest_offset(offset, ReadBudget(max_records=13))  # reaches nothing yet
    assert control.reads == 0
    while offset.processing_backlog:
        offset = enumerator.latest_offset(offset, ReadBudget(max_records=13))
    client.append("a", 1, 1)
    enumerator.latest_offset(offset, ReadBudget(max_records=13))
    assert control.reads == 1  # once, for the batch that reached the last boundaries
    for _ in range(3):  # idle polls with nothing new ask nothing of the control topic
        enumerator.latest_offset(offset, ReadBudget(max_records=13))
    assert control.reads == 1


def test_foreign_stale_malformed_and_oversized_messages_are_ignored_and_counted():
    enumerator, client, control = make()
    first = enumerator.latest_offset(enumerator.initial_offset(), ALL)
    control.values += [
        event(first, A0, source_id="someone-else"),
        event(first, A0, boundary=7),  # an older boundary
        b"\x00garbage",
        json.dumps({"type": "Other"}).encode(),
        None,
        b"{" + b" " * MAX_EVENT_BYTES + b"}",
        event(first, A0)[:-1],
    ]
    client.append("a", 0, 1)
    second = enumerator.latest_offset(first, ALL)
    counts = second.backlog.event_counts
    assert (counts["foreign"], counts["stale"], counts["malformed"], counts["handled"]) == (1, 1, 5, 0)
    assert counts["finished_by_position"] == 2


def test_an_event_no_planned_batch_supports_is_implausible_and_changes_nothing():
    """Trust the broker and the plan, not the control topic: an event with the real source id
    and boundary of a bucket still far from it (forged, or a bug) is counted, not obeyed."""
    state = BacklogState(pending={A0: 200_000}, finishing={A2: 30})
    forged = BacklogFinishEvent("src", "a", 0, 200_000, 200_000, 1).encode()
    real = BacklogFinishEvent("src", "a", 2, 30, 30, 1).encode()
    settled, finished = state.settle([forged, real], "src", committed={A0: 0, A2: 30})
    assert settled.pending == {A0: 200_000} and set(finished) == {A2}
    assert settled.event_counts["implausible"] == 1 and settled.event_counts["handled"] == 1


def test_restore_mid_backlog_keeps_the_same_boundaries():
    enumerator, client, _ = make()
    first = enumerator.latest_offset(enumerator.initial_offset(), ReadBudget(max_records=20))
    client.append("a", 0, 500)  # the log grows while the query is down
    resumed = restarted(client).latest_offset(checkpointed(first), ReadBudget(max_records=20))
    assert resumed.boundaries == {A0: 100, A2: 30}  # a recorded boundary never moves
    assert resumed.trace.ids == first.trace.ids  # the same phase continues


def test_a_restart_after_downtime_is_a_new_backlog_phase():
    """The headline case: caught up, stopped, 300 records arrive, restarted on the same
    checkpoint: backlog again, sized by the backlog limit, with boundaries at the new end."""
    enumerator, client, _ = make()
    caught_up = enumerator.latest_offset(enumerator.initial_offset(), ALL)
    assert not caught_up.processing_backlog
    client.append("a", 0, 300)
    client.append("a", 1, 5)
    budget = ReadBudget(max_records=None, backlog_max_records=20)
    first = restarted(client).latest_offset(checkpointed(caught_up), budget)
    assert first.processing_backlog and first.backlog.pending == {A0: 400, A1: 15}
    assert sum(first.positions.values()) - sum(caught_up.positions.values()) in range(19, 22)  # the backlog limit
    assert first.trace.ids.trace_id != caught_up.trace.ids.trace_id  # a new phase, a new trace


def test_a_restart_whose_lag_one_batch_reads_is_a_phase_of_that_batch():
    enumerator, client, _ = make()
    caught_up = enumerator.latest_offset(enumerator.initial_offset(), ALL)
    client.append("a", 0, 3)
    first = restarted(client).latest_offset(checkpointed(caught_up), ALL)
    assert not first.processing_backlog and first.backlog.finishing == {A0: 103}


def test_a_caught_up_restart_records_nothing():
    enumerator, client, _ = make()
    caught_up = enumerator.latest_offset(enumerator.initial_offset(), ALL)
    again = restarted(client)
    assert again.latest_offset(checkpointed(caught_up), ALL) == checkpointed(caught_up)


def test_a_bucket_discovered_mid_backlog_is_read_in_the_same_batch_with_its_own_boundary():
    enumerator, client, _ = make()
    start = enumerator.initial_offset()
    client.topics["a"].append((5, 42))
    end = enumerator.latest_offset(start, ReadBudget(max_records=50))
    assert end.starts == {A3: 5} and end.positions[A3] > 5  # read from its earliest offset now
    assert end.boundaries[A3] == 42


def test_a_vanished_bucket_leaves_backlog():
    enumerator, client, _ = make({"failOnDataLoss": "false"})
    start = enumerator.initial_offset()
    client.topics["a"] = client.topics["a"][:1]
    end = enumerator.latest_offset(start, ReadBudget(max_records=5))
    assert set(end.boundaries) == {A0}


def test_a_reset_bucket_gets_a_fresh_boundary_and_is_read_from_its_earliest_offset():
    enumerator, client, _ = make({"failOnDataLoss": "false"})
    first = enumerator.latest_offset(enumerator.initial_offset(), ReadBudget(max_records=100))
    client.topics["a"][0] = (0, 9)  # re-created: the old boundary 100 is unreachable
    second = enumerator.latest_offset(first, ALL)
    assert second.starts == {A0: 0} and second.positions[A0] == 9 and second.backlog.finishing[A0] == 9


def test_reentry_needs_the_high_water_mark_and_more_than_one_batch():
    enumerator, client, _ = make({"backlog.reenterLag": "50", "maxOffsetsPerTrigger": "10"})
    budget = ReadBudget(max_records=10)
    offset = enumerator.initial_offset()
    while offset.processing_backlog:
        offset = enumerator.latest_offset(offset, budget)
    offset = enumerator.latest_offset(offset, budget)  # settles the last finishing buckets
    client.append("a", 1, 30)
    offset = enumerator.latest_offset(offset, budget)
    assert not offset.processing_backlog  # 30 <= 50: stays caught up
    while offset.positions[A1] < 40:
        offset = enumerator.latest_offset(offset, budget)
    client.append("a", 0, 60)
    client.append("a", 1, 10)
    entered = enumerator.latest_offset(offset, budget)
    assert entered.backlog.pending == {A0: 160, A1: 50}
    client.append("a", 0, 1000)  # more lag while in backlog does not move the boundaries
    still = enumerator.latest_offset(entered, budget)
    assert still.backlog.pending == entered.backlog.pending


def test_a_burst_one_batch_absorbs_never_enters_backlog():
    """Hysteresis: lag above backlog.reenterLag that the next batch reads anyway (here up to
    200 records) is no backlog, so traffic around the threshold costs no switch."""
    enumerator, client, _ = make({"backlog.reenterLag": "50", "maxOffsetsPerTrigger": "200"})
    offset = enumerator.latest_offset(enumerator.initial_offset(), ALL)
    offset = enumerator.latest_offset(offset, ALL) if offset.processing_backlog else offset
    for burst in (40, 60, 120, 180):
        client.append("a", 0, burst)
        offset = enumerator.latest_offset(offset, ReadBudget(max_records=200))
        assert not offset.processing_backlog and offset.backlog.pending == {}


def test_reentry_rules_in_isolation():
    caught_up = BacklogState()
    positions, log_end = {A0: 0, A1: 0}, {A0: 300, A1: 10}
    assert reentry_boundaries(caught_up, positions, log_end, 100, 50) == {A0: 300, A1: 10}
    assert reentry_boundaries(caught_up, positions, log_end, 100, 400) == {}  # one batch absorbs it
    assert reentry_boundaries(caught_up, positions, log_end, 400, 50) == {}  # below the high-water mark
    assert reentry_boundaries(BacklogState(pending={A0: 9}), positions, log_end, 100, 50) == {}  # already in


def test_the_batch_that_reenters_backlog_is_sized_by_the_backlog_limit():
    enumerator, client, _ = make({"backlog.reenterLag": "50", "backlog.maxOffsetsPerTrigger": "7"})
    budget = ReadBudget(max_records=None, backlog_max_records=7)
    offset = enumerator.initial_offset()
    for _ in range(40):
        offset = enumerator.latest_offset(offset, budget)
    assert not offset.processing_backlog
    before = dict(offset.positions)
    client.append("a", 0, 1000)
    entered = enumerator.latest_offset(offset, budget)
    assert entered.processing_backlog
    assert sum(entered.positions.values()) - sum(before.values()) == 7


def test_backlog_disabled_records_nothing_and_reads_no_events():
    enumerator, _, control = make({"backlog.enabled": "false"})
    start = enumerator.initial_offset()
    end = enumerator.latest_offset(start, ALL)
    assert start.backlog.pending == {} and end.boundaries == {} and control.reads == 0 and control.opened == 0


def test_pure_state_rules():
    assert record_boundaries({A0: 5, A1: 7}, {A0: 9, A1: 7}, [A0, A1]) == {A0: 9}
    ev = BacklogFinishEvent("s", "a", 0, 9, 9, 0)
    assert classify(ev, "s", {}, {A0: 9}) == "handled"
    assert classify(ev, "s", {A0: 9}, {}) == "implausible"
    assert classify(ev, "s", {A0: 12}, {}) == "stale"
    assert classify(ev, "s", {}, {}) == "duplicate"
    assert classify(ev, "x", {}, {A0: 9}) == "foreign"
    planned = BacklogState(pending={A0: 9, A1: 4}).plan({A0: 8, A1: 4})
    assert planned.pending == {A0: 9} and planned.finishing == {A1: 4} and planned.boundaries == {A0: 9, A1: 4}
    # A recorded boundary never moves.
    assert BacklogState(pending={A0: 9}).with_boundaries({A0: 20, A1: 3}).pending == {A0: 9, A1: 3}


@pytest.mark.parametrize("budget, reenters", [(ReadBudget(max_records=10), True), (ALL, False)])
def test_reentry_is_judged_by_the_budget_the_batch_was_given(budget, reenters):
    """The enumerator only receives a budget (``ReadBudget.from_limit``): under the options'
    budget a lag of many batches enters backlog again; under ``ReadAllAvailable``
    (Trigger.Once) the batch reads it all, so it is no backlog, whatever the options say."""
    enumerator, client, _ = make({"backlog.reenterLag": "50", "maxOffsetsPerTrigger": "10"})
    offset = enumerator.initial_offset()
    while offset.processing_backlog:
        offset = enumerator.latest_offset(offset, ALL)
    offset = enumerator.latest_offset(offset, ALL)  # settles the last finishing buckets
    client.append("a", 0, 1000)
    assert enumerator.latest_offset(offset, budget).processing_backlog is reenters
