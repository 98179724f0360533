"""Planning on a fake cluster: starting positions, limits, discovery, data loss, AvailableNow."""

import json

import pytest

from backlog_source.core.buckets import Bucket, to_nested
from backlog_source.core.errors import ConfigError, DataLossError, SnapshotError
from backlog_source.core.jvm_heap import default_catch_up_bytes
from backlog_source.core.settings import parse_options
from backlog_source.core.snapshot_manifest import Manifest, PartitionSnapshot
from backlog_source.core.tracing import names
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.enumerator import Enumerator
from backlog_source.enumerator.kafka_admin import TopicsDeletedError, TopicsRecreatedError
from backlog_source.enumerator.state import BacklogState, BoundedBy, SourceOffset
from backlog_source.events.sizes_report import RecordSizesReport, TopicSizes
from backlog_source.split.batch_splits import plan_splits
from backlog_source.split.planning import ReadBudget
from tests.fakes import FakeClock, FakeControlTopic, FakeOffsetsClient, FakeRecordSizes

A0, A1 = Bucket("a", 0), Bucket("a", 1)


def make(options=None, topics=None, clock=None, **fake):
    # These tests plan batch after batch on a clock that does not move: no idle-poll bound.
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "backlog.minPollIntervalMs": "0",
                              **(options or {})})
    client = FakeOffsetsClient(topics=topics if topics is not None else {"a": [(0, 100), (10, 50)]}, **fake)
    return Enumerator(settings, client, FakeControlTopic(), clock=clock or FakeClock(), record_sizes=FakeRecordSizes()), client


def test_initial_offset_latest_by_default_and_earliest_on_request():
    enumerator, _ = make()
    assert enumerator.initial_offset().positions == {A0: 100, A1: 50}
    enumerator, _ = make({"startingOffsets": "earliest"})
    assert enumerator.initial_offset().positions == {A0: 0, A1: 10}


def test_the_offsets_follow_bucket_order_from_the_start_so_encoding_them_sorts_in_one_pass():
    topics = {t: [(0, 5)] * 40 for t in ("b", "a", "c")}
    enumerator, client = make({"subscribe": "b,a,c", "startingOffsets": "earliest"}, topics=topics)
    start = enumerator.initial_offset()
    assert list(start.positions) == sorted(start.positions)
    client.append("c", 3, 1)
    end = enumerator.latest_offset(start, ReadBudget())
    assert list(end.positions) == sorted(end.positions)


def test_initial_offset_is_computed_once_per_run_and_source_ids_differ_per_query():
    # Spark calls initialOffset again when it runs the first batch; both calls must agree.
    enumerator, client = make()
    first = enumerator.initial_offset()
    client.append("a", 0, 10)
    assert enumerator.initial_offset() is first
    other, _ = make()
    assert other.initial_offset().source_id != first.source_id


def test_specific_starting_offsets_with_sentinels():
    enumerator, _ = make({"startingOffsets": '{"a":{"0":42,"1":-2}}'})
    assert enumerator.initial_offset().positions == {A0: 42, A1: 10}


def test_specific_starting_offsets_must_cover_every_partition():
    enumerator, _ = make({"startingOffsets": '{"a":{"0":42}}'})
    with pytest.raises(ConfigError, match=r"missing: a-1 \(use -2 for earliest, -1 for latest\)"):
        enumerator.initial_offset()


def test_starting_offset_below_earliest_is_data_loss_unless_allowed():
    enumerator, _ = make({"startingOffsets": '{"a":{"0":5,"1":3}}'})
    with pytest.raises(DataLossError, match=r"offset 3 of a-1.*earliest available offset is 10"):
        enumerator.initial_offset()
    enumerator, _ = make({"startingOffsets": '{"a":{"0":5,"1":3}}', "failOnDataLoss": "false"})
    assert enumerator.initial_offset().positions == {A0: 5, A1: 10}


def test_starting_offset_beyond_the_end_is_rejected():
    enumerator, _ = make({"startingOffsets": '{"a":{"0":500,"1":-1}}'})
    with pytest.raises(ConfigError, match="offset 500 of a-0, beyond its log end 100"):
        enumerator.initial_offset()


def test_starting_timestamp_takes_precedence_and_strategy_applies():
    stamps = {A0: [(1000, 0), (2000, 40)], A1: [(1000, 10)]}
    enumerator, _ = make(
        {"startingTimestamp": "1500", "startingOffsets": "earliest", "startingOffsetsByTimestamp": '{"a":{"0":1,"1":1}}'},
        timestamps=stamps,
    )
    with pytest.raises(ConfigError, match=r"no record at or after the given timestamp in a-1 \(timestamp 1500\)"):
        enumerator.initial_offset()
    enumerator, _ = make(
        {"startingTimestamp": "1500", "startingOffsetsByTimestampStrategy": "latest"}, timestamps=stamps
    )
    assert enumerator.initial_offset().positions == {A0: 40, A1: 50}


def test_offsets_by_timestamp_per_partition():
    stamps = {A0: [(1000, 0), (2000, 40)], A1: [(1000, 10), (3000, 20)]}
    enumerator, _ = make({"startingOffsetsByTimestamp": '{"a":{"0":2000,"1":1000}}'}, timestamps=stamps)
    assert enumerator.initial_offset().positions == {A0: 40, A1: 10}


