"""The worker's consumer pool against Apache Kafka: a kept consumer reads the next range of a
partition it paused (librdkafka keeps pause flags across assignments), and survives the
deletion of a topic it read while idle (on the embedded broker that crashed a worker), and
replays earlier offsets without handing over what it had fetched ahead."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backlog_source.core.settings import parse_options
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from tests.integration.helpers import make_topic

pytestmark = pytest.mark.integration


def read_offsets(broker, topic: str, ranges, pool: ConsumerPool) -> list[tuple[int, int]]:
    config = parse_options({"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic,
                            "kafkaConsumer.pollTimeoutMs": "30000"}).reader_config
    split = KafkaSplit(tuple(KafkaRange(topic, p, s, e) for p, s, e in ranges))
    batches = list(read_split(split, config, pool=pool))
    return [(p, o) for b in batches for p, o in zip(b.column("partition").to_pylist(), b.column("offset").to_pylist())]


def test_a_kept_consumer_reads_the_next_ranges_of_partitions_it_paused(broker, topic_name):
    make_topic(broker, topic_name, 2, per_partition=30)
    pool = ConsumerPool()
    first = read_offsets(broker, topic_name, [(0, 0, 10), (1, 0, 5)], pool)
    second = read_offsets(broker, topic_name, [(0, 10, 20), (1, 5, 30)], pool)
    third = read_offsets(broker, topic_name, [(1, 30, 30), (0, 20, 30)], pool)
    assert sorted(first) == [(0, o) for o in range(10)] + [(1, o) for o in range(5)]
    assert sorted(second) == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5, 30)]
    assert sorted(third) == [(0, o) for o in range(20, 30)]
    assert (pool.created, pool.reused, len(pool)) == (1, 2, 1)
    pool.close_all()


def test_a_kept_consumer_survives_the_deletion_of_a_topic_it_read(broker, topic_name):
    deleted, other = f"{topic_name}-deleted", f"{topic_name}-other"
    make_topic(broker, deleted, 1, per_partition=10)
    make_topic(broker, other, 1, per_partition=10)
    child = subprocess.run([sys.executable, "-m", "tests.integration.pooled_reads", broker.bootstrap_servers,
                            deleted, other], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, f"the pooled reads' process ended with {child.returncode}: {child.stderr[-2000:]}"
    outcome = json.loads(child.stdout.strip().splitlines()[-1])
    assert outcome["first"] == list(range(10)) and outcome["second"] == list(range(10))
    # The kept consumer of the deleted topic stayed idle in the pool (a read of another topic
    # gets its own) until close_all() closed it: neither crashed the process.
    assert outcome["kept_after_first"] == 1
    assert (outcome["created"], outcome["reused"]) == (2, 0)


def test_a_kept_consumer_replaying_earlier_offsets_gets_them_not_what_it_had_fetched_ahead(broker, topic_name):
    # A retried task or a replayed batch reads offsets before those the kept consumer last
    # fetched (it fetched ahead up to the log end before the range was paused): nothing of
    # that earlier fetch may be delivered in place of the replayed range.
    make_topic(broker, topic_name, 1, per_partition=2_000)
    pool = ConsumerPool()
    later = read_offsets(broker, topic_name, [(0, 1_000, 1_050)], pool)
    earlier = read_offsets(broker, topic_name, [(0, 0, 50)], pool)  # same size: same settings, same consumer
    assert later == [(0, o) for o in range(1_000, 1_050)]
    assert earlier == [(0, o) for o in range(50)]
    assert pool.reused == 1
    pool.close_all()
