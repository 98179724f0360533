"""Read throughput: format("backlog") against Spark's format("kafka") and bare confluent-kafka
loops, on the same Apache Kafka topic, in the same rounds.

Issue 24, benchmark 2. One topic of ``--records`` records (``--value-size`` bytes, small keys)
over ``--partitions`` partitions on a single-node Apache Kafka (``make jvm``), read by

* ``kafka``: Spark's ``format("kafka")`` (spark-sql-kafka-0-10 of the exact Spark version),
* ``backlog``: ``format("backlog")``,

each with ``Trigger.AvailableNow`` into ``noop`` from ``startingOffsets=earliest``, Spark's
default settings (``local[*]``, default memory; the connector on ``spark.jars``, which its
users add too), no read limit (each source's default); and by

* ``bare_1``: one process, one confluent-kafka consumer over every partition, with the
  source's reader configuration: what one Python process can read;
* ``bare_per_core``: one such process per core, the partitions dealt out among them.

Per run: seconds from ``start()`` to termination (query start-up included: what a user
waits for) and from the first trigger; Spark's ``addBatch``; the peak JVM heap in use and how
much the resident memory of Spark's Python processes grew in the run (sampled every 0.5 s;
idle workers of earlier queries are there from the start); Spark's task metrics
(run time, the JVM task threads' CPU); and **whose CPU the run burned**: CPU seconds of the broker, of
Spark's JVM, of the executors' Python workers, of the driver-side Python processes, and of
the kernel threads and the bare loops, from /proc (a process is counted also once it has ended). A Python source that reads nothing is timed
to its first trigger in every round: PySpark's share of any Python source's start-up.

One warm-up query of each source first, then ``--rounds`` rounds in rotated order; medians
with the spread (min-max) and ratios of medians from the same run. ``--profile`` then runs
``format("backlog")`` once more under py-spy (untimed) and writes where its Python workers
spend their time.

Usage::

    .venv/bin/python -m benchmarks.read_throughput [--records 2000000] [--partitions 8] [--rounds 5] [--profile]

Writes ``benchmarks/results/read_throughput/read_throughput_<records>_<partitions>p.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time

import pyspark

from backlog_source.demo.apache_kafka import kafka_version
from backlog_source.demo.topics import create_topic, produce
from benchmarks.harness.bare_consumers import run_bare
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.costs import (
    CpuAccount,
    MemorySampler,
    profile_python_workers,
    stage_ids,
    summarize_profile,
    task_metrics_since,
)
from benchmarks.harness.results import machine, results_folder, write_results
from benchmarks.harness.runs import drain_figures, first_trigger_and_total_s, rotated, run_available_now
from benchmarks.harness.stats import median_and_spread, with_spread
from benchmarks.harness.trivial_source import register_trivial_source

SOURCES = ("kafka", "backlog")
READERS = (*SOURCES, "bare_1", "bare_per_core")
CPU_KINDS = ("broker", "spark_jvm", "python_workers", "python_driver_side", "kernel", "bare_loops", "benchmark", "other")


def read_with_spark(spark, source: str, bootstrap: str, topic: str, expected: int) -> dict:
    """Drain ``topic`` with ``format(source)``; raises RuntimeError unless exactly
    ``expected`` records arrive."""
    df = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").load())
    known = stage_ids(spark)
    with CpuAccount() as cpu, MemorySampler(spark) as memory:
        started, wall, query = run_available_now(df)
    return {**drain_figures(started, wall, query, expected, f"format({source!r})"),
            "cpu_s": cpu.seconds, "heap_peak_mib": memory.heap_peak_mib,
            # Idle Python workers of earlier queries stay until Spark reaps them: what this run added.
            "python_rss_growth_mib": memory.python_peak_mib - memory.python_start_mib,
            **task_metrics_since(spark, known)}


def read_bare(bootstrap: str, topic: str, ends: dict[int, int], processes: int) -> dict:
    with CpuAccount() as cpu:
        result = run_bare(bootstrap, topic, ends, processes)
    return {**result, "cpu_s": cpu.seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="then profile format('backlog')'s Python workers once")
    parser.add_argument("--results-name", help="default: read_throughput_<millions of records>m_<partitions>p")
    args = parser.parse_args()
    name = args.results_name or f"read_throughput_{args.records // 1_000_000}m_{args.partitions}p"
    cores = os.cpu_count() or 1

    with kafka_and_spark(connector=True, warm_up_query=False) as bench:
        spark, bootstrap = bench.spark, bench.bootstrap
        topic = "bench-read"
        create_topic(bootstrap, topic, args.partitions)
        value = b"x" * args.value_size
        t0 = time.perf_counter()
        total = produce(bootstrap, topic, ((i % args.partitions, b"k%d" % (i % 1000), value) for i in range(args.records)))
        print(f"produced {total:,} records in {time.perf_counter() - t0:.1f} s", flush=True)
        ends = {p: len(range(p, args.records, args.partitions)) for p in range(args.partitions)}

        register_trivial_source(spark)
        for source in SOURCES:  # warm-up on this topic: the connector's classes, the Python workers
            read_with_spark(spark, source, bootstrap, topic, total)
        runs: dict[str, list[dict]] = {r: [] for r in READERS}
        startups: list[float] = []
        for round_index in range(args.rounds):
            startups.append(first_trigger_and_total_s(spark.readStream.format("trivial_python").load())[0])
            for reader in rotated(list(READERS), round_index):
                if reader in SOURCES:
                    run = read_with_spark(spark, reader, bootstrap, topic, total)
                else:
                    run = read_bare(bootstrap, topic, ends, 1 if reader == "bare_1" else cores)
                runs[reader].append(run)
                print(f"round {round_index}: {reader}: {run['records_per_s']:,.0f} records/s ({run['seconds']:.2f} s)",
                      flush=True)
        profile = profile_backlog(spark, bootstrap, topic, total, name) if args.profile else None
    report(runs, startups, profile, args, name, total, cores, pyspark.__version__)


def profile_backlog(spark, bootstrap: str, topic: str, total: int, name: str) -> dict:
    """One more (untimed) ``format("backlog")`` drain with py-spy on the Python workers."""
    with tempfile.TemporaryDirectory() as folder:
        prefix = os.path.join(folder, "profile")
        spies = profile_python_workers(120, prefix)
        time.sleep(1.0)  # py-spy attaches to the daemons before the query forks workers
        read_with_spark(spark, "backlog", bootstrap, topic, total)
        for spy in spies:
            spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled so far, as on Ctrl-C
            spy.wait(timeout=60)
        from pathlib import Path

        summary = summarize_profile(sorted(Path(folder).glob("profile.*.txt")))
    (results_folder("read_throughput") / f"{name}_profile.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def report(runs: dict[str, list[dict]], startups: list[float], profile: dict | None, args, name: str, total: int,
           cores: int, spark_version: str) -> None:
    def figure(reader: str, key: str) -> dict:
        return median_and_spread([r[key] for r in runs[reader] if r.get(key) is not None])

    def cpu(reader: str, kind: str) -> dict:
        return median_and_spread([r["cpu_s"].get(kind, 0.0) for r in runs[reader]])

    rates = {r: figure(r, "records_per_s") for r in READERS}
    ratio = {other: rates["backlog"]["median"] / rates[other]["median"] for other in READERS if other != "backlog"}
    ratio_first = (figure("backlog", "records_per_s_from_first_trigger")["median"]
                   / figure("kafka", "records_per_s_from_first_trigger")["median"])
    per_round = [b["records_per_s"] / k["records_per_s"] for b, k in zip(runs["backlog"], runs["kafka"])]
    command = "python -m benchmarks.read_throughput " + " ".join(sys.argv[1:])
    summary = {"command": command, "machine": machine(), "kafka": kafka_version(), "spark": spark_version,
               "records": total, "partitions": args.partitions, "value_size": args.value_size, "rounds": args.rounds,
               "runs": runs, "trivial_python_start_s": startups, "records_per_s": rates,
               "ratio_backlog_vs": ratio, "ratio_backlog_vs_kafka_from_first_trigger": ratio_first,
               "ratio_backlog_vs_kafka_per_round": per_round, "profile": profile}
    lines = [
        f"# Read throughput: {total:,} records, {args.partitions} partitions", "",
        f"Command: `{command}` ({cores} cores; Apache Kafka {summary['kafka']}, Spark {spark_version}, Spark's default "
        "settings; `Trigger.AvailableNow` into `noop`, no read limit)", "",
        f"{args.value_size}-byte values, small keys; median of {args.rounds} rounds in rotated order (min-max) after a "
        f"warm-up query of each source. Bare loops: confluent-kafka consumers with the source's reader settings, one "
        f"process (`bare_1`) and one per core (`bare_per_core`, {cores}); their time includes starting the processes.", "",
        "| reader | records/s from start | seconds from start | seconds from the first trigger | records/s from the "
        "first trigger | addBatch s | JVM heap peak MiB | Python RSS growth MiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for reader in READERS:
        spark_only = reader in SOURCES
        lines.append(f"| `{reader}` | {with_spread(rates[reader], ',.0f')} | {with_spread(figure(reader, 'seconds'))} | "
                     + (f"{with_spread(figure(reader, 'from_first_trigger_s'))} | "
                        f"{with_spread(figure(reader, 'records_per_s_from_first_trigger'), ',.0f')} | "
                        f"{with_spread(figure(reader, 'add_batch_s'))} | {with_spread(figure(reader, 'heap_peak_mib'), '.0f')} | "
                        f"{with_spread(figure(reader, 'python_rss_growth_mib'), '.0f')} |" if spark_only else " | | | | |"))
    lines += [
        "",
        f"- backlog / kafka from `start()`: **{ratio['kafka']:.2f}x** (target >= 1.0x; per round "
        f"{min(per_round):.2f}-{max(per_round):.2f}x); from the first trigger: {ratio_first:.2f}x",
        f"- backlog / one bare loop: {ratio['bare_1']:.2f}x; / one bare loop per core: {ratio['bare_per_core']:.2f}x",
        f"- a Python source that reads nothing, `start()` -> first trigger: {with_spread(median_and_spread(startups))} s "
        "(PySpark's share of a Python source's start-up)", "",
        "Whose CPU each run burned, CPU seconds (median): the broker, Spark's JVM (driver and executor are one JVM in "
        "`local[*]`), the executors' Python workers, the driver-side Python processes (the source's runner, `load()`), "
        "the kernel threads, the bare loops' processes, this benchmark's own process (the driver program); and Spark's task metrics: task run time and the JVM task threads' CPU.", "",
        "| reader | " + " | ".join(CPU_KINDS) + " | total | task run s | task JVM CPU s |",
        "| --- |" + " ---: |" * (len(CPU_KINDS) + 3),
    ]
    for reader in READERS:
        total_cpu = median_and_spread([sum(r["cpu_s"].values()) for r in runs[reader]])
        tasks = (f"{with_spread(figure(reader, 'task_run_s'), '.1f')} | {with_spread(figure(reader, 'task_jvm_cpu_s'), '.1f')}"
                 if reader in SOURCES else " | ")
        lines.append(f"| `{reader}` | " + " | ".join(f"{cpu(reader, k)['median']:.1f}" for k in CPU_KINDS)
                     + f" | {total_cpu['median']:.1f} | {tasks} |")
    if profile:
        lines += ["", f"py-spy on `format(\"backlog\")`'s Python workers, one drain ({profile['samples']:,} samples at "
                  "100 Hz; share of samples):", "", "| where the time was spent (self) | share |", "| --- | ---: |",
                  *(f"| `{fn}` | {share:.1%} |" for fn, share in profile["self"][:12]), "",
                  "| below which call (inclusive) | share |", "| --- | ---: |",
                  *(f"| `{fn}` | {share:.1%} |" for fn, share in profile["inclusive"][:25])]
    write_results("read_throughput", name, summary, lines)


if __name__ == "__main__":
    main()