def test_latest_offset_reads_all_available_with_one_offsets_request():
    enumerator, client = make({"startingOffsets": "earliest"})
    start = enumerator.initial_offset()
    client.calls.clear()
    end = enumerator.latest_offset(start, ReadBudget())
    assert end.positions == {A0: 100, A1: 50}
    assert client.calls.count("latest_offsets") == 1


def test_latest_offset_returns_start_itself_when_nothing_is_new():
    enumerator, _ = make()
    start = enumerator.initial_offset()
    assert enumerator.latest_offset(start, ReadBudget()) is start


def test_max_records_caps_the_batch_with_sparks_allocation():
    enumerator, _ = make({"startingOffsets": "earliest"})
    end = enumerator.latest_offset(enumerator.initial_offset(), ReadBudget(max_records=30))
    # Lags 100 and 40: floor(30 * 100/140) = 21 and floor(30 * 40/140) = 8.
    assert end.positions == {A0: 21, A1: 18}


def test_partition_added_to_a_known_topic_is_read_from_its_earliest_offset_in_the_same_batch():
    """Spark plans a new partition from its earliest offset in the batch that finds it
    (KafkaOffsetReaderAdmin.getOffsetRangesFromResolvedOffsets): no empty batch first."""
    enumerator, client = make()
    start = enumerator.initial_offset()
    client.topics["a"].append((7, 20))
    end = enumerator.latest_offset(start, ReadBudget())
    assert end.starts == {Bucket("a", 2): 7} and end.positions[Bucket("a", 2)] == 20
    assert enumerator.latest_offset(end, ReadBudget()) is end


def test_subscribe_pattern_discovers_new_topics_and_skips_the_control_topic():
    enumerator, client = make({"subscribe": None} | {}, topics={"a": [(0, 1)]})
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "a.*|_backlog_events"})
    enumerator = Enumerator(settings, client, FakeControlTopic(), clock=FakeClock(), record_sizes=FakeRecordSizes())
    start = enumerator.initial_offset()
    client.topics["ab"] = [(0, 5)]
    client.topics["_backlog_events"] = [(0, 5)]
    client.topics["xa"] = [(0, 5)]  # matched anywhere in the name, as Spark's findFirstIn
    client.topics["xb"] = [(0, 5)]
    end = enumerator.latest_offset(start, ReadBudget())
    assert set(end.positions) == {Bucket("a", 0), Bucket("ab", 0), Bucket("xa", 0)}


def test_vanished_partition_fails_or_is_dropped():
    enumerator, client = make()
    start = enumerator.initial_offset()
    del client.topics["a"]
    with pytest.raises(DataLossError, match=r"a-0 \(next offset 100\), a-1 \(next offset 50\) no longer exist"):
        enumerator.latest_offset(start, ReadBudget())
    enumerator, client = make({"failOnDataLoss": "false"})
    start = enumerator.initial_offset()
    client.topics["a"] = [(0, 100)]
    assert enumerator.latest_offset(start, ReadBudget()).positions == {A0: 100}


def test_offsets_moving_backwards_fail_or_restart_at_earliest():
    enumerator, client = make()
    start = enumerator.initial_offset()
    client.topics["a"] = [(0, 3), (0, 50)]  # re-created topic
    with pytest.raises(DataLossError, match=r"offsets moved backwards for a-0 \(next offset 100, log end now 3\)"):
        enumerator.latest_offset(start, ReadBudget())
    # The log ends were audited against the positions read (a lower answer is asked again
    # by the client before it counts as loss).
    assert client.audited_against[-1] == start.positions
    enumerator, client = make({"failOnDataLoss": "false"})
    start = enumerator.initial_offset()
    client.topics["a"] = [(0, 3), (10, 50)]
    end = enumerator.latest_offset(start, ReadBudget())
    assert end.starts == {A0: 0} and end.positions == {A0: 3, A1: 50}  # from its earliest; nothing skipped


def test_a_topic_recreated_past_the_positions_read_is_found_by_its_topic_id_and_fails_or_is_read_from_its_start():
    """Caught up at 100 and 50, the topic is deleted and re-created with more records than
    were read: its offsets alone look like more records of the same topic, and the records
    below the old positions were skipped silently. Its topic id says it is another topic."""
    enumerator, client = make()
    start = enumerator.initial_offset()
    assert start.topic_ids == {"a": "a-0"}
    client.recreate("a", [(0, 150), (0, 80)])
    with pytest.raises(DataLossError, match=r"topic\(s\) a \(topic id a-0 -> a-1\) were deleted and re-created") as raised:
        enumerator.latest_offset(start, ReadBudget())
    assert "failOnDataLoss=false to read the re-created topic(s) from their earliest offsets" in str(raised.value)

    enumerator, client = make({"failOnDataLoss": "false"})
    start = enumerator.initial_offset()
    client.recreate("a", [(0, 150), (0, 80)])
    end = enumerator.latest_offset(start, ReadBudget())
    assert end.starts == {A0: 0, A1: 0} and end.positions == {A0: 150, A1: 80} and end.topic_ids == {"a": "a-1"}
    assert end.boundaries == {A0: 150, A1: 80}  # a new topic read from its start is in backlog


