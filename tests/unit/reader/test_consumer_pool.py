"""The worker's consumer pool with fakes: what is kept, what is closed, and how the split
reader gives a consumer back only after a clean read."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError

from backlog_source.core.client_pool import settings_key
from backlog_source.core.errors import KafkaUnavailableError
from backlog_source.core.settings import parse_options
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from tests.fakes import Err, FakeClock, FakeConsumer, Msg, eof

SETTINGS = {"bootstrap.servers": "h:1", "group.id": "backlog-source-1"}


class Factory:
    """Makes a new scripted FakeConsumer per call and remembers them."""

    def __init__(self, *scripts, clock=None):
        self.scripts = list(scripts)
        self.clock = clock
        self.made: list[FakeConsumer] = []

    def __call__(self, config):
        consumer = FakeConsumer(self.scripts.pop(0) if self.scripts else [], clock=self.clock)
        consumer(config)
        self.made.append(consumer)
        return consumer


def test_a_consumer_given_back_is_resumed_unassigned_and_lent_again_for_the_same_key():
    factory = Factory()
    pool = ConsumerPool(factory)
    consumer = pool.borrow(SETTINGS, "k")
    consumer.assign([])
    consumer.assigned[-1] = [("t", 0, 5)]
    consumer.paused = {("t", 0)}
    pool.give_back("k", consumer)
    assert consumer.paused == set() and consumer.assigned[-1] == [] and not consumer.closed
    assert pool.borrow(SETTINGS, "k") is consumer
    assert pool.borrow(SETTINGS, "other") is not consumer
    assert (pool.created, pool.reused) == (2, 1)


def test_an_idle_consumer_past_the_timeout_is_closed_not_lent():
    clock = FakeClock()
    pool = ConsumerPool(Factory(), idle_timeout_s=300, clock=clock)
    old = pool.borrow(SETTINGS, "k")
    pool.give_back("k", old)
    clock.advance(301)
    assert pool.borrow(SETTINGS, "k") is not old and old.closed


def test_the_evictor_closes_consumers_idle_past_the_timeout_and_keeps_the_others():
    """A kept consumer whose cluster went away reconnects (and logs) for as long as it is
    kept; eviction bounds that to the idle timeout even when no read asks for its key."""
    clock = FakeClock()
    factory = Factory()
    pool = ConsumerPool(factory, idle_timeout_s=300, clock=clock)
    old, recent = pool.borrow(SETTINGS, "old"), pool.borrow(SETTINGS, "recent")
    pool.give_back("old", old)
    clock.advance(200)
    pool.give_back("recent", recent)
    assert pool.evict_idle() == 0 and not old.closed
    clock.advance(101)
    assert pool.evict_idle() == 1 and old.closed and not recent.closed
    assert pool.idle_clients() == [recent] and pool.evicted == 1


def test_the_worker_pool_runs_an_evictor_thread_once_it_keeps_a_consumer():
    factory = Factory()
    pool = ConsumerPool(factory, idle_timeout_s=0.0, evict_every_s=0.01)
    consumer = pool.borrow(SETTINGS, "k")
    pool.give_back("k", consumer)
    evicted = threading.Event()
    original = pool.evict_idle

    def observed():
        closed = original()
        if closed:
            evicted.set()
        return closed

    pool.evict_idle = observed
    assert evicted.wait(timeout=30), "the evictor never closed the idle consumer"
    assert consumer.closed and len(pool) == 0


def test_the_pool_keeps_at_most_its_capacity_closing_the_least_recently_used():
    pool = ConsumerPool(Factory(), capacity=2)
    consumers = [pool.borrow(SETTINGS, key) for key in ("a", "b", "c")]
    for key, consumer in zip(("a", "b", "c"), consumers):
        pool.give_back(key, consumer)
    assert len(pool) == 2 and consumers[0].closed and not consumers[1].closed and not consumers[2].closed
    assert pool.borrow(SETTINGS, "a") is not consumers[0]


def test_a_second_consumer_given_back_for_a_key_replaces_the_first():
    pool = ConsumerPool(Factory())
    first, second = pool.borrow(SETTINGS, "k"), pool.borrow(SETTINGS, "k")
    pool.give_back("k", first)
    pool.give_back("k", second)
    assert first.closed and len(pool) == 1 and pool.borrow(SETTINGS, "k") is second


def test_a_consumer_that_cannot_be_reset_is_closed():
    pool = ConsumerPool(Factory())
    consumer = pool.borrow(SETTINGS, "k")
    consumer.assigned.append([("t", 0, 0)])

    def broken(partitions):
        raise RuntimeError("consumer closed")

    consumer.resume = broken
    pool.give_back("k", consumer)
    assert consumer.closed and len(pool) == 0


def test_a_pool_of_no_capacity_closes_what_it_gets_back():
    pool = ConsumerPool(Factory(), capacity=0)
    consumer = pool.borrow(SETTINGS, "k")
    pool.give_back("k", consumer)
    assert consumer.closed and len(pool) == 0


def test_the_key_ignores_a_generated_group_id_but_not_a_users_and_holds_no_setting_in_clear():
    a = {**SETTINGS, "sasl.password": "s3cret-value"}
    b = {**a, "group.id": "backlog-source-2"}
    assert settings_key(a, ["t"], generated_group_id=True) == settings_key(b, ["t"], generated_group_id=True)
    assert settings_key(a, ["t"], generated_group_id=False) != settings_key(b, ["t"], generated_group_id=False)
    assert settings_key(a, ["t"], generated_group_id=True) != settings_key(
        {**a, "max.partition.fetch.bytes": 65536}, ["t"], generated_group_id=True)
    assert "s3cret" not in settings_key(a, ["t"], generated_group_id=True)


def test_the_key_names_the_topics_read_in_any_order():
    assert settings_key(SETTINGS, ["a", "b", "a"], generated_group_id=True) == settings_key(
        SETTINGS, ["b", "a"], generated_group_id=True)
    assert settings_key(SETTINGS, ["a"], generated_group_id=True) != settings_key(SETTINGS, ["b"], generated_group_id=True)


# ------------------------------------------------------------------ the reader and the pool

CONFIG = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafkaConsumer.pollTimeoutMs": "5000",
                        "failOnDataLoss": "false"}).reader_config


def read(pool, *ranges, clock=None):
    split = KafkaSplit(tuple(KafkaRange(*r) for r in ranges))
    kwargs = {"clock": clock} if clock is not None else {}
    return [o for b in read_split(split, CONFIG, pool=pool, **kwargs) for o in b.column("offset").to_pylist()]


def test_consecutive_clean_reads_share_one_consumer_that_ends_each_read_resumed_and_unassigned():
    factory = Factory([[Msg(0), Msg(1)], [Msg(2), Msg(3)]])
    pool = ConsumerPool(factory)
    assert read(pool, ("t", 0, 0, 2)) == [0, 1]
    consumer = factory.made[0]
    assert consumer.paused == set() and consumer.assigned[-1] == [] and not consumer.closed
    assert read(pool, ("t", 0, 2, 4)) == [2, 3]
    assert len(factory.made) == 1 and consumer.assigned == [[("t", 0, 0)], [], [("t", 0, 2)], []]


def test_a_read_that_skipped_lost_records_closes_its_consumer():
    factory = Factory([[Msg(0, error=Err(KafkaError.OFFSET_OUT_OF_RANGE))], [Msg(3), Msg(4)]])
    factory_watermarks = (3, 5)
    pool = ConsumerPool(lambda config: _with_watermarks(factory(config), factory_watermarks))
    assert read(pool, ("t", 0, 0, 5)) == [3, 4]
    assert factory.made[0].closed and len(pool) == 0


def _with_watermarks(consumer, watermarks):
    consumer.watermarks = watermarks
    return consumer


def test_a_read_that_saw_a_transient_error_closes_its_consumer():
    factory = Factory([[Msg(0, error=Err(KafkaError._TRANSPORT))], [Msg(0), eof(1)]])
    pool = ConsumerPool(factory)
    assert read(pool, ("t", 0, 0, 1)) == [0]
    assert factory.made[0].closed and len(pool) == 0


def test_a_failed_read_closes_its_consumer():
    clock = FakeClock()
    factory = Factory([], clock=clock)
    pool = ConsumerPool(factory)
    with pytest.raises(KafkaUnavailableError):
        read(pool, ("t", 0, 0, 1), clock=clock)
    assert factory.made[0].closed and len(pool) == 0


def test_a_read_stopped_early_closes_its_consumer():
    factory = Factory([[Msg(0)], [Msg(1)]])
    pool = ConsumerPool(factory)
    batches = read_split(KafkaSplit((KafkaRange("t", 0, 0, 2),)), CONFIG, pool=pool)
    next(batches)
    batches.close()
    assert factory.made[0].closed and len(pool) == 0


def test_an_end_of_partition_event_is_no_incident():
    factory = Factory([[Msg(0), eof(2)]])  # offset 1 compacted away
    pool = ConsumerPool(factory)
    assert read(pool, ("t", 0, 0, 2)) == [0]
    assert not factory.made[0].closed and len(pool) == 1


def test_a_read_of_another_topic_gets_another_consumer():
    factory = Factory([[Msg(0, topic="t")]], [[Msg(0, topic="u", partition=0)]])
    pool = ConsumerPool(factory)
    assert read(pool, ("t", 0, 0, 1)) == [0]
    assert read(pool, ("u", 0, 0, 1)) == [0]
    assert len(factory.made) == 2 and len(pool) == 2
