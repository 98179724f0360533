"""Live traffic: topics whose records' latency is measured, a live producer in its own
process that reports what it delivered, log end offsets, and a query catching up."""

from __future__ import annotations

import multiprocessing as mp
import random
import time

from backlog_source.demo.topics import create_topic
from benchmarks.harness.progress import offset_of
from benchmarks.harness.runs import wait_until

#: Topics whose records' latency is measured: a record's timestamp is when Kafka appended it,
#: i.e. when a consumer could first read it, so the producer's own queueing is not counted.
#: It is not small everywhere: with 1,024 partitions at 1,500 records/s, librdkafka appended
#: the records produced in a run's last seconds up to 30 s late (p50 5 ms), while the broker
#: acknowledged within 70 ms of appending (``message.timestamp.type`` = CreateTime then
#: charged that wait to whichever source read the topic).
LIVE_TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


def mixed_value(rng: random.Random) -> bytes:
    """A value of issue 35's mixed workload: 90 % of 200 B, 10 % of 16-64 KiB."""
    return b"v" * (rng.randint(16 << 10, 64 << 10) if rng.random() < 0.1 else 200)


def create_live_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic for live traffic whose latency is measured (:data:`LIVE_TOPIC_CONFIG`)."""
    create_topic(bootstrap, topic, partitions, LIVE_TOPIC_CONFIG)


#: How often a transactional live producer commits (each commit writes a marker to every
#: partition it wrote to: offsets without a record at the log end).
TRANSACTION_EVERY_S = 0.2


def live_producer(bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, out,
                  transactional: bool = False) -> None:
    """``rate`` records/s for ``seconds``, round-robin over the partitions, with librdkafka's
    default batching; ``transactional``: in transactions committed every
    :data:`TRANSACTION_EVERY_S`, as an exactly-once writer produces. Sends back
    ``[(partition, offset, timestamp_ms), ...]`` of every acknowledged (and committed)
    record: on a :func:`create_live_topic` topic the timestamp is the broker's append time."""
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "client.id": "benchmark-producer"}
    if transactional:
        config["transactional.id"] = f"benchmark-{topic}"
    producer = Producer(config)
    delivered: list[tuple[int, int, int]] = []

    def on_delivery(error, message) -> None:
        if error is None:
            delivered.append((message.partition(), message.offset(), message.timestamp()[1]))

    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    started = committed_at = time.perf_counter()
    sent = 0
    while time.perf_counter() - started < seconds:
        due = int((time.perf_counter() - started) * rate)
        while sent < due:
            producer.produce(topic, value=b"l" * 100, partition=sent % partitions, on_delivery=on_delivery)
            sent += 1
        producer.poll(0)
        if transactional and time.perf_counter() - committed_at >= TRANSACTION_EVERY_S:
            producer.commit_transaction(30)
            producer.begin_transaction()
            committed_at = time.perf_counter()
        time.sleep(0.001)
    if transactional:
        producer.commit_transaction(30)
    producer.flush(60)
    out.put(delivered)


def start_producer(bootstrap: str, topic: str, partitions: int, rate: float, seconds: float,
                   transactional: bool = False):
    """A running :func:`live_producer` process and the queue its deliveries come back on
    (:func:`await_deliveries`)."""
    out = mp.Queue()
    process = mp.Process(target=live_producer, args=(bootstrap, topic, partitions, rate, seconds, out, transactional),
                         daemon=True)
    process.start()
    return process, out


def await_deliveries(producer, out, timeout_s: float) -> list[tuple[int, int, int]]:
    """What a :func:`start_producer` process delivered, waiting up to ``timeout_s`` for it,
    once the process has ended (or 30 s more have passed)."""
    delivered = out.get(timeout=timeout_s)
    producer.join(30)
    return delivered


def delivered_ends(delivered: list[tuple[int, int, int]]) -> dict[int, int]:
    """Partition -> the offset after the last record delivered to it: where the live traffic
    ended."""
    ends: dict[int, int] = {}
    for partition, offset, _ in delivered:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


def log_end_offsets(admin, topic: str, partitions: int) -> dict[int, int]:
    """``ListOffsets(latest)`` of partitions ``0..partitions-1`` of ``topic`` through
    ``admin`` (a confluent-kafka AdminClient the caller keeps, so timing it times the
    request, not a client's creation)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)})
    return {tp.partition: f.result(timeout=30).offset for tp, f in futures.items()}


def log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """:func:`log_end_offsets` through a client of its own, where the request is not timed."""
    from confluent_kafka.admin import AdminClient

    return log_end_offsets(AdminClient({"bootstrap.servers": bootstrap}), topic, partitions)


def produce_and_catch_up(query, bootstrap: str, topic: str, partitions: int, rate: float, seconds: float,
                         catch_up_s: float = 300, transactional: bool = False) -> tuple[list, bool]:
    """Produce ``rate`` records/s over ``partitions`` for ``seconds`` (``transactional``: see
    :func:`live_producer`), then wait up to ``catch_up_s`` for ``query`` to commit all of them.
    Returns what the producer delivered and whether the query caught up (a query that cannot
    keep up is a result, not a crash)."""
    producer, out = start_producer(bootstrap, topic, partitions, rate, seconds, transactional)
    delivered = await_deliveries(producer, out, seconds + 120)
    ends = delivered_ends(delivered)
    try:
        wait_until(lambda: caught_up(query, topic, ends), catch_up_s, f"{topic}: the query did not catch up")
    except TimeoutError:
        return delivered, False
    return delivered, True


def caught_up(query, topic: str, ends: dict[int, int]) -> bool:
    """Whether ``query``'s last batch ended at or past ``ends`` (partition -> offset) of
    ``topic``; the offset is this source's (``positions``) or Spark's Kafka source's."""
    progress = query.lastProgress
    if not progress:
        return False
    offset = offset_of(progress["sources"][0]["endOffset"])
    positions = offset.get("positions", offset).get(topic, {})
    return all(positions.get(str(p), -1) >= end for p, end in ends.items())