class RecreatedWhileListed(FakeOffsetsClient):
    """The topic is re-created after the log ends were sent for and before the listing
    answers (``recreate_on_listing``)."""

    recreate_on_listing: tuple | None = None

    def describe_topics(self, topics):
        if self.recreate_on_listing is not None:
            self.recreate(*self.recreate_on_listing)
            self.recreate_on_listing = None
        return super().describe_topics(topics)


def test_log_ends_sent_for_with_the_listing_are_taken_only_when_the_listing_finds_the_same_buckets_and_topics():
    """The latest offsets of the buckets already read are asked while the listing is (one
    round trip, not two). Their answer stands for the batch only when the listing finds what
    it would have found first: the same buckets of the same topics. A topic re-created in
    between has the same buckets under a new id: asked again, its new log ends are read."""
    client = RecreatedWhileListed(topics={"a": [(0, 100), (10, 50)]})
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "backlog.minPollIntervalMs": "0",
                              "failOnDataLoss": "false"})
    enumerator = Enumerator(settings, client, FakeControlTopic(), clock=FakeClock(), record_sizes=FakeRecordSizes())
    start = enumerator.initial_offset()
    client.append("a", 0, 5)
    end = enumerator.latest_offset(start, ReadBudget())
    assert end.positions == {A0: 105, A1: 50} and client.sent_used == 1
    client.recreate_on_listing = ("a", [(0, 150), (0, 80)])
    after = enumerator.latest_offset(end, ReadBudget())
    assert client.calls[-4:] == ["send_latest_offsets", "describe_topics", "earliest_offsets", "latest_offsets"]
    assert client.sent_used == 1 and after.starts == {A0: 0, A1: 0} and after.positions == {A0: 150, A1: 80}
    client.append("a", 1, 7)
    client.topics["a"].append((0, 4))  # a partition added while listed: asked again with it
    latest = enumerator.latest_offset(after, ReadBudget())
    assert client.sent_used == 1 and latest.positions == {A0: 150, A1: 87, Bucket("a", 2): 4}


def test_a_checkpoint_without_topic_ids_learns_them_at_the_next_batch():
    enumerator, client = make()
    start = enumerator.initial_offset()
    legacy = offset_codec.decode({k: v for k, v in offset_codec.encode(start).items() if k != "topic_ids"})
    assert legacy.topic_ids == {}
    client.recreate("a", [(0, 150), (10, 80)])  # cannot be told apart without the old id
    assert enumerator.latest_offset(legacy, ReadBudget()).topic_ids == {"a": "a-1"}


class DeletedDuringPlan(FakeOffsetsClient):
    """The topic list still has ``deleted`` when the latest offsets are asked for; the
    offsets request then finds it gone, as on Apache Kafka mid-deletion."""

    deleted: str = ""

    def latest_offsets(self, buckets, known=None, sent=None):
        if any(b.topic == self.deleted for b in buckets):
            self.topics.pop(self.deleted, None)
            raise TopicsDeletedError([self.deleted])
        return super().latest_offsets(buckets, known, sent)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_deleted_while_its_offsets_are_asked_is_handled_as_a_deleted_topic(fail_on_data_loss):
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "t.*", "failOnDataLoss": fail_on_data_loss,
                              "backlog.minPollIntervalMs": "0"})
    client = DeletedDuringPlan(topics={"t1": [(0, 10)] * 5, "t2": [(0, 4)]})
    enumerator = Enumerator(settings, client, FakeControlTopic(), clock=FakeClock(), record_sizes=FakeRecordSizes())
    start = enumerator.initial_offset()
    client.append("t2", 0, 3)
    client.deleted = "t1"
    if fail_on_data_loss == "true":
        with pytest.raises(DataLossError, match=r"partition\(s\) t1-0 \(next offset 10\).* no longer exist"):
            enumerator.latest_offset(start, ReadBudget())
        return
    end = enumerator.latest_offset(start, ReadBudget())
    assert end.positions == {Bucket("t2", 0): 7} and end.topic_ids == {"t2": "t2-0"}


class RecreatedDuringPlan(FakeOffsetsClient):
    """The first offsets request after ``recreate_on_ask`` is set finds the topic re-created
    with fewer partitions (as on Apache Kafka, when it was re-created after the listing)."""

    recreate_on_ask: tuple | None = None

    def latest_offsets(self, buckets, known=None, sent=None):
        if self.recreate_on_ask is not None:
            topic, pairs = self.recreate_on_ask
            self.recreate_on_ask = None
            self.recreate(topic, pairs)
            raise TopicsRecreatedError([topic])
        return super().latest_offsets(buckets, known, sent)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_recreated_with_fewer_partitions_while_its_offsets_are_asked_is_planned_again(fail_on_data_loss):
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": fail_on_data_loss,
                              "backlog.minPollIntervalMs": "0"})
    client = RecreatedDuringPlan(topics={"t": [(0, 10), (0, 10)]})
    enumerator = Enumerator(settings, client, FakeControlTopic(), clock=FakeClock(), record_sizes=FakeRecordSizes())
    start = enumerator.initial_offset()
    client.recreate_on_ask = ("t", [(0, 3)])
    if fail_on_data_loss == "true":
        with pytest.raises(DataLossError, match="deleted and re-created"):
            enumerator.latest_offset(start, ReadBudget())
        return
    end = enumerator.latest_offset(start, ReadBudget())
    assert end.positions == {Bucket("t", 0): 3} and end.starts == {Bucket("t", 0): 0}
    assert end.topic_ids["t"] != start.topic_ids["t"]


