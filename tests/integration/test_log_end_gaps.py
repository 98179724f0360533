"""Reads that end at a log end past offsets without a record, on Apache Kafka: transaction
commit markers leave such offsets, so a range [start, log end) of a transactional partition
has fewer records than offsets. The read must end on the partition's end-of-partition event,
not by waiting for records that do not exist (it waited a whole second per read)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer

from backlog_source.core.settings import parse_options
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from tests.integration.helpers import log_end_offsets, make_topic

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

    def factory(config):
        made.append(RecordingConsumer(config))
        return made[-1]

    config = parse_options({"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic_name,
                            "kafka.isolation.level": isolation, "kafkaConsumer.pollTimeoutMs": "60000"}).reader_config
    batches = list(read_split(KafkaSplit((KafkaRange(topic_name, 0, 0, end),)), config,
                              pool=ConsumerPool(factory, capacity=0)))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == [o for o in range(33) if o not in (10, 21, 32)]
    calls = made[0].calls
    # The read ended with the call that delivered the end-of-partition event, and that call
    # was given less than the longest wait: a read that asked for as many messages as the
    # range has offsets waited each call out, 1 s, since three of them never come.
    _, wait, _, eof = calls[-1]
    assert eof, calls
    assert wait < 1.0, calls
