"""What the worker's consumer pool buys the Python reader per split (issue 15, lever 1; built in issue 24).

Spark's Kafka source keeps a pool of consumers per executor, and so does this reader
(``reader/consumer_pool.py``). This measures the read path itself
(``reader.kafka_reader.read_split``), no Spark, so nothing else is in the figure:

* ``fresh``: a new consumer per split, closed at its end (the reader before the pool);
* ``pooled``: the reader as it runs on executors, its consumer lent by a pool and given
  back after each clean read (resumed and unassigned; the next split assigns again);
* ``pooled_fetch_wait_10ms``: the same, with ``fetch.wait.max.ms=10`` so a fetch the broker
  holds for new data returns quickly (the cost: up to 100 fetch requests per second and
  partition while idle, where the default 500 ms allows 2).

Each split is a low-latency-sized read: ``--records`` new records per partition, over 1 and
over 8 partitions, read from the offset the previous split ended at (as consecutive
micro-batches do). A warm-up split first; then ``--splits`` splits per variant,
interleaved, reported as median and spread (min-max) of the time from the split's start to
its last record.

Usage::

    .venv/bin/python -m benchmarks.consumer_reuse [--splits 30] [--records 100]

Writes ``benchmarks/results/consumer_reuse/consumer_reuse.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import Consumer, Producer

from backlog_source.core.settings import parse_options
from backlog_source.demo.apache_kafka import start_kafka
from backlog_source.demo.topics import create_topic
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.stats import median_and_spread, with_spread

VARIANTS = ("fresh", "pooled", "pooled_fetch_wait_10ms")


def append(producer: Producer, topic: str, partitions: int, records: int) -> None:
    for partition in range(partitions):
        for _ in range(records):
            producer.produce(topic, value=b"x" * 100, partition=partition)
    if producer.flush(30):
        raise RuntimeError("records not acknowledged within 30 s")


def time_split(split: KafkaSplit, config, how: dict) -> float:
    started = time.perf_counter()
    records = sum(batch.num_rows for batch in read_split(split, config, **how))
    assert records == split.records, (records, split.records)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=30)
    parser.add_argument("--records", type=int, default=100, help="new records per partition per split")
    args = parser.parse_args()

    broker = start_kafka()
    try:
        bootstrap = broker.bootstrap_servers
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all"})
        results: dict[str, dict] = {}
        for partitions in (1, 8):
            topic = f"reuse-{partitions}"
            create_topic(bootstrap, topic, partitions)
            per_variant = args.splits + 1  # the warm-up split included
            config = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}).reader_config
            fast = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                  "kafka.fetch.wait.max.ms": "10"}).reader_config
            pools = {v: ConsumerPool() for v in VARIANTS if v.startswith("pooled")}
            how = {v: {"pool": pools.get(v, ConsumerPool(Consumer, capacity=0))} for v in VARIANTS}

            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            offset = 0
            for round_ in range(per_variant):
                for variant in VARIANTS:
                    # The split reads exactly the records just produced, up to the log end, as a
                    # caught-up micro-batch does.
                    append(producer, topic, partitions, args.records)
                    split = KafkaSplit(tuple(KafkaRange(topic, p, offset, offset + args.records)
                                             for p in range(partitions)))
                    offset += args.records
                    seconds = time_split(split, fast if variant.endswith("10ms") else config, how[variant])
                    if round_ > 0:  # the first round warms up every variant
                        times[variant].append(seconds * 1000)
            for pool in pools.values():
                pool.close_all()
            results[f"{partitions}_partitions"] = {v: median_and_spread(t) for v, t in times.items()}
    finally:
        broker.stop()

    command = f".venv/bin/python -m benchmarks.consumer_reuse --splits {args.splits} --records {args.records}"
    summary = {"command": command, "machine": machine(), "splits": args.splits,
               "records_per_partition": args.records, "ms_per_split": results}
    lines = ["# Consumer reuse across splits", "", f"Command: `{command}`", "",
             f"{args.splits} splits per variant after a warm-up round, {args.records} new records per partition "
             "each, read through `read_split`; median (min-max) ms from the split's start to its last record.", "",
             "| partitions | " + " | ".join(VARIANTS) + " |", "|---|" + "---|" * len(VARIANTS)]
    for key, row in results.items():
        cells = [with_spread(row[v], '.1f') for v in VARIANTS]
        lines.append(f"| {key.split('_')[0]} | " + " | ".join(cells) + " |")
    write_results("consumer_reuse", "consumer_reuse", summary, lines)


if __name__ == "__main__":
    main()
