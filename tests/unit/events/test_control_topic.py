"""The control topic without a broker: what ControlTopicReader reads, that it never keeps a
consumer, how it gives up; ControlTopic's checks (created once, re-established when deleted
or re-created); and publishing through the worker's kept producers (a producer is kept only
after an acknowledged publish, and every failure closes it). Consumers, producers and the
admin client are scripted fakes; the clock too."""

from __future__ import annotations

import logging
import pickle
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from backlog_source.core.errors import ControlTopicError
from backlog_source.core.kafka_config import KafkaClientConfig
from backlog_source.core.kafka_refusals import AccessRefusedError, Refusal, access_refused
from backlog_source.core.settings import parse_options
from backlog_source.events.control_topic import (
    ControlMessages,
    ControlTopic,
    ControlTopicReader,
    ProducerPool,
    TopicNotCreatedError,
    publish,
)
from backlog_source.events.finish_event import BacklogFinishEvent
from backlog_source.events.sizes_report import RecordSizesReport
from tests.fakes import (
    FakeClock,
    FakeConsumer,
    FakeOffsetsClient,
    FakeProducer,
    Msg,
    RecordingControlReader,
    eof,
)

SECRET = "hunter2-secret"
KAFKA = KafkaClientConfig(bootstrap_servers="h:1", secrets={"sasl.password": SECRET})
TOPIC = "_backlog_events"


def message(offset, value=None):
    return Msg(offset, value=value or f"m{offset}".encode(), topic=TOPIC)


def reader(consumer, clock=None, timeout_ms=1_000):
    clock = clock or FakeClock()
    if consumer.clock is None:
        consumer.clock = clock
    return ControlTopicReader(KAFKA, TOPIC, timeout_ms, consumer_factory=consumer, clock=clock)


def test_reads_from_the_position_to_the_log_end_seen_when_asked_then_closes_its_consumer():
    consumer = FakeConsumer([[message(3), message(4)], [message(5), message(6)], [message(7)]], watermarks=(0, 6))
    read = reader(consumer).read_from(3)
    # Offset 6 came in the same fetch as 5 and is kept (the consumer is past it); 7 is not asked for.
    assert read.values == [b"m3", b"m4", b"m5", b"m6"] and read.next_position == 7
    assert consumer.assigned == [[(TOPIC, 0, 3)]]
    assert consumer.closed  # a consumer kept on a topic that is then deleted can crash the process
    assert consumer.config["client.id"] == "backlog-source-events-reader" and consumer.config["enable.auto.commit"] is False


def test_it_asks_for_no_more_messages_than_remain_so_it_returns_when_the_last_one_arrives():
    # consume(n, wait) returns at n messages or at the end of its wait: asking for more than
    # the log holds would wait out every call.
    consumer = FakeConsumer([[message(3), message(4)], [message(5)]], watermarks=(0, 6))
    read = reader(consumer).read_from(3)
    assert read.next_position == 6
    assert consumer.asked == [3, 1]


def test_every_read_uses_its_own_consumer():
    consumer = FakeConsumer([[message(0), message(1)], [message(2)]], watermarks=(0, 2))
    control = reader(consumer)
    assert control.read_from(0).next_position == 2
    consumer.watermarks = (0, 3)
    read = control.read_from(2)
    assert read.values == [b"m2"] and read.next_position == 3
    assert consumer.created == 2 and consumer.assigned == [[(TOPIC, 0, 0)], [(TOPIC, 0, 2)]]


def test_nothing_new_is_answered_without_fetching():
    consumer = FakeConsumer([], watermarks=(0, 5))
    read = reader(consumer).read_from(5)
    assert read.values == [] and read.next_position == 5 and consumer.assigned == [] and consumer.closed


def test_a_position_past_the_log_end_reads_the_re_created_topic_from_its_start(caplog):
    consumer = FakeConsumer([[message(0)]], watermarks=(0, 1))
    with caplog.at_level(logging.WARNING):
        read = reader(consumer).read_from(40)
    assert read.values == [b"m0"] and read.next_position == 1
    assert "re-created" in caplog.text


def test_a_trimmed_topic_is_read_from_what_is_left():
    consumer = FakeConsumer([[message(7)]], watermarks=(7, 8))
    assert reader(consumer).read_from(2).values == [b"m7"]
    assert consumer.assigned == [[(TOPIC, 0, 7)]]


