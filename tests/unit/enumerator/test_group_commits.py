"""backlog.commitOffsetsToGroup: the group id rule, the option, the committer's thread (never
blocking, newest wins, nothing sent twice) and its failures (logged, rate-limited, never
raised, no secret), with fakes; Apache Kafka's own tool reads the group in
tests/integration/test_group_commits.py."""

from __future__ import annotations

import logging
import pickle
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import ClientRole
from backlog_source.core.settings import parse_options
from backlog_source.demo.topics import wait_for
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.enumerator import Enumerator
from backlog_source.enumerator.group_commits import (
    LOG_INTERVAL_S,
    RETRY_INTERVAL_S,
    GroupCommitError,
    GroupCommitter,
    KafkaGroupOffsets,
)
from backlog_source.enumerator.state import SnapshotState, SourceOffset
from backlog_source.stream_reader import BacklogStreamReader
from tests.fakes import (
    FakeAdmin,
    FakeClock,
    FakeControlTopic,
    FakeGroupOffsets,
    FakeOffsetsClient,
    FakeRecordSizes,
    failed,
    future,
)

A0, A1 = Bucket("a", 0), Bucket("a", 1)
BASE = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}
SECRET = "s3cr3t-pa55"
SASL = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": "ingest", "kafka.sasl.password": SECRET}


def committer(options=None, clock=None):
    fake = FakeGroupOffsets()
    kafka = parse_options({**BASE, **(options or {})}).kafka
    return GroupCommitter(kafka, 30_000, client_factory=fake, clock=clock or FakeClock()), fake


def committed(fake, count):
    wait_for(lambda: len(fake.commits) >= count, 30, f"{count} commit(s)")
    return fake.commits


# -- the group id and the option ------------------------------------------------------------


def test_the_group_is_the_prefix_and_the_source_id_stable_across_restarts_and_kafka_group_id_wins():
    assert parse_options(BASE).kafka.lag_group_id("f00d") == "spark-kafka-source-f00d"
    assert parse_options(BASE).kafka.lag_group_id("f00d") == parse_options(BASE).kafka.lag_group_id("f00d")
    assert parse_options({**BASE, "groupIdPrefix": "orders-ingest"}).kafka.lag_group_id("f00d") == "orders-ingest-f00d"
    assert parse_options({**BASE, "kafka.group.id": "orders"}).kafka.lag_group_id("f00d") == "orders"


def test_the_option_is_off_by_default_a_boolean_and_for_streams_only():
    assert parse_options(BASE).backlog_commit_offsets_to_group is False
    assert parse_options({**BASE, "backlog.commitoffsetstogroup": "TRUE"}).backlog_commit_offsets_to_group is True
    with pytest.raises(ConfigError, match="option 'backlog.commitOffsetsToGroup' must be 'true' or 'false'"):
        parse_options({**BASE, "backlog.commitOffsetsToGroup": "yes"})
    with pytest.raises(ConfigError, match="'backlog.commitOffsetsToGroup' is for streaming queries"):
        parse_options({**BASE, "backlog.commitOffsetsToGroup": "true"}, read="batch")


def test_the_group_offsets_client_is_an_admin_client_that_names_no_group():
    config = parse_options({**BASE, "kafka.group.id": "orders"}).kafka.librdkafka(ClientRole.GROUP_OFFSETS)
    assert config["client.id"] == "backlog-source-group-offsets" and "group.id" not in config


# -- the committer ---------------------------------------------------------------------------


def test_an_offer_is_committed_in_the_background_once_and_close_ends_the_client():
    group, fake = committer()
    offset = SourceOffset("src1", {A0: 10, A1: 20})
    group.offer(offset)
    assert committed(fake, 1) == [("spark-kafka-source-src1", {A0: 10, A1: 20})]
    group.offer(offset)  # Spark's commit(end) after latestOffset(start) offered the same end
    group.offer(SourceOffset("src1", {A0: 15, A1: 20}))
    assert committed(fake, 2)[1] == ("spark-kafka-source-src1", {A0: 15, A1: 20})
    assert group.close() is True
    assert fake.closed and len(fake.commits) == 2 and fake.created == 1