def test_the_first_batch_runs_under_min_records_and_later_ones_wait_for_max_trigger_delay():
    """KafkaMicroBatchStream.delayBatch starts its clock at 0, so the first trigger of a run
    never waits for maxTriggerDelay (the default 15m would otherwise delay a new query)."""
    clock = FakeClock()
    enumerator, client = make({"maxTriggerDelay": "10s"}, clock=clock)
    start = enumerator.initial_offset()
    client.append("a", 0, 5)
    budget = ReadBudget(min_records=20)
    first = enumerator.latest_offset(start, budget)
    assert first.positions == {A0: 105, A1: 50}  # 5 < 20, but the first trigger runs
    client.append("a", 0, 5)
    clock.advance(9)
    assert enumerator.latest_offset(first, budget) is first
    client.append("a", 1, 15)
    second = enumerator.latest_offset(first, budget)  # 20 available now
    assert second.positions == {A0: 110, A1: 65}
    client.append("a", 0, 1)
    assert enumerator.latest_offset(second, budget) is second
    clock.advance(10)
    assert enumerator.latest_offset(second, budget).positions == {A0: 111, A1: 65}


def test_available_now_stops_at_the_offsets_captured_at_start():
    enumerator, client = make({"startingOffsets": "earliest"})
    start = enumerator.initial_offset()
    enumerator.prepare_for_available_now()
    client.append("a", 0, 1000)
    client.topics["a"].append((0, 10))  # a partition added later is not read in this run
    first = enumerator.latest_offset(start, ReadBudget(max_records=60))
    second = enumerator.latest_offset(first, ReadBudget(max_records=1_000))
    assert second.positions == {A0: 100, A1: 50}
    assert not second.processing_backlog
    # Nothing is left: no extra batch to record the end of the backlog (Spark runs none).
    assert enumerator.latest_offset(second, ReadBudget(max_records=1_000)) is second


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_available_now_fails_when_its_planned_end_is_gone_whatever_fail_on_data_loss_says(fail_on_data_loss):
    """KafkaMicroBatchStream.verifyEndOffsetForTriggerAvailableNow: a topic re-created
    shorter, or a partition deleted, during an AvailableNow run fails it."""
    enumerator, client = make({"startingOffsets": "earliest", "failOnDataLoss": fail_on_data_loss})
    start = enumerator.initial_offset()
    enumerator.prepare_for_available_now()
    first = enumerator.latest_offset(start, ReadBudget(max_records=20))
    client.topics["a"] = [(0, 30), (10, 50)]  # a-0 re-created with fewer records than planned
    with pytest.raises(DataLossError, match="a-0 ends at 30, below the planned end 100.*whatever failOnDataLoss says"):
        enumerator.latest_offset(first, ReadBudget(max_records=20))
    enumerator, client = make({"startingOffsets": "earliest", "failOnDataLoss": fail_on_data_loss})
    start = enumerator.initial_offset()
    enumerator.prepare_for_available_now()
    client.topics["a"] = [(0, 100)]  # a-1 deleted
    with pytest.raises(DataLossError, match="a-1 no longer exists"):
        enumerator.latest_offset(start, ReadBudget())


def test_assign_of_missing_partition_is_a_clear_error():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"a":[0,7]}'})
    enumerator = Enumerator(settings, FakeOffsetsClient(topics={"a": [(0, 1)]}), FakeControlTopic(), clock=FakeClock(), record_sizes=FakeRecordSizes())
    with pytest.raises(ConfigError, match="option 'assign' names partition.s. that do not exist: a-7"):
        enumerator.initial_offset()


def test_missing_subscribed_topic_is_waited_for():
    enumerator, client = make({"subscribe": "a,later", "startingOffsets": "earliest"})
    start = enumerator.initial_offset()
    assert Bucket("later", 0) not in start.positions
    client.topics["later"] = [(0, 4)]
    end = enumerator.latest_offset(start, ReadBudget())
    assert end.starts[Bucket("later", 0)] == 0 and end.positions[Bucket("later", 0)] == 4


def test_an_idle_source_asks_kafka_at_most_once_per_min_poll_interval():
    """Spark polls an idle source about every 10 ms with a "0 seconds" trigger: after a plan
    that found nothing, the next ones within backlog.minPollIntervalMs make no request."""
    clock = FakeClock()
    enumerator, client = make({"backlog.minPollIntervalMs": "100"}, clock=clock)
    start = enumerator.initial_offset()
    assert enumerator.latest_offset(start, ReadBudget()) is start  # found nothing
    client.calls.clear()
    client.append("a", 0, 5)
    for _ in range(50):  # 50 polls within the interval, each with a fresh copy as Spark passes it
        assert enumerator.latest_offset(offset_codec.decode(offset_codec.encode(start)), ReadBudget()) == start
    assert client.calls == []
    clock.advance(0.1)
    end = enumerator.latest_offset(start, ReadBudget())  # the next poll after it asks, and finds the records
    assert end.positions[A0] == 105 and client.calls.count("latest_offsets") == 1
    client.calls.clear()
    assert enumerator.latest_offset(end, ReadBudget()) is end  # a new start is always planned at once
    assert client.calls.count("latest_offsets") == 1