def test_end_of_partition_moves_the_position_and_errors_are_logged_redacted(caplog):
    consumer = FakeConsumer([[Msg(0, error=KafkaError(KafkaError._TRANSPORT, f"pw {SECRET}"), topic=TOPIC)],
                             [eof(2, topic=TOPIC)]], watermarks=(0, 2))
    with caplog.at_level(logging.WARNING):
        read = reader(consumer).read_from(0)
    assert read.values == [] and read.next_position == 2
    assert "reading the control topic" in caplog.text and SECRET not in caplog.text


def test_gives_up_quietly_at_the_timeout_and_the_next_read_continues():
    clock = FakeClock()
    consumer = FakeConsumer([[message(0)]], watermarks=(0, 3), clock=clock)  # offsets 1, 2 never arrive
    control = reader(consumer, clock, timeout_ms=1_000)
    read = control.read_from(0)
    assert read.values == [b"m0"] and read.next_position == 1
    consumer.script = [[message(1), message(2)]]
    assert control.read_from(1).values == [b"m1", b"m2"]


def test_an_unanswered_watermark_request_returns_nothing_and_keeps_the_position(caplog):
    consumer = FakeConsumer([], watermarks=KafkaException(KafkaError(KafkaError._TRANSPORT, f"auth {SECRET}")))
    with caplog.at_level(logging.WARNING):
        read = reader(consumer).read_from(4)
    assert read.values == [] and read.next_position == 4 and consumer.closed
    assert SECRET not in caplog.text and "***" in caplog.text


def test_an_invalid_watermark_answer_is_no_answer_and_keeps_the_position(caplog):
    """-1001 (OFFSET_INVALID, which librdkafka gives for some timed-out requests) read as a log
    end would look like a re-created topic and make -1001 the next position."""
    consumer = FakeConsumer([], watermarks=(-1001, -1001))
    with caplog.at_level(logging.WARNING):
        read = reader(consumer).read_from(4)
    assert read.values == [] and read.next_position == 4 and consumer.assigned == []
    assert "no valid offsets (answered -1001, -1001)" in caplog.text


# -- the control topic as the enumerator sees it

SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "backlog.eventsTopic": "_events"})


def control_topic(**topics):
    client = FakeOffsetsClient(topics={"a": [(0, 10)], **topics})
    reader = RecordingControlReader([b"e0", b"e1"])
    return ControlTopic(SETTINGS, client, reader), client, reader


def test_open_creates_a_missing_topic_with_one_partition_and_starts_at_its_end():
    control, client, _ = control_topic()
    assert control.open() == 0
    assert client.created == ["_events"] and client.topics["_events"] == [(0, 0)]


def test_open_keeps_an_existing_topic_and_skips_what_was_written_before():
    control, client, _ = control_topic(_events=[(0, 7)])
    assert control.open() == 7 and client.created == []


def test_read_checks_the_topic_then_reads_from_the_position():
    control, _, reader = control_topic(_events=[(0, 2)])
    control.open()
    assert control.read_from(1).values == [b"e1"]
    assert reader.reads == [1]


def test_a_deleted_topic_is_re_created_and_yields_nothing(caplog):
    control, client, reader = control_topic(_events=[(0, 2)])
    control.open()
    client.delete("_events")
    with caplog.at_level(logging.WARNING):
        read = control.read_from(2)
    assert read.values == [] and read.next_position == 0
    assert "_events" in client.topics and reader.reads == []
    assert "backlog.eventsTopic" in caplog.text and "deleted" in caplog.text


def test_the_log_end_of_a_deleted_topic_re_creates_it():
    """The batch that carries a bucket to its boundary asks the log end before any read."""
    control, client, reader = control_topic(_events=[(0, 2)])
    control.open()
    client.delete("_events")
    assert control.log_end() == 0
    assert client.topics["_events"] == [(0, 0)]


def test_a_re_created_topic_is_read_from_its_start(caplog):
    control, client, reader = control_topic(_events=[(0, 2)])
    control.open()
    client.topic_ids["_events"] = "another-id"
    with caplog.at_level(logging.WARNING):
        control.read_from(2)
    assert reader.reads == [0] and "re-created" in caplog.text
    control.read_from(1)  # the new identity is the one checked from now on
    assert reader.reads == [0, 1]


def test_a_topic_with_several_partitions_is_used_but_warned_about(caplog):
    control, _, reader = control_topic(_events=[(0, 2), (0, 0)])
    with caplog.at_level(logging.WARNING):
        control.open()
    assert "partition 0 only" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        control.read_from(0)
    assert reader.reads == [0] and "partition 0 only" not in caplog.text  # said once, not at every read


