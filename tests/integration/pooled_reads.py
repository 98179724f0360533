"""Child process of ``test_consumer_pool.py``: pooled reads around a topic deletion.

Run as ``python -m tests.integration.pooled_reads <bootstrap> <deleted topic> <other topic>``.
A crash of librdkafka (the reason this runs in its own process) shows as a non-zero exit.
Prints one JSON line: what each read returned and what the pool did.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka.admin import AdminClient

from backlog_source.core.settings import parse_options
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit


def offsets(bootstrap: str, topic: str, end: int, pool: ConsumerPool) -> list[int]:
    config = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                            "kafkaConsumer.pollTimeoutMs": "30000"}).reader_config
    split = KafkaSplit((KafkaRange(topic, 0, 0, end),))
    return [o for b in read_split(split, config, pool=pool) for o in b.column("offset").to_pylist()]


def main() -> None:
    bootstrap, deleted, other = sys.argv[1:4]
    pool = ConsumerPool()
    first = offsets(bootstrap, deleted, 10, pool)
    kept_after_first = len(pool)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([deleted])[deleted].result(timeout=30)
    deadline = time.monotonic() + 60
    while deleted in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise SystemExit(f"{deleted} still listed 60 s after its deletion")
        time.sleep(0.2)
    # Make the idle consumer learn of the deletion now (its own refresh comes every
    # topic.metadata.refresh.interval.ms): what crashed a kept consumer on the embedded broker.
    for idle in pool.idle_clients():
        idle.list_topics(timeout=10)
    second = offsets(bootstrap, other, 10, pool)
    print(json.dumps({"first": first, "kept_after_first": kept_after_first, "second": second,
                      "created": pool.created, "reused": pool.reused}))
    pool.close_all()


if __name__ == "__main__":
    main()