def test_by_default_every_poll_asks_kafka_so_process_all_available_sees_new_records():
    """Spark's source asks Kafka at every ``latestOffset``; ``processAllAvailable()`` relies on
    it: an answer "nothing new" from a cache would end it before records already in Kafka."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"})
    client = FakeOffsetsClient(topics={"a": [(0, 100), (10, 50)]})
    enumerator = Enumerator(settings, client, FakeControlTopic(), clock=FakeClock(), record_sizes=FakeRecordSizes())
    start = enumerator.initial_offset()
    assert enumerator.latest_offset(start, ReadBudget()) is start  # found nothing
    client.append("a", 0, 3)  # the clock does not move: only a fresh request can find these
    assert enumerator.latest_offset(offset_codec.decode(offset_codec.encode(start)), ReadBudget()).positions[A0] == 103


# ----------------------------------------------------------------- starting from a snapshot

FILES = ("data/s/partition=0/part-0.parquet",)


def snapshot_enumerator(partitions, topics, fail_on_data_loss="true"):
    """a snapshot of topic 'a' with ``partitions`` {partition: (log_offset, rows)}."""
    snap = Manifest("a", "s", 1, {p: PartitionSnapshot(o, rows, FILES) for p, (o, rows) in partitions.items()})
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest",
                              "backlog.minPollIntervalMs": "0",
                              "snapshot.path": "/snap", "failOnDataLoss": fail_on_data_loss})
    return Enumerator(settings, FakeOffsetsClient(topics=topics), FakeControlTopic(), clock=FakeClock(),
                      snapshot_loader=lambda path: (None, path, snap), record_sizes=FakeRecordSizes())


def test_snapshot_buckets_start_at_their_log_offset_and_snapshot_only_ones_are_backlog():
    e = snapshot_enumerator({0: (100, 40), 1: (50, 10)}, {"a": [(0, 120), (0, 50)]})
    start = e.initial_offset()
    assert start.positions == {A0: 100, A1: 50}
    assert start.backlog.pending == {A0: 120, A1: 50}  # a-1: nothing after its snapshot; its snapshot is its backlog
    assert start.snapshot.pending == {A0: FILES, A1: FILES} and start.snapshot.root == "/snap"


def test_the_first_batch_reads_the_snapshot_even_with_nothing_new_in_the_log():
    e = snapshot_enumerator({0: (100, 40)}, {"a": [(0, 100)]})
    start = e.initial_offset()
    end = e.latest_offset(start, ReadBudget())
    assert end != start and end.snapshot.pending == {} and end.positions == start.positions
    # The batch that reads the snapshot carries the bucket to its boundary (the snapshot's
    # log offset); before it, the position alone did not count as having reached it.
    assert start.backlog.pending == {A0: 100} and end.backlog.finishing == {A0: 100} and not end.processing_backlog


def test_a_log_offset_below_the_earliest_is_data_loss_unless_allowed():
    with pytest.raises(DataLossError, match=r"continues a-0 at offset 10, but its earliest available offset is 30"):
        snapshot_enumerator({0: (10, 5)}, {"a": [(30, 90)]}).initial_offset()
    assert snapshot_enumerator({0: (10, 5)}, {"a": [(30, 90)]}, "false").initial_offset().positions == {A0: 30}


def test_a_log_offset_beyond_the_log_end_and_unknown_partitions_are_errors():
    with pytest.raises(SnapshotError, match="at offset 500, beyond its log end 90"):
        snapshot_enumerator({0: (500, 5)}, {"a": [(0, 90)]}).initial_offset()
    with pytest.raises(SnapshotError, match=r"names partition\(s\) \[3\] that the topic does not have"):
        snapshot_enumerator({3: (5, 5)}, {"a": [(0, 90)]}).initial_offset()


# -- catch-up batches sized by bytes and time ---------------------------------------------

MIB = 1 << 20


def catching_up(options=None, sizes=None, clock=None, topics=None):
    """A new query at the earliest offsets of a backlog (two partitions of 10,000 records),
    with the budget its options set."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest",
                              "backlog.minPollIntervalMs": "0", **(options or {})})
    client = FakeOffsetsClient(topics=topics or {"a": [(0, 10_000), (0, 10_000)]})
    sizes = sizes or FakeRecordSizes(default=1_000.0)
    enumerator = Enumerator(settings, client, FakeControlTopic(), clock=clock or FakeClock(), record_sizes=sizes)
    return enumerator, client, sizes, ReadBudget.from_settings(settings)


def test_a_catch_up_batch_reads_about_the_byte_budget_from_the_sizes_measured_where_it_starts():
    enumerator, _, sizes, budget = catching_up({"backlog.maxBytesPerTrigger": "2m"},
                                               FakeRecordSizes({A0: 100.0, A1: 10_000.0}))
    start = enumerator.initial_offset()
    end = enumerator.latest_offset(start, budget)
    read = {b: end.positions[b] - start.positions[b] for b in end.positions}
    assert read[A0] * 100 + read[A1] * 10_000 <= 2 * MIB + 10_000
    # Shared in proportion to each bucket's lag in bytes: both advance by the same share of
    # their lag (as Spark shares a record cap), the bucket of large records holding most bytes.
    assert read[A0] == read[A1] == 207
    assert end.plan.bounded_by is BoundedBy.BYTES and end.plan.budget_bytes == 2 * MIB
    assert sizes.asked == [{A0: 0, A1: 0}]