# -- refused by Kafka's ACLs: the run goes on without the control topic, and says so once

SECURED = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "backlog.eventsTopic": "_events",
                         "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
                         "kafka.sasl.username": "ingest", "kafka.sasl.password": SECRET})
CONTROL_TOPIC_ACLS = ("Grant principal User:ingest DESCRIBE, READ and WRITE on topic '_events', and CREATE on it "
                      "unless it is created beforehand (1 partition)")


class RefusingClient(FakeOffsetsClient):
    """A cluster whose ACLs refuse this client: every request raises ``error``."""

    def __init__(self, error: AccessRefusedError) -> None:
        super().__init__(topics={"a": [(0, 10)]})
        self.error = error

    def ensure_topic(self, topic, partitions):
        self.calls.append("ensure_topic")
        raise self.error

    def topic_identity(self, topic):
        self.calls.append("topic_identity")
        raise self.error


def refused(refusal=Refusal.TOPIC_AUTHORIZATION, topic="_events", operation="DESCRIBE"):
    return access_refused(refusal, SECURED.kafka, f"Broker: Topic authorization failed {SECRET}", topic=topic,
                          operation=operation)


class UncreatableClient(FakeOffsetsClient):
    """A cluster that refuses to create any topic (a policy, too few brokers)."""

    def ensure_topic(self, topic, partitions):
        if topic not in self.topics:
            raise TopicNotCreatedError(topic, "Broker: Policy violation")


def test_a_control_topic_kafka_will_not_create_is_named_with_its_option_at_open_and_later():
    client = UncreatableClient(topics={"a": [(0, 10)]})
    for step in (ControlTopic(SECURED, client, RecordingControlReader()).open,
                 lambda: ControlTopic(SECURED, client, RecordingControlReader()).read_from(0)):
        with pytest.raises(ControlTopicError) as raised:
            step()
        assert str(raised.value) == (
            "cannot create the control topic '_events' (option 'backlog.eventsTopic'): Broker: Policy violation. "
            "Create it beforehand with 1 partition, point 'backlog.eventsTopic' at a topic that exists, or set it "
            "to 'none' to run without a control topic")


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def assert_runs_without(control: ControlTopic, client: FakeOffsetsClient, caplog, operation: str) -> None:
    """``control`` was refused: one warning naming the topic, the refused operation, every ACL
    and what they add, no secret; then no request and no warning more, whatever is asked."""
    (warning,) = warnings_of(caplog)
    assert warning.startswith("authorization refused for topic '_events', the control topic (option "
                              f"'backlog.eventsTopic'): Kafka at h:1 does not allow principal User:ingest {operation} "
                              "on it"), warning
    assert "The query runs without its control topic" in warning and "BacklogFinishEvent" in warning
    assert "sample of records the driver reads" in warning and CONTROL_TOPIC_ACLS in warning
    assert "set 'backlog.eventsTopic' to 'none'" in warning
    assert SECRET not in warning and "subscribed" not in warning
    asked = list(client.calls)
    reader = control._reader
    assert control.usable is False and control.log_end() is None
    assert control.read_from(7) == ControlMessages([], 7)
    assert client.calls == asked and reader.reads == [] and len(warnings_of(caplog)) == 1


@pytest.mark.parametrize("operation", ["DESCRIBE", "CREATE"])
def test_an_acl_refusing_the_control_topic_lets_the_run_go_on_without_it_saying_so_once(operation, caplog):
    """Issue 48: a principal with what ``format("kafka")`` needs (READ and DESCRIBE on its
    topic) and nothing on the control topic runs the query; it failed at start."""
    client = RefusingClient(refused(operation=operation))
    control = ControlTopic(SECURED, client, RecordingControlReader())
    with caplog.at_level(logging.WARNING):
        assert control.open() is None
        assert_runs_without(control, client, caplog, operation)


@pytest.mark.parametrize("allowed, missing", [({"DESCRIBE", "READ"}, "WRITE"), ({"DESCRIBE", "WRITE"}, "READ"),
                                              ({"DESCRIBE"}, "READ and WRITE")])
def test_a_topic_the_acls_let_this_client_describe_but_not_read_or_write_is_not_used(allowed, missing, caplog):
    """Kafka says which operations its ACLs allow (KIP-430): a topic readers could not write
    to, or the driver not read, is found at open, before any task tries."""
    client = FakeOffsetsClient(topics={"a": [(0, 10)], "_events": [(0, 3)]}, operations={"_events": frozenset(allowed)})
    control = ControlTopic(SECURED, client, RecordingControlReader())
    with caplog.at_level(logging.WARNING):
        assert control.open() is None
        assert_runs_without(control, client, caplog, missing)


