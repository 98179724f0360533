"""Reads over offsets without a record, on Apache Kafka: transaction commit markers leave
such offsets, so a range [start, log end) of a transactional partition has fewer records than
offsets, and compaction removes records from a topic's older segments. The read must end on
the partition's end-of-partition event or the first record past its range, not by waiting for
records that do not exist (it waited a whole second per read)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer

from backlog_source.core.settings import parse_options
from backlog_source.demo.topics import create_topic, produce
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from tests.integration.differential import both
from tests.integration.helpers import log_end_offsets, make_topic, partition_records, wait_for

pytestmark = pytest.mark.integration


class RecordingConsumer:
    """A real consumer whose consume() calls are recorded: (messages asked, wait given,
    messages returned, whether an end-of-partition event was among them)."""

    def __init__(self, config: dict) -> None:
        self._consumer = Consumer(config)
        self.calls: list[tuple[int, float, int, bool]] = []

    def consume(self, num, timeout):
        messages = self._consumer.consume(num, timeout)
        eof = any(m.error() is not None and m.error().code() == -191 for m in messages)  # _PARTITION_EOF
        self.calls.append((num, timeout, len(messages), eof))
        return messages

    def __getattr__(self, name):
        return getattr(self._consumer, name)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_range_ending_at_a_log_end_after_commit_markers_ends_on_its_end_of_partition_event(broker, topic_name,
                                                                                            isolation):
    make_topic(broker, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{topic_name}"})
    producer.init_transactions(30)
    for t in range(3):
        producer.begin_transaction()
        for n in range(10):
            producer.produce(topic_name, value=f"{t}-{n}".encode(), partition=0)
        producer.commit_transaction(30)
    end = log_end_offsets(broker, topic_name)[0]
    assert end == 33  # 30 records and 3 commit markers

    made: list[RecordingConsumer] = []

    config = parse_options({"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic_name,
                            "kafka.isolation.level": isolation, "kafkaConsumer.pollTimeoutMs": "60000"}).reader_config
    offsets = recorded_read(KafkaRange(topic_name, 0, 0, end), config, made)
    assert offsets == [o for o in range(33) if o not in (10, 21, 32)]
    calls = made[0].calls
    # The read ended with the call that delivered the end-of-partition event, and that call
    # was given less than the longest wait: a read that asked for as many messages as the
    # range has offsets waited each call out, 1 s, since three of them never come.
    _, wait, _, eof = calls[-1]
    assert eof, calls
    assert wait < 1.0, calls


def recorded_read(r: KafkaRange, config, made: list[RecordingConsumer]) -> list[int]:
    """The offsets ``read_split`` delivers for ``r``, through a fresh recording consumer."""

    def factory(consumer_config):
        made.append(RecordingConsumer(consumer_config))
        return made[-1]

    batches = list(read_split(KafkaSplit((r,)), config, pool=ConsumerPool(factory, capacity=0)))
    return [o for b in batches for o in b.column("offset").to_pylist()]


def surviving_offsets(broker, topic: str, end: int) -> list[int]:
    """The offsets below ``end`` that still hold a record, read by a plain consumer."""
    return [m.offset() for m in partition_records(broker, topic) if m.offset() < end]


def test_ranges_over_a_compacted_topic_end_on_the_first_record_past_them_and_read_what_spark_reads(spark, broker,
                                                                                                   topic_name):
    """A compacted topic whose cleaned segment lost offsets 0..18 (20 records of key ``a``,
    then records of keys never repeated until the log cleaner has run, so no later cleaning
    changes what the reads below see): a range ending inside that gap holds no
    record, and one over the whole log has gaps; both reads end without waiting for offsets
    that do not exist, and a batch read of the topic returns what Spark's batch read does."""
    create_topic(broker.bootstrap_servers, topic_name, 1, {
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "0"})
    produce(broker.bootstrap_servers, topic_name, [(0, b"a", f"a-{n}".encode()) for n in range(20)])
    written = iter(range(10_000))

    def compacted() -> bool:
        # Every call appends a record: a segment rolls only on an append after segment.ms,
        # and the cleaner cleans rolled segments only (every log.cleaner.backoff.ms: 15 s by
        # default, 500 ms on the tests' broker, tests/conftest.py).
        n = next(written)
        produce(broker.bootstrap_servers, topic_name, [(0, f"b-{n}".encode(), f"b-{n}".encode())])
        return surviving_offsets(broker, topic_name, 20) == [19]

    wait_for(compacted, 180, f"the log cleaner to compact {topic_name}")
    end = log_end_offsets(broker, topic_name)[0]
    config = parse_options({"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic_name,
                            "kafkaConsumer.pollTimeoutMs": "60000"}).reader_config

    made: list[RecordingConsumer] = []
    assert recorded_read(KafkaRange(topic_name, 0, 0, 19), config, made) == []
    assert recorded_read(KafkaRange(topic_name, 0, 0, end), config, made) == surviving_offsets(broker, topic_name, end)
    for consumer in made:
        # Each read ended with a call that delivered something (the first record past the
        # range, or its end-of-partition event) after less than the longest wait.
        num, wait, returned, _ = consumer.calls[-1]
        assert returned > 0 and wait < 1.0, consumer.calls

    kafka_rows, backlog_rows = both(spark, broker, {"subscribe": topic_name, "startingOffsets": "earliest",
                                                    "endingOffsets": "latest"})
    assert not isinstance(kafka_rows, str), kafka_rows
    assert backlog_rows == kafka_rows
    assert [r[4] for r in backlog_rows] == surviving_offsets(broker, topic_name, end)
