"""Test and benchmark tooling: deleting a topic (the demo only creates and fills them, with
:mod:`backlog_source.demo.topics`)."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient


def delete_topic(bootstrap_servers: str, topic: str) -> None:
    """Delete ``topic`` and wait until the broker accepted it; raises the admin client's
    :class:`~confluent_kafka.KafkaException` when it refuses (e.g. no such topic)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.delete_topics([topic])[topic].result(timeout=30)