@pytest.mark.parametrize("operations", [None, frozenset(), frozenset({"DESCRIBE", "READ", "WRITE", "CREATE"})])
def test_a_topic_the_acls_allow_or_a_broker_that_does_not_say_is_used(operations, caplog):
    """None: a broker older than KIP-430; empty: one that fills in nothing (DESCRIBE itself,
    just used, is missing from it)."""
    client = FakeOffsetsClient(topics={"a": [(0, 10)], "_events": [(0, 3)]},
                               operations={} if operations is None else {"_events": operations})
    control = ControlTopic(SECURED, client, RecordingControlReader([b"e0", b"e1", b"e2"]))
    with caplog.at_level(logging.WARNING):
        assert control.open() == 3 and control.usable
        assert control.read_from(1).values == [b"e1", b"e2"]
    assert warnings_of(caplog) == []


def test_usable_opens_the_topic_on_the_first_question_of_a_restarted_run(caplog):
    """A restart plans from its checkpoint without open(): the first question decides."""
    client = RefusingClient(refused())
    control = ControlTopic(SECURED, client, RecordingControlReader())
    with caplog.at_level(logging.WARNING):
        assert control.usable is False
        assert_runs_without(control, client, caplog, "DESCRIBE")
    assert client.calls.count("ensure_topic") == 1


def test_a_refusal_without_a_topic_name_met_on_the_control_topic_is_one_on_it(caplog):
    client = RefusingClient(refused(topic=None))
    control = ControlTopic(SECURED, client, RecordingControlReader())
    with caplog.at_level(logging.WARNING):
        assert control.open() is None
        assert_runs_without(control, client, caplog, "DESCRIBE")


def test_the_control_topic_refused_later_is_given_up_for_the_rest_of_the_run(caplog):
    client = FakeOffsetsClient(topics={"a": [(0, 10)]})
    control = ControlTopic(SECURED, client, RecordingControlReader())
    assert control.open() == 0
    refusing = RefusingClient(refused())
    control._client = refusing  # the ACL removed while the query runs
    with caplog.at_level(logging.WARNING):
        assert control.log_end() is None
        assert_runs_without(control, refusing, caplog, "DESCRIBE")


def test_backlog_events_topic_none_is_no_control_topic_and_builds_none():
    off = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "backlog.eventsTopic": "None"})
    assert off.backlog_events_topic is None and off.reader_config.events_topic is None
    with pytest.raises(ValueError, match="'none'"):
        ControlTopic(off, FakeOffsetsClient(), RecordingControlReader())


@pytest.mark.parametrize("error", [refused(Refusal.AUTHENTICATION, topic=None, operation=None),
                                   refused(Refusal.UNTRUSTED_CERTIFICATE, topic=None, operation=None),
                                   refused(topic="orders")])
def test_a_refusal_that_is_not_the_control_topics_keeps_its_own_cause(error):
    """A wrong password or CA met first on the control topic is a wrong password or CA."""
    control = ControlTopic(SECURED, RefusingClient(error), RecordingControlReader())
    with pytest.raises(AccessRefusedError) as raised:
        control.open()
    assert raised.value is error


def test_a_reader_refused_read_access_warns_with_the_control_topics_acls(caplog):
    consumer = FakeConsumer([[Msg(0, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, f"no {SECRET}"),
                                  topic=TOPIC)]], watermarks=(0, 2))
    control_reader = ControlTopicReader(SECURED.kafka, TOPIC, 1_000, consumer_factory=consumer, clock=FakeClock())
    with caplog.at_level(logging.WARNING):
        read = control_reader.read_from(0)
    assert read.values == [] and read.next_position == 0 and consumer.closed
    assert f"authorization refused for topic {TOPIC!r}, the control topic" in caplog.text
    assert "READ on it" in caplog.text and "backlog.eventsTopic" in caplog.text and SECRET not in caplog.text


# Publishing: publish() through a ProducerPool.

CONFIG = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.sasl.password": "s3cret",
                        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
                        "kafka.sasl.username": "u"}).reader_config
FINISH = BacklogFinishEvent(source_id="src", topic="t", partition=0, boundary_offset=5, reached_offset=5,
                            emitted_at_ms=1)
