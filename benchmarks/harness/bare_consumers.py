"""Bare confluent-kafka consumer loops, the baseline without Spark: what librdkafka alone
reads with the source's reader configuration."""

from __future__ import annotations

import multiprocessing as mp
import time


def bare_consumer(bootstrap: str, topic: str, ends: dict[int, int], queue) -> None:
    """Consume ``[0, end)`` of the given partitions with the source's reader configuration
    (so a ratio never credits the source with what is only a librdkafka setting), touching
    each record's value; report ``(records, seconds)``."""
    from confluent_kafka import Consumer, TopicPartition

    from backlog_source.core.kafka_config import ClientRole, KafkaClientConfig

    consumer = Consumer(KafkaClientConfig(bootstrap_servers=bootstrap).librdkafka(ClientRole.READER))
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    left = dict(ends)  # records still to read per partition (each partition starts at 0)
    records = size = 0
    while any(left.values()):
        # Ask for what remains, as the source's reader does: consume() waits for as many
        # messages as asked, so asking for more waited out its timeout at the end.
        for message in consumer.consume(min(10_000, sum(left.values())), 1.0):
            if message.error() is None:
                records += 1
                size += len(message.value())
                left[message.partition()] = ends[message.partition()] - message.offset() - 1
    elapsed = time.perf_counter() - started
    consumer.close()
    queue.put((records, elapsed))


def run_bare(bootstrap: str, topic: str, ends: dict[int, int], processes: int) -> dict:
    """``processes`` bare consumer loops in parallel, the partitions dealt out among them.
    Wall time includes the processes' start; the slowest loop's own time is reported too."""
    queue: mp.Queue = mp.Queue()
    groups = [dict(list(ends.items())[i::processes]) for i in range(processes)]
    workers = [mp.Process(target=bare_consumer, args=(bootstrap, topic, g, queue)) for g in groups if g]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=900) for _ in workers]
    wall = time.perf_counter() - started
    for worker in workers:
        worker.join()
    records = sum(r for r, _ in results)
    return {"records": records, "seconds": wall, "loop_seconds": max(s for _, s in results), "records_per_s": records / wall}