def test_by_default_a_restart_on_a_large_backlog_gets_bounded_batches_not_one_of_everything():
    topics = {"a": [(0, 1_000_000), (0, 1_000_000)]}
    enumerator, _, _, budget = catching_up(sizes=FakeRecordSizes(default=1_000.0), topics=topics)
    start = enumerator.initial_offset()
    end = enumerator.latest_offset(start, budget)
    assert end.plan.bounded_by is BoundedBy.BYTES
    read = sum(end.positions.values()) * 1_000
    default = default_catch_up_bytes(None)  # the test process runs under no JVM: Spark's default driver
    assert default == 128 << 20
    assert default - 2 * 1_000 <= read <= default + 2 * 1_000


def test_nothing_measurable_plans_a_first_batch_as_if_every_record_were_kafkas_largest():
    enumerator, _, _, budget = catching_up({"backlog.maxBytesPerTrigger": "4m"}, FakeRecordSizes(default=None))
    end = enumerator.latest_offset(enumerator.initial_offset(), budget)
    assert end.positions == {A0: 2, A1: 2}  # 4 MiB shared, 1 MiB assumed per record


def test_the_smaller_of_the_record_and_byte_bounds_wins():
    enumerator, _, _, budget = catching_up({"backlog.maxBytesPerTrigger": "1m", "backlog.maxOffsetsPerTrigger": "100"})
    end = enumerator.latest_offset(enumerator.initial_offset(), budget)
    assert sum(end.positions.values()) == 100 and end.plan.bounded_by is BoundedBy.RECORDS
    enumerator, _, _, budget = catching_up({"backlog.maxBytesPerTrigger": "100k", "backlog.maxOffsetsPerTrigger": "5000"})
    end = enumerator.latest_offset(enumerator.initial_offset(), budget)
    assert sum(end.positions.values()) <= 103 and end.plan.bounded_by is BoundedBy.BYTES


def test_once_caught_up_live_batches_read_what_is_there_whatever_the_byte_budget():
    enumerator, client, sizes, budget = catching_up({"backlog.maxBytesPerTrigger": "1m"},
                                                    topics={"a": [(0, 10), (0, 10)]})
    end = enumerator.latest_offset(enumerator.initial_offset(), budget)  # the whole backlog fits
    assert end.positions == {A0: 10, A1: 10} and not end.processing_backlog
    asked = len(sizes.asked)
    client.append("a", 0, 5_000)  # a burst once caught up: not backlog (no re-entry set)
    live = enumerator.latest_offset(end, budget)
    assert live.positions[A0] == 5_010 and live.plan.bounded_by is BoundedBy.AVAILABLE
    assert len(sizes.asked) == asked  # nothing measured outside backlog


def test_a_time_budget_learns_the_throughput_of_whole_batches_and_a_restart_keeps_it():
    clock = FakeClock()
    topics = {"a": [(0, 10_000_000), (0, 10_000_000)]}
    enumerator, _, _, budget = catching_up({"backlog.targetBatchDuration": "10s", "backlog.maxBytesPerTrigger": "1g"},
                                           FakeRecordSizes(default=100.0), clock, topics)
    start = enumerator.initial_offset()
    first = enumerator.latest_offset(start, budget)
    assert first.plan.bounded_by is BoundedBy.TIME and first.plan.bytes_per_s is None
    assert first.plan.bytes <= 16 * MIB
    clock.advance(2.0)  # the first batch (planning to the next plan) took 2 s
    second = enumerator.latest_offset(first, budget)
    learned = first.plan.bytes / 2.0
    assert second.plan.bytes_per_s == pytest.approx(learned)
    assert second.plan.bytes <= 4 * first.plan.bytes + 200
    # A restart on the checkpoint: a new enumerator reads the learnt rate from the offset.
    restored = offset_codec.decode(offset_codec.encode(second))
    assert restored.plan == second.plan
    again, _, _, _ = catching_up({"backlog.targetBatchDuration": "10s", "backlog.maxBytesPerTrigger": "1g"},
                                 FakeRecordSizes(default=100.0), clock, topics)
    third = again.latest_offset(restored, budget)
    assert third.plan.bytes_per_s == pytest.approx(learned)


def test_record_sizes_that_change_mid_backlog_are_planned_with_at_the_next_batch():
    sizes = FakeRecordSizes(default=100.0)
    topics = {"a": [(0, 1_000_000), (0, 1_000_000)]}
    enumerator, _, _, budget = catching_up({"backlog.maxBytesPerTrigger": "1m"}, sizes, topics=topics)
    first = enumerator.latest_offset(enumerator.initial_offset(), budget)
    sizes.default = 10_000.0  # the producer switched to 10 KB records
    second = enumerator.latest_offset(first, budget)
    read_first = sum(first.positions.values())
    read_second = sum(second.positions.values()) - read_first
    assert read_second * 10_000 <= MIB + 2 * 10_000 and read_second < read_first / 50


def test_a_catch_up_batch_that_fits_the_byte_budget_even_at_the_largest_record_size_measures_nothing():
    enumerator, _, sizes, budget = catching_up(topics={"a": [(0, 40), (0, 40)]})  # 80 records <= 256 MiB / 1 MiB
    end = enumerator.latest_offset(enumerator.initial_offset(), budget)
    assert end.positions == {A0: 40, A1: 40} and sizes.asked == []
    assert end.plan.bounded_by is BoundedBy.AVAILABLE and end.plan.bytes is None