SIZES = RecordSizesReport(source_id="src")


class Producers:
    """A factory handing out the given fake producers in order."""

    def __init__(self, *producers: FakeProducer) -> None:
        self.waiting = list(producers)
        self.made: list[FakeProducer] = []

    def __call__(self, config: dict) -> FakeProducer:
        producer = self.waiting.pop(0)(config)
        self.made.append(producer)
        return producer


def test_an_acknowledged_publish_keeps_its_producer_for_the_next_event():
    first = FakeProducer()
    pool = ProducerPool(Producers(first, FakeProducer()))
    assert publish(CONFIG, FINISH, pool) and publish(CONFIG, FINISH, pool)
    assert (pool.created, pool.reused) == (1, 1) and len(first.produced) == 2 and not first.closed
    assert first.config["message.timeout.ms"] == 30_000  # the event's own, below kafkaConsumer.pollTimeoutMs
    assert first.config["allow.auto.create.topics"] is False


def test_each_kind_of_event_has_its_own_producer():
    # A size report waits at most 5 s, a finish event up to 30 s: a producer's settings.
    config = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                            "kafkaConsumer.pollTimeoutMs": "60000"}).reader_config
    producers = Producers(FakeProducer(), FakeProducer())
    pool = ProducerPool(producers)
    assert publish(config, FINISH, pool) and publish(config, SIZES, pool)
    assert [p.config["message.timeout.ms"] for p in producers.made] == [30_000, 5_000]
    assert len(pool) == 2


def test_a_failed_delivery_closes_the_producer_and_the_next_publish_makes_a_new_one(caplog):
    failed = FakeProducer([KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)])
    fresh = FakeProducer()
    pool = ProducerPool(Producers(failed, fresh))
    with caplog.at_level(logging.WARNING):
        assert not publish(CONFIG, FINISH, pool)
    assert failed.purged and failed.closed and len(pool) == 0
    assert publish(CONFIG, FINISH, pool) and pool.created == 2
    assert "s3cret" not in caplog.text


def test_an_unacknowledged_publish_is_purged_and_closed_without_waiting():
    lost = FakeProducer(["lost"])
    pool = ProducerPool(Producers(lost))
    assert not publish(CONFIG, FINISH, pool)
    assert lost.purged and lost.closed and len(lost) == 0 and len(pool) == 0


def test_a_produce_that_raises_closes_the_producer_and_does_not_fail_the_read(caplog):
    refused = FakeProducer([KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "s3cret gone"))])
    pool = ProducerPool(Producers(refused))
    with caplog.at_level(logging.WARNING):
        assert not publish(CONFIG, FINISH, pool)
    assert refused.closed and len(pool) == 0 and "could not publish" in caplog.text


def test_a_producer_with_messages_left_is_not_kept():
    producer = FakeProducer()
    producer.queued.append(("lost", None))
    pool = ProducerPool(Producers(producer))
    pool.give_back("k", producer)
    assert producer.closed and len(pool) == 0


def test_no_control_topic_publishes_nothing_and_makes_no_producer():
    config = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                            "backlog.enabled": "false"}).reader_config
    pool = ProducerPool(Producers())
    assert not publish(config, FINISH, pool) and pool.created == 0


def test_a_write_an_acl_refuses_is_logged_with_the_control_topics_acls(caplog):
    """The read goes on (a lost event costs attribution, never correctness), and the warning
    says which ACL the control topic lacks."""
    config = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.sasl.username": "u",
                            "kafka.sasl.password": "s3cret"}).reader_config
    # KafkaError itself cannot be an outcome: FakeProducer compares it with "lost", which raises
    # TypeError; an object with KafkaError's two methods that publish() reads stands in.
    denied = FakeProducer([SimpleNamespace(code=lambda: KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                           str=lambda: "Broker: Topic authorization failed")])
    with caplog.at_level(logging.WARNING):
        assert not publish(config, FINISH, ProducerPool(Producers(denied)))
    assert "authorization refused for topic '_backlog_events', the control topic (option 'backlog.eventsTopic')" \
        in caplog.text
    assert "allow principal User:u WRITE on it" in caplog.text and "s3cret" not in caplog.text


def test_a_topic_not_created_pickles_with_its_topic_and_reason():
    again = pickle.loads(pickle.dumps(TopicNotCreatedError("_events", "Broker: Policy violation")))
    assert (again.topic, again.detail, str(again)) == ("_events", "Broker: Policy violation",
                                                       "cannot create topic '_events': Broker: Policy violation")
