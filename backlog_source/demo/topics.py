"""Topics and records on any Kafka-compatible broker, for the demo, tests and benchmarks
(never the source's runtime path): create a topic, produce records and wait until they are
acknowledged, and wait for a condition with a deadline. (Deleting a topic is test tooling:
``tests/support/topics.py``.)

Which process: the driver program of the demo, a test or a benchmark.

:func:`seal_partitions` is the one workaround for the embedded Tansu broker's quirk
(:mod:`backlog_source.demo.embedded_broker`); Apache Kafka needs nothing of the kind.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from backlog_source.demo.errors import DemoError


def create_topic(bootstrap_servers: str, topic: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
    """Create ``topic`` (with topic-level ``config``, e.g. ``message.timestamp.type``) and
    wait until it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, config=dict(config or {}))])[topic].result(timeout=30)


def produce(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[tuple[int, bytes | None, bytes | None]],
    *,
    headers: list[tuple[str, bytes]] | None = None,
    timestamp_ms: int | None = None,
    seal: bool = False,
    burst: bool = False,
) -> int:
    """Produce ``(partition, key, value)`` records in fast batches and wait until all are
    acknowledged. ``seal``: then seal every partition written to, for the embedded Tansu
    broker only (see :func:`seal_partitions`; Apache Kafka needs nothing of the kind).
    ``burst``: hold every record until the final flush (or until a partition's batch is full
    at librdkafka's ``batch.size``, 1 MB), so a reader sees them arrive together rather than
    trickle in while this loop runs (which, on a loaded machine, can take longer than a
    reader's catch-up). Returns how many records were produced, sealing ones included.

    Raises :class:`~backlog_source.demo.errors.DemoError` if any record was not acknowledged.
    """
    # A burst lingers longer than the loop can take, in batches as large as librdkafka allows;
    # flush() sends at once whatever linger.ms says.
    linger_ms, per_batch = (60_000, 1_000_000) if burst else (5, 10_000)
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "linger.ms": linger_ms, "batch.num.messages": per_batch, "acks": "all"}
    )
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    partitions: set[int] = set()
    count = 0
    for partition, key, value in records:
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, partition=partition, headers=headers,
                    timestamp=timestamp_ms or 0, on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
        partitions.add(partition)
        count += 1
    producer.flush(60)
    if failures:
        raise DemoError(f"{len(failures)} record(s) not delivered to {topic}: {failures[0]}")
    return count + (seal_partitions(bootstrap_servers, topic, sorted(partitions)) if seal else 0)


def seal_partitions(bootstrap_servers: str, topic: str, partitions: Iterable[int]) -> int:
    """Append one single-record batch (key ``b"__seal__"``) to each partition.

    Why: Tansu answers ``ListOffsets(LATEST)`` with the base offset of the partition's last
    record batch plus one, not the true log end, when that batch holds several records. So
    after a burst, the newest batch would stay invisible to any planner until another batch
    arrives. A final single-record batch makes the reported end the true end. Real Kafka has
    no such quirk; this is the only place the workaround lives.
    """
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 0, "batch.num.messages": 1, "acks": "all"})
    count = 0
    for partition in partitions:
        producer.produce(topic, value=b"", key=SEAL_KEY, partition=partition)
        producer.flush(30)
        count += 1
    return count


#: The key of the records :func:`seal_partitions` appends, so readers can tell them apart.
SEAL_KEY = b"__seal__"


def wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.1):
    """Poll ``condition()`` until it returns a truthy value; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)