def test_offers_never_wait_for_kafka_and_the_newest_wins_over_one_not_sent_yet():
    group, fake = committer()
    fake.hold.clear()
    group.offer(SourceOffset("src1", {A0: 1}))
    wait_for(fake.entered.is_set, 30, "the first commit in flight")
    for end in (2, 3, 4):
        group.offer(SourceOffset("src1", {A0: end}))  # returns although the commit in flight hangs
    fake.hold.set()
    assert group.close() is True  # sends what is pending, then ends
    assert [positions for _, positions in fake.commits] == [{A0: 1}, {A0: 4}]


def test_offsets_in_flight_are_not_sent_again():
    group, fake = committer()
    fake.hold.clear()
    group.offer(SourceOffset("src1", {A0: 1}))
    wait_for(fake.entered.is_set, 30, "the commit in flight")
    group.offer(SourceOffset("src1", {A0: 1}))  # commit(end) right after latestOffset(start) offered it
    fake.hold.set()
    assert group.close() is True
    assert fake.commits == [("spark-kafka-source-src1", {A0: 1})]


def test_a_bucket_whose_snapshot_is_unread_is_not_committed_and_nothing_is_sent_without_positions():
    group, fake = committer()
    snapshot = SnapshotState("/snap", "id", pending={A1: ("part-0.parquet",)})
    group.offer(SourceOffset("src1", {A1: 500}, snapshot=snapshot))
    group.offer(SourceOffset("src1", {A0: 7, A1: 500}, snapshot=snapshot))
    assert group.close() is True
    assert fake.commits == [("spark-kafka-source-src1", {A0: 7})]


def test_a_failure_is_logged_once_rate_limited_retried_later_and_never_raised(caplog):
    clock = FakeClock()
    group, fake = committer(clock=clock)
    fake.fail = GroupCommitError("could not commit offsets to consumer group 'g': refused", KafkaError.GROUP_AUTHORIZATION_FAILED)
    offset = SourceOffset("src1", {A0: 10})
    with caplog.at_level(logging.DEBUG, logger="backlog_source.enumerator.group_commits"):
        group.offer(offset)
        wait_for(lambda: group._failed is not None, 30, "the first failure")
        group.offer(offset)  # an idle query offers the same offsets at every trigger: not sent again yet
        group.offer(SourceOffset("src1", {A0: 11}))  # the next batch's are
        wait_for(lambda: group._failed is not None and group._failed[0].positions == {A0: 11}, 30, "a second failure")
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "refused" in warnings[0].getMessage()
        clock.advance(max(LOG_INTERVAL_S, RETRY_INTERVAL_S) + 1)
        group.offer(SourceOffset("src1", {A0: 11}))  # retried once the interval passed
        wait_for(lambda: len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2, 30, "a second warning")
        assert "1 more time(s) since the last warning" in caplog.records[-1].getMessage()
        fake.fail = None
        group.offer(SourceOffset("src1", {A0: 12}))
        committed(fake, 1)
        wait_for(lambda: any("again, after 3 failed attempt(s)" in r.getMessage() for r in caplog.records), 30,
                 "the line saying commits work again")
    assert group.close() is True


def test_an_unexpected_error_on_the_thread_is_logged_redacted_and_the_thread_goes_on(caplog):
    group, fake = committer(SASL)
    fake.fail = RuntimeError(f"boom with sasl.password={SECRET}")
    with caplog.at_level(logging.WARNING, logger="backlog_source.enumerator.group_commits"):
        group.offer(SourceOffset("src1", {A0: 1}))
        wait_for(lambda: caplog.records, 30, "the warning")
    assert SECRET not in caplog.text and "boom" in caplog.text
    fake.fail = None
    group.offer(SourceOffset("src1", {A0: 2}))
    assert group.close() is True and fake.commits == [("spark-kafka-source-src1", {A0: 2})]


# -- the Kafka adapter -------------------------------------------------------------------------


def adapter(answer, options=None):
    admin = FakeAdmin([answer])
    return KafkaGroupOffsets(parse_options({**BASE, **SASL, **(options or {})}).kafka, admin_factory=admin), admin


def test_the_adapter_sends_one_offset_commit_for_the_group_from_outside_it():
    sent = []

    def answer(requests):
        sent.extend(requests)
        return {"g": future(requests[0])}

    client, admin = adapter(answer)
    client.commit("g", {A1: 20, A0: 10}, 5.0)
    [(what, timeout)] = admin.requests
    assert what == "alter_consumer_group_offsets" and timeout == pytest.approx(5.0, abs=0.5)
    assert sent[0].group_id == "g"
    assert [(tp.topic, tp.partition, tp.offset) for tp in sent[0].topic_partitions] == [("a", 0, 10), ("a", 1, 20)]
    assert admin.config["client.id"] == "backlog-source-group-offsets" and "group.id" not in admin.config


