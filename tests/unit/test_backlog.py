"""Backlog tracking on a fake cluster and a fake control topic: boundaries, events, safety net."""

import json

import pytest

from backlog_source.buckets import Bucket
from backlog_source.errors import ControlTopicError
from backlog_source.settings import parse_options
from enumerator.backlog import BacklogState, EventCounts, classify, record_boundaries
from enumerator.enumerator import Enumerator, ReadBudget
from enumerator.offsets import SourceOffset
from events.model import MAX_EVENT_BYTES, BacklogFinishEvent, MalformedEvent
from tests.fakes import FakeClock, FakeControlTopic, FakeOffsetsClient

A0, A1, A2 = Bucket("a", 0), Bucket("a", 1), Bucket("a", 2)
ALL = ReadBudget()


def make(options=None, topics=None, **fake):
    settings = parse_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest", **(options or {})}
    )
    client = FakeOffsetsClient(topics=topics or {"a": [(0, 100), (10, 10), (0, 30)]}, **fake)
    control = FakeControlTopic()
    return Enumerator(settings, client, control, clock=FakeClock()), client, control


def event(start: SourceOffset, bucket: Bucket, boundary=None, source_id=None, reached=None) -> bytes:
    boundary = start.backlog[bucket] if boundary is None else boundary
    return BacklogFinishEvent(
        source_id=source_id or start.source_id, topic=bucket.topic, partition=bucket.partition,
        boundary_offset=boundary, reached_offset=reached or boundary, emitted_at_ms=1,
    ).encode()


def test_boundaries_are_the_log_end_at_start_and_empty_buckets_have_none():
    enumerator, _, _ = make()
    start = enumerator.initial_offset()
    assert start.backlog == {A0: 100, A2: 30}  # a-1 is empty: finished at once, no event expected
    assert start.processing_backlog


def test_latest_start_has_no_backlog():
    enumerator, _, _ = make({"startingOffsets": "latest"})
    start = enumerator.initial_offset()
    assert start.backlog == {} and not start.processing_backlog


def test_read_committed_boundary_is_the_last_stable_offset():
    enumerator, _, _ = make({"kafka.isolation.level": "read_committed"}, stable={A0: 80})
    assert enumerator.initial_offset().backlog[A0] == 80


def test_events_finish_buckets_once_and_duplicates_are_counted():
    enumerator, client, control = make()
    start = enumerator.initial_offset()
    first = enumerator.latest_offset(start, ALL)  # reads everything; boundaries still pending
    assert first.processing_backlog
    control.values += [event(start, A0), event(start, A0), event(start, A2)]
    second = enumerator.latest_offset(first, ALL)
    assert not second.processing_backlog
    assert second.event_counts["handled"] == 2 and second.event_counts["duplicate"] == 1
    assert second.event_counts["finished_by_position"] == 0
    assert second.events_position == 3


def test_foreign_stale_malformed_and_oversized_messages_are_ignored_and_counted():
    enumerator, client, control = make({"maxOffsetsPerTrigger": "10"})
    start = enumerator.initial_offset()
    control.values += [
        event(start, A0, source_id="someone-else"),
        event(start, A0, boundary=7),  # an older boundary
        b"\x00garbage",
        json.dumps({"type": "Other"}).encode(),
        None,
        b"{" + b" " * MAX_EVENT_BYTES + b"}",
        event(start, A0)[:-1],
    ]
    end = enumerator.latest_offset(start, ALL)
    counts = end.event_counts
    assert (counts["foreign"], counts["stale"], counts["malformed"], counts["handled"]) == (1, 1, 5, 0)
    assert end.backlog == start.backlog


def test_a_lost_event_never_keeps_the_job_in_backlog():
    enumerator, _, control = make()
    start = enumerator.initial_offset()
    first = enumerator.latest_offset(start, ALL)
    assert first.processing_backlog  # the batch that crosses the boundaries has not committed
    second = enumerator.latest_offset(first, ALL)  # committed now; no event ever arrived
    assert not second.processing_backlog
    assert second.event_counts["finished_by_position"] == 2


def test_events_handled_before_the_safety_net_count_as_events():
    enumerator, _, control = make()
    start = enumerator.initial_offset()
    first = enumerator.latest_offset(start, ALL)
    control.values += [event(start, A0), event(start, A2)]
    second = enumerator.latest_offset(first, ALL)
    assert second.event_counts["handled"] == 2 and second.event_counts["finished_by_position"] == 0


def test_restore_mid_backlog_keeps_the_same_boundaries():
    enumerator, client, control = make({"maxOffsetsPerTrigger": "20"})
    start = enumerator.initial_offset()
    first = enumerator.latest_offset(start, ReadBudget(max_records=20))
    checkpointed = json.loads(json.dumps(first.to_json()))
    client.append("a", 0, 500)  # the log grows while the query is down
    restored, _, _ = make({"maxOffsetsPerTrigger": "20"}, topics=client.topics)
    resumed = restored.latest_offset(SourceOffset.from_json(checkpointed), ReadBudget(max_records=20))
    assert resumed.backlog == start.backlog == {A0: 100, A2: 30}


def test_a_bucket_discovered_mid_backlog_gets_its_own_boundary():
    enumerator, client, control = make()
    start = enumerator.initial_offset()
    client.topics["a"].append((5, 42))
    end = enumerator.latest_offset(start, ALL)
    assert end.backlog[Bucket("a", 3)] == 42


