"""Read throughput of format("backlog") against bare confluent-kafka consumer loops.

One run, one topic on Apache Kafka (single node, `make jvm`), three readers of the same records:

* ``bare_1``: one process, one consumer assigned to every partition, ``consume(10_000)``
  batches, touching each record's value: the practical limit of a Python Kafka reader.
  It uses the reader's librdkafka defaults; ``bare_1_librdkafka_defaults`` does not.
* ``bare_2``: two such processes in parallel, two partitions each (the machine's 2 cores).
* ``source``: Spark with its default settings (``local[*]``, default driver memory: as a
  user runs it), ``Trigger.AvailableNow``, ``noop`` sink, wall time from ``start()`` to
  termination (query start-up included; SparkSession start-up excluded). Also reported:
  the same from the query's first trigger, and Spark's ``addBatch`` time alone, so what the
  source's read path costs can be told from what every Python streaming query pays first;
* ``trivial_python_startup``: ``start()`` -> first trigger of a Python source that reads
  nothing (``benchmarks.harness.TrivialSource``), in the same round: PySpark's share of the
  source's start-up, which no data source can avoid.

One warm-up query first (JVM, Python workers), then ``--repeats`` interleaved rounds of the
four readers; the report gives the median of the rounds with the spread (min-max), and
ratios of medians taken in the same run.

Usage::

    .venv/bin/python -m benchmarks.read_throughput [--repeats 5] [--records 2000000] [--partitions 4] [--value-size 100]

Writes ``benchmarks/results/read_throughput/read_throughput.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time



from backlog_source.testing.apache_kafka import start_kafka
from backlog_source.testing.broker import create_topic, produce
from benchmarks.harness import (
    first_trigger_and_total_s,
    machine,
    median_and_spread,
    register_trivial_source,
    run_source,
    spark_session,
    with_spread,
    write_results,
)


def bare_consumer(bootstrap: str, topic: str, ends: dict[int, int], tuned: bool, queue) -> None:
    """Consume [0, end) of the given partitions; report (records, seconds).

    ``tuned`` gives the bare loop the same librdkafka defaults the source's reader uses
    (``KafkaClientConfig.librdkafka(ClientRole.READER)``), so a ratio never credits the source with what
    is only a setting.
    """
    from confluent_kafka import Consumer, TopicPartition

    from backlog_source.core.kafka_config import ClientRole, KafkaClientConfig

    config = {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False, "enable.partition.eof": True}
    if tuned:  # exactly the librdkafka configuration the source's reader uses
        config = KafkaClientConfig(bootstrap_servers=bootstrap).librdkafka(ClientRole.READER)
    consumer = Consumer(config)
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    remaining = set(ends)
    records = 0
    size = 0
    while remaining:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                records += 1
                size += len(message.value())
                if message.offset() + 1 >= ends[message.partition()]:
                    remaining.discard(message.partition())
    elapsed = time.perf_counter() - started
    consumer.close()
    queue.put((records, elapsed))


def run_bare(bootstrap: str, topic: str, ends: dict[int, int], processes: int, tuned: bool = True) -> dict:
    queue: mp.Queue = mp.Queue()
    groups = [dict(list(ends.items())[i::processes]) for i in range(processes)]
    workers = [mp.Process(target=bare_consumer, args=(bootstrap, topic, g, tuned, queue)) for g in groups]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=600) for _ in workers]
    wall = time.perf_counter() - started
    for worker in workers:
        worker.join()
    records = sum(r for r, _ in results)
    # Wall time includes process start; the slowest worker's own loop time is reported too.
    return {"records": records, "seconds": wall, "loop_seconds": max(s for _, s in results), "records_per_s": records / wall}


def trivial_startup(spark, bootstrap: str) -> float:
    """Seconds from ``start()`` to the first trigger of a Python source that reads nothing."""
    return first_trigger_and_total_s(spark.readStream.format("trivial_python").load())[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds of every reader")
    args = parser.parse_args()

    broker = start_kafka()
    try:
        topic = "bench-read"
        create_topic(broker.bootstrap_servers, topic, args.partitions)
        value = b"x" * args.value_size
        per = args.records // args.partitions
        t0 = time.perf_counter()
        total = produce(broker.bootstrap_servers, topic, ((i % args.partitions, None, value) for i in range(per * args.partitions)))
        print(f"produced {total} records in {time.perf_counter() - t0:.1f} s")
        ends = {p: per for p in range(args.partitions)}

        spark = spark_session()
        register_trivial_source(spark)
        run_source(spark, broker.bootstrap_servers, topic, total)  # warm-up: JVM and Python workers
        trivial_startup(spark, broker.bootstrap_servers)
        results: dict[str, list[dict]] = {"bare_1_librdkafka_defaults": [], "bare_1": [], "bare_2": [], "source": []}
        startups: list[float] = []
        for _ in range(args.repeats):
            startups.append(trivial_startup(spark, broker.bootstrap_servers))
            results["bare_1_librdkafka_defaults"].append(run_bare(broker.bootstrap_servers, topic, ends, 1, tuned=False))
            results["bare_1"].append(run_bare(broker.bootstrap_servers, topic, ends, 1))
            results["bare_2"].append(run_bare(broker.bootstrap_servers, topic, ends, 2))
            results["source"].append(run_source(spark, broker.bootstrap_servers, topic, total))
            for name, runs in results.items():
                print(f"{name}: {runs[-1]['records_per_s']:,.0f} records/s ({runs[-1]['seconds']:.2f} s)")
        spark.stop()
    finally:
        broker.stop()

    rates = {name: median_and_spread([r["records_per_s"] for r in runs]) for name, runs in results.items()}
    source = rates["source"]["median"]
    source_parts = {key: median_and_spread([r[key] for r in results["source"]])
                    for key in ("records_per_s_from_first_trigger", "records_per_s_in_add_batch",
                                "seconds", "from_first_trigger_s", "add_batch_s")}
    trivial = median_and_spread(startups)
    summary = {
        "command": "python -m benchmarks.read_throughput " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "records": total,
        "partitions": args.partitions,
        "value_size": args.value_size,
        "repeats": args.repeats,
        "runs": results,
        "trivial_python_startup_s": startups,
        "records_per_s": rates,
        "source_parts": source_parts,
        "ratio_source_from_first_trigger_vs_bare_2":
            source_parts["records_per_s_from_first_trigger"]["median"] / rates["bare_2"]["median"],
        "ratio_source_vs_bare_1": source / rates["bare_1"]["median"],
        "ratio_source_vs_bare_2": source / rates["bare_2"]["median"],
        "ratio_source_vs_bare_1_librdkafka_defaults": source / rates["bare_1_librdkafka_defaults"]["median"],
    }
    rows = [f"| {name} | {with_spread(r, ',.0f')} |" for name, r in rates.items()]
    write_results("read_throughput", "read_throughput", summary, [
        "# Read throughput", "",
        f"Command: `{summary['command']}` ({summary['machine']['cpus']} cores, Python {summary['machine']['python']}, "
        "Spark's default settings)", "",
        f"{total:,} records of {args.value_size} bytes over {args.partitions} partitions; median of {args.repeats} "
        "interleaved rounds (min-max) after a warm-up query.", "",
        "| reader | records/s |", "| --- | ---: |", *rows, "",
        f"- source / one bare consumer: **{summary['ratio_source_vs_bare_1']:.2f}x** (target >= 1.0x)",
        f"- source / two bare consumers in parallel: **{summary['ratio_source_vs_bare_2']:.2f}x** (target >= 0.8x)",
        f"- source / one bare consumer on librdkafka defaults: **{summary['ratio_source_vs_bare_1_librdkafka_defaults']:.2f}x**",
        "",
        "`bare_1` and `bare_2` use the same librdkafka configuration as the source's reader;",
        "`bare_1_librdkafka_defaults` shows what that setting alone is worth. The source's time includes",
        "query start-up and per-batch planning; the bare consumers' includes process start.",
        "",
        "Where the source's time goes (median (min-max) of the same rounds):", "",
        "| part | seconds | records/s |", "| --- | ---: | ---: |",
        f"| start() -> terminated | {with_spread(source_parts['seconds'], '.2f')} | {with_spread(rates['source'], ',.0f')} |",
        f"| first trigger -> terminated | {with_spread(source_parts['from_first_trigger_s'], '.2f')} | "
        f"{with_spread(source_parts['records_per_s_from_first_trigger'], ',.0f')} |",
        f"| Spark's addBatch (the read) | {with_spread(source_parts['add_batch_s'], '.2f')} | "
        f"{with_spread(source_parts['records_per_s_in_add_batch'], ',.0f')} |",
        f"| a Python source that reads nothing: start() -> first trigger | {with_spread(trivial, '.2f')} | |", "",
        f"- source from its first trigger / two bare consumers: "
        f"**{summary['ratio_source_from_first_trigger_vs_bare_2']:.2f}x**: the query's start-up left out, which "
        "a Python source that reads nothing pays too (last row)",
    ])


if __name__ == "__main__":
    main()