def test_a_querys_own_trigger_intervals_ride_in_every_offset_it_writes():
    from backlog_source.enumerator.state import TriggerIntervals

    enumerator, client = make({"startingOffsets": "earliest", "backlog.lowLatencyInterval": "5 seconds"})
    start = enumerator.initial_offset()
    assert start.intervals == TriggerIntervals(None, 5_000)
    assert enumerator.latest_offset(start, ReadBudget()).intervals == TriggerIntervals(None, 5_000)
    plain, _ = make({"startingOffsets": "earliest"})
    assert plain.initial_offset().intervals is None


def test_the_phase_counts_its_catch_up_batches_their_planned_bytes_and_what_bounded_them(monkeypatch):
    """What the backlog.phase span reports (issue 35 item 5), kept in the checkpointed trace."""
    exported = []
    monkeypatch.setattr("backlog_source.core.tracing.exporter.export", lambda records: exported.extend(records))
    monkeypatch.setattr("backlog_source.core.tracing.exporter.enabled", lambda: True)  # tracing on: spans are built
    enumerator, _, _, budget = catching_up({"backlog.maxBytesPerTrigger": "2m"}, FakeRecordSizes(default=1_000.0))
    offset, plans = enumerator.initial_offset(), []
    while (end := enumerator.latest_offset(offset, budget)) != offset:  # to the first poll with nothing new
        plans.append(end.plan)
        offset = offset_codec.decode(offset_codec.encode(end))  # each through the checkpoint
    assert len(plans) >= 10  # 20 MB at 2 MiB a batch
    [phase] = [s for s in exported if s.name == names.PHASE]
    assert phase.attributes[names.CATCH_UP_BATCHES] == len(plans)
    assert phase.attributes[names.CATCH_UP_PLANNED_BYTES] == sum(p.bytes or 0 for p in plans)
    assert "bytes" in phase.attributes[names.CATCH_UP_BOUNDED_BY]
    assert phase.attributes[names.CATCH_UP_BUDGET_BYTES] == 2 * MIB


def catching_up_with_reports(sizes):
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest",
                              "backlog.minPollIntervalMs": "0", "backlog.maxBytesPerTrigger": "4m"})
    control = FakeControlTopic()
    client = FakeOffsetsClient(topics={"a": [(0, 1_000_000), (0, 1_000_000)]})
    enumerator = Enumerator(settings, client, control, clock=FakeClock(), record_sizes=sizes)
    return enumerator, control, ReadBudget.from_settings(settings)