def test_a_vanished_bucket_leaves_the_pending_set():
    enumerator, client, control = make({"failOnDataLoss": "false", "maxOffsetsPerTrigger": "5"})
    start = enumerator.initial_offset()
    client.topics["a"] = client.topics["a"][:1]
    end = enumerator.latest_offset(start, ReadBudget(max_records=5))
    assert set(end.backlog) == {A0}


def test_a_reset_bucket_gets_a_fresh_boundary_instead_of_one_it_can_never_reach():
    enumerator, client, control = make({"failOnDataLoss": "false"})
    start = enumerator.initial_offset()
    first = enumerator.latest_offset(start, ReadBudget(max_records=150))
    client.topics["a"][0] = (0, 9)  # re-created: the old boundary 100 is unreachable
    second = enumerator.latest_offset(first, ALL)
    assert second.backlog.get(A0) == 9


def test_reentry_records_fresh_boundaries_once_and_cannot_flap():
    enumerator, client, control = make({"backlog.reenterLag": "50"})
    offset = enumerator.initial_offset()
    for _ in range(2):
        offset = enumerator.latest_offset(offset, ALL)
    assert not offset.processing_backlog
    client.append("a", 1, 30)
    offset = enumerator.latest_offset(offset, ALL)
    assert not offset.processing_backlog  # 30 <= 50: stays caught up
    client.append("a", 0, 60)
    client.append("a", 1, 10)
    entered = enumerator.latest_offset(offset, ReadBudget(max_records=10))
    assert entered.backlog == {A0: 160, A1: 50}
    client.append("a", 0, 1000)  # more lag while in backlog does not move the boundaries
    still = enumerator.latest_offset(entered, ReadBudget(max_records=10))
    assert still.backlog == entered.backlog


def test_backlog_read_limit_applies_only_while_processing_backlog():
    from backlog_source.datasource import BacklogStreamReader
    from pyspark.sql.streaming.datasource import ReadMaxRows

    settings = parse_options(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "100", "backlog.maxOffsetsPerTrigger": "5000"}
    )
    reader = BacklogStreamReader(settings)
    default = reader.getDefaultReadLimit()
    assert default == ReadMaxRows(5000)
    budget = reader._budget(default)
    assert budget.for_state(processing_backlog=True).max_records == 5000
    assert budget.for_state(processing_backlog=False).max_records == 100
    assert reader._budget(ReadMaxRows(7)).for_state(processing_backlog=True).max_records == 7


def test_the_batch_that_reenters_backlog_is_sized_by_the_backlog_limit():
    enumerator, client, control = make({"backlog.reenterLag": "50"})
    offset = enumerator.initial_offset()
    budget = ReadBudget(max_records=None, backlog_max_records=7)
    for _ in range(30):
        offset = enumerator.latest_offset(offset, budget)
    assert not offset.processing_backlog
    before = dict(offset.positions)
    client.append("a", 0, 1000)
    entered = enumerator.latest_offset(offset, budget)
    assert entered.processing_backlog
    assert sum(entered.positions.values()) - sum(before.values()) == 7


def test_control_topic_that_cannot_be_created_fails_at_start_naming_the_option():
    enumerator, client, _ = make()

    def refuse(topic, partitions):
        raise ControlTopicError(f"cannot create the control topic {topic!r} named by option 'backlog.eventsTopic'")

    client.ensure_topic = refuse
    with pytest.raises(ControlTopicError, match="backlog.eventsTopic"):
        enumerator.initial_offset()


def test_backlog_disabled_records_nothing_and_reads_no_events():
    enumerator, _, control = make({"backlog.enabled": "false"})
    start = enumerator.initial_offset()
    end = enumerator.latest_offset(start, ALL)
    assert start.backlog == {} and end.backlog == {} and control.reads == 0


def test_event_codec_round_trip_and_rejections():
    original = BacklogFinishEvent("s", "t", 3, 10, 12, 99, "00-abc-def-01")
    assert BacklogFinishEvent.decode(original.encode()) == original
    data = json.loads(original.encode())
    assert data["type"] == "BacklogFinishEvent" and data["v"] == 1
    for payload, reason in [
        (json.dumps({**data, "v": 2}).encode(), "version 2 is not understood"),
        (json.dumps({**data, "partition": "3"}).encode(), "'partition' must be int"),
        (json.dumps({**data, "reached_offset": 1}).encode(), "below boundary_offset"),
    ]:
        with pytest.raises(MalformedEvent, match=reason):
            BacklogFinishEvent.decode(payload)


def test_pure_state_rules():
    assert record_boundaries({A0: 5, A1: 7}, {A0: 9, A1: 7}, [A0, A1]) == {A0: 9}
    ev = BacklogFinishEvent("s", "a", 0, 9, 9, 0)
    assert classify(ev, "s", {A0: 9}) == "handled"
    assert classify(ev, "s", {A0: 12}) == "stale"
    assert classify(ev, "s", {}) == "duplicate"
    assert classify(ev, "x", {A0: 9}) == "foreign"
    state = BacklogState({A0: 9, A1: 4})
    state, passed = state.finish_passed({A0: 8, A1: 4})
    assert passed == [A1] and state.pending == {A0: 9} and state.counts["finished_by_position"] == 1
    assert EventCounts.from_json(state.counts.to_json()) == state.counts


def test_probe_reports_the_boundaries_a_new_query_would_record_without_side_effects():
    enumerator, client, control = make()
    assert enumerator.probe_initial_backlog() == {A0: 100, A2: 30}
    assert client.created == [] and control.reads == 0
    caught_up, _, _ = make({"startingOffsets": "latest"})
    assert caught_up.probe_initial_backlog() == {}