@pytest.mark.parametrize("code, expected", [
    (KafkaError.GROUP_AUTHORIZATION_FAILED, ["authorization refused for the consumer group", "READ",
                                             "'spark-kafka-source' (option 'groupIdPrefix')"]),
    (KafkaError.UNKNOWN_MEMBER_ID, ["the group has active members", "kafka.group.id"]),
    (KafkaError._TIMED_OUT, ["Kafka at h:1 did not take them"]),
])
def test_a_refusal_says_why_first_names_the_group_and_never_a_secret(code, expected):
    client, _ = adapter(lambda requests: {"g": future(error=failed(code, f"refused for {SECRET}"))})
    with pytest.raises(GroupCommitError) as raised:
        client.commit("g", {A0: 1}, 5.0)
    message = str(raised.value)
    assert message.startswith("could not commit offsets to consumer group 'g' (backlog.commitOffsetsToGroup")
    assert all(words in message for words in expected), message
    assert SECRET not in message and raised.value.code == code


def test_a_coordinator_still_loading_is_asked_again_within_the_timeout():
    clock = FakeClock()
    answers = [{"g": future(error=failed(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))}] * 2
    admin = FakeAdmin([lambda requests, a=a: a for a in answers] + [lambda requests: {"g": future(requests[0])}])
    client = KafkaGroupOffsets(parse_options(BASE).kafka, admin_factory=admin, clock=clock, sleep=clock.sleep)
    client.commit("g", {A0: 1}, 5.0)
    assert len(admin.requests) == 3 and clock.slept == [0.1, 0.2]
    admin.script = [lambda requests: {"g": future(error=failed(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))}] * 10
    clock.slept.clear()
    with pytest.raises(GroupCommitError, match="did not take them"):
        client.commit("g", {A0: 1}, 2.0)  # until the timeout, then told
    assert clock.slept == [0.1, 0.2, 0.4, 0.8]  # a fifth wait would end past the 2 s


def test_a_partition_refused_by_a_topic_acl_names_the_topic():
    def answer(requests):
        refused = SimpleNamespace(topic="a", partition=0, offset=1,
                                  error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorized"))
        return {"g": future(SimpleNamespace(group_id="g", topic_partitions=[refused]))}

    client, _ = adapter(answer)
    with pytest.raises(GroupCommitError, match="authorization refused for topic 'a'"):
        client.commit("g", {A0: 1}, 5.0)


# -- the stream reader's hooks ------------------------------------------------------------------


def test_the_reader_commits_ends_of_committed_batches_never_the_initial_offset():
    settings = parse_options({**BASE, "startingOffsets": "earliest", "backlog.commitOffsetsToGroup": "true",
                              "backlog.minPollIntervalMs": "0"})
    reader = BacklogStreamReader(settings)
    reader._enumerator = Enumerator(settings, FakeOffsetsClient(topics={"a": [(0, 100)]}), FakeControlTopic(),
                                    clock=FakeClock(), record_sizes=FakeRecordSizes())
    fake = FakeGroupOffsets()
    reader._group_commits = GroupCommitter(settings.kafka, 30_000, client_factory=fake)
    limit = reader.getDefaultReadLimit()
    initial = reader.initialOffset()
    end = reader.latestOffset(initial, limit)  # batch 0 planned from the initial offset: nothing committed
    assert offset_codec.decode(end).positions == {A0: 100}
    reader.commit(end)  # Spark committed batch 0 (it says so when it writes batch 1)
    reader.latestOffset(end, limit)  # the next plan starts at batch 0's end: the same, not sent again
    reader.stop()
    source_id = offset_codec.decode(initial).source_id
    assert fake.commits == [(f"spark-kafka-source-{source_id}", {A0: 100})]


def test_without_the_option_nothing_is_committed():
    reader = BacklogStreamReader(parse_options(BASE))
    reader.commit(offset_codec.encode(SourceOffset("src1", {A0: 1})))
    assert reader._group_commits is None


def test_executors_never_get_the_committer():
    settings = parse_options({**BASE, "backlog.commitOffsetsToGroup": "true"})
    reader = BacklogStreamReader(settings)
    reader._group_commits = GroupCommitter(settings.kafka, 30_000, client_factory=FakeGroupOffsets())
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._group_commits is None and copy.settings is None
    reader.stop()