def test_after_a_catch_up_batch_the_next_is_planned_from_what_its_readers_reported_not_a_sample():
    sizes = FakeRecordSizes(default=100.0)
    enumerator, control, budget = catching_up_with_reports(sizes)
    first = enumerator.latest_offset(enumerator.initial_offset(), budget)
    assert len(sizes.asked) == 1 and first.plan.bytes is not None  # the first catch-up batch: a sample
    # Its readers read 5,000 bytes per offset (the sample of 100 B was unlucky), a report per task.
    read = sum(first.positions.values())
    control.values += [RecordSizesReport(first.source_id, {"a": TopicSizes(5_000 * read // 2, read // 2)}).encode()] * 2
    control.values.append(RecordSizesReport("another-query", {"a": TopicSizes(1, 100_000)}).encode())
    second = enumerator.latest_offset(first, budget)
    assert len(sizes.asked) == 1  # no sample: the report covers every lagging bucket's topic
    read_second = sum(second.positions.values()) - read
    assert 4 * MIB // 5_000 - 2 <= read_second <= 4 * MIB // 5_000 + 2
    assert second.events_position == len(control.values)  # the reports are read once


@pytest.mark.parametrize("report", [
    lambda source_id: RecordSizesReport(source_id, {"a": TopicSizes(100 * 10, 10)}).encode(),  # too few records
    lambda source_id: RecordSizesReport(source_id, {"b": TopicSizes(100 * 5_000, 5_000)}).encode(),  # another topic
    lambda source_id: (  # this source's, unreadable
        '{"type":"RecordSizesReport","v":1,"source_id":"%s","topics":{"a":["1"]}}' % source_id).encode(),
])
def test_without_a_report_that_covers_the_topic_the_next_batch_samples_again(report):
    sizes = FakeRecordSizes(default=100.0)
    enumerator, control, budget = catching_up_with_reports(sizes)
    first = enumerator.latest_offset(enumerator.initial_offset(), budget)
    control.values.append(report(first.source_id))
    enumerator.latest_offset(first, budget)
    assert len(sizes.asked) == 2


def test_ten_thousand_partitions_cost_a_few_requests_per_batch_and_no_per_bucket_merges(monkeypatch):
    """100 topics of 100 partitions under subscribePattern, restarted on a checkpoint 20
    records behind in each: every batch is one listing, one description and one ListOffsets
    (not one per partition), at most one record-size measurement and one control-topic read;
    the boundaries are merged a few times per plan, never once per bucket (which was
    O(buckets^2): seconds at 10,000); the offset stays a small multiple of Spark's."""
    merges = []
    boundaries = BacklogState.boundaries.fget
    monkeypatch.setattr(BacklogState, "boundaries", property(lambda state: merges.append(1) or boundaries(state)))
    topics = {f"t{i:02d}": [(0, 20)] * 100 for i in range(100)}
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "^t", "backlog.minPollIntervalMs": "0",
                              "backlog.maxOffsetsPerTrigger": "100000"})
    client, control, sizes = FakeOffsetsClient(topics=topics), FakeControlTopic(), FakeRecordSizes(default=1_000.0)
    enumerator = Enumerator(settings, client, control, clock=FakeClock(), record_sizes=sizes)
    budget = ReadBudget.from_settings(settings)
    buckets = [Bucket(t, p) for t in topics for p in range(100)]
    start = offset_codec.decode(offset_codec.encode(SourceOffset("src", {b: 0 for b in buckets})))
    batches = 0
    while batches == 0 or start.processing_backlog:
        calls, reads, asked = len(client.calls), control.reads, len(sizes.asked)
        del merges[:]
        end = offset_codec.decode(offset_codec.encode(enumerator.latest_offset(start, budget)))
        # The log ends are sent for while the topics are listed, and that answer is taken.
        assert client.calls[calls:] == ["send_latest_offsets", "topic_names", "describe_topics", "latest_offsets"]
        assert control.reads - reads <= 1 and len(sizes.asked) - asked <= 1 and len(merges) <= 5
        splits = plan_splits(end.reads_since(start), settings)
        assert sum(s.records for s in splits) == sum(end.positions.values()) - sum(start.positions.values())
        spark_shape = len(json.dumps(to_nested(end.positions)))
        assert len(json.dumps(offset_codec.encode(end))) <= (5 if end.trace.open else 1.5) * spark_shape
        start, batches = end, batches + 1
    assert batches == 2 and set(start.positions.values()) == {20}
    calls = len(client.calls)
    assert enumerator.latest_offset(start, budget) is start  # caught up: nothing to read
    assert client.calls[calls:] == ["send_latest_offsets", "topic_names", "describe_topics", "latest_offsets"]
    assert client.sent_used == batches + 1


# -- without a control topic: refused by the cluster's ACLs, or backlog.eventsTopic=none (issue 48)

def without_control_topic(how):
    """A new query at the earliest offsets of 20,000 records of 1,000 bytes per partition, with
    a 4 MiB byte budget, whose control topic an ACL refuses (``refused``) or is off (``none``)."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest",
                              "backlog.minPollIntervalMs": "0", "backlog.maxBytesPerTrigger": "4m",
                              **({"backlog.eventsTopic": "none"} if how == "none" else {})})
    control = FakeControlTopic(refused=True) if how == "refused" else None
    client = FakeOffsetsClient(topics={"a": [(0, 20_000), (0, 20_000)]})
    sizes = FakeRecordSizes(default=1_000.0)
    enumerator = Enumerator(settings, client, control, clock=FakeClock(), record_sizes=sizes)
    return enumerator, control, sizes, ReadBudget.from_settings(settings)


@pytest.mark.parametrize("how", ["refused", "none"])
def test_without_a_control_topic_the_backlog_is_tracked_and_each_catch_up_batch_planned_from_a_sample(how):
    """Everything the driver decides works without the control topic: the boundaries, the
    backlog flag, the byte budget (each batch sampled where it starts, since no reader reports
    what it read), and the finish by committed position."""
    enumerator, control, sizes, budget = without_control_topic(how)
    client = enumerator._client
    offset = enumerator.initial_offset()
    assert offset.backlog.pending == {A0: 20_000, A1: 20_000} and offset.events_position == 0
    assert enumerator.publishes_events() is False
    starts, reads = [], []
    while (end := enumerator.latest_offset(offset, budget)) != offset:
        starts.append(dict(offset.positions))
        reads.append(sum(end.positions.values()) - sum(offset.positions.values()))
        offset = offset_codec.decode(offset_codec.encode(end))  # each through the checkpoint
    assert len(reads) >= 9 and all(read * 1_000 <= 4 * MIB + 2 * 1_000 for read in reads)  # 40 MB, 4 MiB a batch
    assert sizes.asked == starts[:len(sizes.asked)] and len(sizes.asked) >= len(reads) - 1
    assert offset.positions == {A0: 20_000, A1: 20_000} and not offset.processing_backlog
    client.append("a", 0, 1)  # the next batch carries how the last one's buckets left backlog
    after = enumerator.latest_offset(offset, budget)
    assert after.backlog.pending == {} and after.backlog.event_counts.counts == {"finished_by_position": 2}
    if control is not None:
        assert control.opened == 1 and control.reads == 0


def test_a_restarted_run_asks_once_whether_it_may_use_the_control_topic_and_plans_without_it():
    enumerator, _, _, budget = without_control_topic("none")
    first = enumerator.latest_offset(enumerator.initial_offset(), budget)
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "backlog.minPollIntervalMs": "0",
                              "backlog.maxBytesPerTrigger": "4m"})
    control = FakeControlTopic(refused=True)
    restarted = Enumerator(settings, FakeOffsetsClient(topics={"a": [(0, 20_000), (0, 20_000)]}), control,
                           clock=FakeClock(), record_sizes=FakeRecordSizes(default=1_000.0))
    second = restarted.latest_offset(offset_codec.decode(offset_codec.encode(first)), budget)
    assert second.processing_backlog and sum(second.positions.values()) > sum(first.positions.values())
    assert restarted.publishes_events() is False and control.opened == 1 and control.reads == 0
