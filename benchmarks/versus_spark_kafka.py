"""Read throughput of format("backlog") against Spark's own format("kafka"), on Apache Kafka.

What a user choosing this project compares (issue 24, benchmark 2): the same topic on the
same Apache Kafka broker (single-node KRaft from ``make jvm``), read by

* ``kafka``: Spark's ``format("kafka")`` (spark-sql-kafka-0-10 of the exact Spark version),
* ``backlog``: ``format("backlog")``,

each with ``Trigger.AvailableNow`` into ``noop`` from ``startingOffsets=earliest``, Spark's
default settings (``local[*]``, default memory) but for the connector on ``spark.jars``
(which a user of ``format("kafka")`` adds too), no read limit (each source's default). Wall
time from ``start()`` to termination, and from the first trigger (the query's start-up left
out). One warm-up query of each first, then ``--rounds`` rounds in rotated order; the report
gives medians with the spread (min-max) and ratios of medians taken in the same run.

Usage::

    .venv/bin/python -m benchmarks.versus_spark_kafka [--records 2000000] [--partitions 8] [--rounds 5]

Writes ``benchmarks/results/versus_spark_kafka/versus_spark_kafka_<records>_<partitions>p.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


from backlog_source.testing.apache_kafka import kafka_version, spark_kafka_connector_jars, start_kafka
from backlog_source.testing.broker import create_topic, produce
from benchmarks.harness import (
    first_trigger_at,
    machine,
    median_and_spread,
    rotated,
    run_available_now,
    spark_session,
    with_spread,
    write_results,
)

SOURCES = ["kafka", "backlog"]


def drain(spark, source: str, bootstrap: str, topic: str, expected: int) -> dict:
    df = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").load())
    started, wall, query = run_available_now(df)
    progress = [json.loads(p.json) for p in query.recentProgress]
    records = sum(p["numInputRows"] for p in progress)
    if records != expected:
        raise RuntimeError(f"format({source!r}) read {records} records, expected {expected}")
    from_first = wall - (first_trigger_at(progress) - started)
    return {"seconds": wall, "records_per_s": records / wall, "from_first_trigger_s": from_first,
            "records_per_s_from_first_trigger": records / from_first, "batches": len(progress),
            "add_batch_s": sum(p["durationMs"].get("addBatch", 0) for p in progress) / 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    broker = start_kafka(heap_mb=1024)
    try:
        topic = "bench-versus"
        create_topic(broker.bootstrap_servers, topic, args.partitions)
        value = b"x" * args.value_size
        t0 = time.perf_counter()
        total = produce(broker.bootstrap_servers, topic,
                        ((i % args.partitions, b"k%d" % (i % 1000), value) for i in range(args.records)))
        print(f"produced {total:,} records in {time.perf_counter() - t0:.1f} s")
        spark = spark_session(jars=spark_kafka_connector_jars())
        for source in SOURCES:  # warm-up: JVM, Python workers, the connector's classes
            drain(spark, source, broker.bootstrap_servers, topic, total)
        runs: dict[str, list[dict]] = {s: [] for s in SOURCES}
        for round_index in range(args.rounds):
            for source in rotated(SOURCES, round_index):
                runs[source].append(drain(spark, source, broker.bootstrap_servers, topic, total))
                print(f"round {round_index}: {source}: {runs[source][-1]['records_per_s']:,.0f} records/s "
                      f"({runs[source][-1]['seconds']:.2f} s, {runs[source][-1]['batches']} batches)")
        import pyspark

        spark_version = pyspark.__version__
        spark.stop()
    finally:
        broker.stop()

    figures = {s: {key: median_and_spread([r[key] for r in runs[s]])
                   for key in ("records_per_s", "seconds", "records_per_s_from_first_trigger", "from_first_trigger_s",
                               "add_batch_s")} for s in SOURCES}
    ratio = figures["backlog"]["records_per_s"]["median"] / figures["kafka"]["records_per_s"]["median"]
    ratio_first = (figures["backlog"]["records_per_s_from_first_trigger"]["median"]
                   / figures["kafka"]["records_per_s_from_first_trigger"]["median"])
    per_round = [b["records_per_s"] / k["records_per_s"] for b, k in zip(runs["backlog"], runs["kafka"])]
    name = f"versus_spark_kafka_{args.records // 1_000_000}m_{args.partitions}p"
    summary = {"command": "python -m benchmarks.versus_spark_kafka " + " ".join(sys.argv[1:]), "machine": machine(),
               "kafka": kafka_version(), "spark": spark_version, "records": total, "partitions": args.partitions,
               "value_size": args.value_size, "rounds": args.rounds, "runs": runs, "figures": figures,
               "ratio_backlog_vs_kafka_from_start": ratio, "ratio_backlog_vs_kafka_from_first_trigger": ratio_first,
               "ratio_per_round": per_round}
    rows = [f"| `format(\"{s}\")` | {with_spread(figures[s]['records_per_s'], ',.0f')} | "
            f"{with_spread(figures[s]['seconds'], '.2f')} | {with_spread(figures[s]['from_first_trigger_s'], '.2f')} | "
            f"{with_spread(figures[s]['records_per_s_from_first_trigger'], ',.0f')} | "
            f"{with_spread(figures[s]['add_batch_s'], '.2f')} |" for s in SOURCES]
    write_results("versus_spark_kafka", name, summary, [
        f"# Read throughput against format(\"kafka\"): {total:,} records, {args.partitions} partitions", "",
        f"Command: `{summary['command']}` ({summary['machine']['cpus']} cores; Apache Kafka {summary['kafka']}, "
        f"Spark {spark_version}, Spark's default settings, `Trigger.AvailableNow` into `noop`, no read limit)", "",
        f"{args.value_size}-byte values, small keys; median of {args.rounds} rounds in rotated order (min-max) after "
        "a warm-up query of each.", "",
        "| source | records/s from start() | start() -> end, s | first trigger -> end, s | records/s from first "
        "trigger | addBatch, s |", "| --- | ---: | ---: | ---: | ---: | ---: |", *rows, "",
        f"- backlog / kafka from `start()`: **{ratio:.2f}x** (target >= 1.0x; per round "
        f"{min(per_round):.2f}-{max(per_round):.2f}x)",
        f"- backlog / kafka from the first trigger: **{ratio_first:.2f}x**",
    ])


if __name__ == "__main__":
    main()
