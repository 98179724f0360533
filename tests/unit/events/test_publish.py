"""Publishing control events through the worker's kept producers, with fake producers: a
producer is kept only after an acknowledged publish, and every failure closes it."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException

from backlog_source.core.settings import parse_options
from backlog_source.events.control_topic import ProducerPool, publish
from backlog_source.events.finish_event import BacklogFinishEvent
from backlog_source.events.sizes_report import RecordSizesReport
from tests.fakes import FakeProducer

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
