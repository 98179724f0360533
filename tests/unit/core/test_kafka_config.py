"""The librdkafka configuration each client role gets."""

import pytest

from backlog_source.core.kafka_config import ClientRole
from backlog_source.core.settings import parse_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


@pytest.mark.parametrize("role", [ClientRole.READER, ClientRole.SNAPSHOT_READER])
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
