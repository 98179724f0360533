"""The librdkafka configuration each client role gets."""

import pickle

import pytest
from confluent_kafka import Consumer

from backlog_source.core.kafka_config import ClientRole, KafkaClientConfig, Secret
from backlog_source.core.settings import parse_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


@pytest.mark.parametrize("role", [ClientRole.READER, ClientRole.SIZE_SAMPLER])
def test_readers_read_uncommitted_by_default_as_spark_s_java_consumer_does(role):
    """librdkafka's default is read_committed; Spark's (the Java client's) is read_uncommitted,
    and the driver plans to the high watermark unless the user asks otherwise. A reader on
    librdkafka's default stopped at an open transaction and dropped aborted records."""
    assert parse_options(BASE).kafka.librdkafka(role)["isolation.level"] == "read_uncommitted"
    committed = parse_options({**BASE, "kafka.isolation.level": "read_committed"})
    assert committed.kafka.librdkafka(role)["isolation.level"] == "read_committed"


def test_admin_clients_carry_no_consumer_settings():
    config = parse_options({**BASE, "kafka.isolation.level": "read_committed"}).kafka.librdkafka(ClientRole.ADMIN)
    assert "isolation.level" not in config and "group.id" not in config


@pytest.mark.parametrize("role", [ClientRole.READER, ClientRole.SIZE_SAMPLER])
def test_readers_fetch_again_soon_after_their_queue_filled_and_a_user_setting_wins(role):
    """librdkafka waits fetch.queue.backoff.ms (1 s) before fetching a partition whose local
    queue reached its threshold: a reader that drains it faster sat idle (5x slower)."""
    assert parse_options(BASE).kafka.librdkafka(role)["fetch.queue.backoff.ms"] == 10
    assert parse_options({**BASE, "kafka.fetch.queue.backoff.ms": "50"}).kafka.librdkafka(role)["fetch.queue.backoff.ms"] == "50"
    assert "fetch.queue.backoff.ms" not in parse_options(BASE).kafka.librdkafka(ClientRole.ADMIN)


@pytest.mark.parametrize("role", [ClientRole.READER, ClientRole.SIZE_SAMPLER])
def test_readers_let_the_broker_hold_a_fetch_briefly_and_a_user_setting_wins(role):
    """A held fetch at the log end delayed a kept consumer's next read by up to 500 ms."""
    assert parse_options(BASE).kafka.librdkafka(role)["fetch.wait.max.ms"] == 10
    assert parse_options({**BASE, "kafka.fetch.max.wait.ms": "200"}).kafka.librdkafka(role)["fetch.wait.max.ms"] == "200"
    assert "fetch.wait.max.ms" not in parse_options(BASE).kafka.librdkafka(ClientRole.ADMIN)


@pytest.mark.parametrize("role", [ClientRole.READER, ClientRole.SIZE_SAMPLER])
def test_readers_fetch_at_most_16_mib_ahead_and_a_user_setting_wins(role):
    """A catch-up range drops what was fetched past its end: librdkafka's 64 MiB queue made a
    34 MiB range fetch up to 92 MiB (benchmarks/fetch_ahead.py)."""
    assert parse_options(BASE).kafka.librdkafka(role)["queued.max.messages.kbytes"] == 16_384
    chosen = parse_options({**BASE, "kafka.queued.max.messages.kbytes": "65536"}).kafka.librdkafka(role)
    assert chosen["queued.max.messages.kbytes"] == "65536"
    assert "queued.max.messages.kbytes" not in parse_options(BASE).kafka.librdkafka(ClientRole.EVENT_PRODUCER)


@pytest.mark.parametrize("extra", [{}, {"kafka.fetch.max.bytes": "104857600"}, {"kafka.max.partition.fetch.bytes": "104857600"},
                                   {"kafka.fetch.max.bytes": "104857600", "kafka.max.partition.fetch.bytes": "104857600"}])
def test_a_reader_consumer_starts_with_the_readers_defaults_and_large_fetch_sizes(extra):
    """librdkafka checks its settings against each other when a client is created
    (``fetch.max.bytes`` against ``message.max.bytes`` and ``receive.message.max.bytes``); the
    readers' smaller fetch-ahead queue must not make a user's fetch sizes refused."""
    for role in (ClientRole.READER, ClientRole.SIZE_SAMPLER):
        Consumer(parse_options({**BASE, **extra}).kafka.librdkafka(role)).close()


PASSWORD = "s3cr3t-Value"


def test_a_secret_is_held_masked_whatever_it_was_given_as():
    given = {"sasl.password": PASSWORD, "ssl.key.password": Secret(PASSWORD + "2")}
    config = KafkaClientConfig(bootstrap_servers="h:1", secrets=given)
    assert PASSWORD not in repr(config) and PASSWORD not in str(config.secrets)
    assert [s.get_secret_value() for s in config.secrets.values()] == [PASSWORD, PASSWORD + "2"]
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(TypeError, match="'sasl.password' must be a str, got NoneType"):
        KafkaClientConfig(bootstrap_servers="h:1", secrets={"sasl.password": None})

