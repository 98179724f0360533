"""The main case against what a user would run instead: a job restarted after downtime.

Issue 24, benchmark 1. Per run, on a fresh topic of 8 partitions on Apache Kafka:

1. the job's earlier life: 1,000 records, read by the same query (same source and options)
   with ``Trigger.AvailableNow``, so its checkpoint ends at the log end;
2. downtime: ``--backlog`` records (2M) are written;
3. the restart: the query starts again on that checkpoint, and ``--rate`` records/s (1,000)
   of live traffic start with it and run for ``--live-seconds`` (120), as traffic goes on
   while a restarted job catches up.

Configurations (Spark's defaults, the sink ``noop`` or, with ``--query stateful``, a windowed
count with the RocksDB state store appended to Parquet, where every batch costs more):

* ``backlog-adaptive``: ``format("backlog")`` with ``start_backlog_aware(writer, "0 seconds",
  "250 milliseconds")``, ``backlog.maxOffsetsPerTrigger`` 5M and ``maxOffsetsPerTrigger`` 50k;
* ``backlog-fixed-0s``: ``format("backlog")`` with the same read limits and a fixed ``0 seconds``
  trigger, no listener (the source's backlog read limit alone);
* ``kafka-no-limit-0s``: ``format("kafka")`` as a user gets it (no read limit: the whole
  backlog in one batch), ``0 seconds`` trigger;
* ``kafka-50k-0s`` and ``kafka-50k-1s``: ``maxOffsetsPerTrigger`` 50k (sized for live
  traffic), ``0 seconds`` and ``1 second`` triggers;
* ``kafka-500k-0s``: a large limit, 500k, ``0 seconds``.

Figures per run: drain (the start call -> the batch that reaches the log end of the restart
moment committed), live latency p50/p99 of the records produced after the drain (appended to Kafka ->
batch committed, ``harness/record_latency.py``), the largest batch (records, seconds), and peak
memory sampled every 0.5 s: the JVM's heap in use (driver and executor are one JVM in
``local[*]``) and the resident memory of its Python processes (workers and the streaming
source's driver-side runner). One warm-up query per source first; ``--runs`` rounds in
rotated order; medians with the spread (min-max); every run in the JSON.

Targets (issue 24): no ``format("kafka")`` configuration better on both drain and p99; drain
<= 1.0x the fastest ``format("kafka")`` drain; p99 <= 1.1x the best ``format("kafka")`` p99.

Usage::

    .venv/bin/python -m benchmarks.restart_after_downtime [--runs 3] [--backlog 2000000] [--live-seconds 120]
        [--query noop|stateful] [--configs a,b,...] [--results-name NAME]

Writes ``benchmarks/results/restart_after_downtime/restart_after_downtime_<query>.{json,md,png}``
(or ``<--results-name>.*``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import pyspark

from backlog_source.demo.apache_kafka import kafka_version
from backlog_source.demo.topics import create_topic, produce
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.costs import MemorySampler
from benchmarks.harness.progress import ProgressLog, commit_time_reaching, drain_batches, step_table, timestamp_s
from benchmarks.harness.record_latency import timed_latencies
from benchmarks.harness.results import batch_timeline, machine, save_batch_timelines, write_results
from benchmarks.harness.runs import rotated, wait_for_commit
from benchmarks.harness.stats import fmt, median_and_spread, percentile, with_spread
from benchmarks.harness.traffic import await_deliveries, create_live_topic, delivered_ends, log_ends, start_producer

PARTITIONS = 8
HISTORY = 1_000
CONFIGS: dict[str, dict] = {
    "backlog-adaptive": {"source": "backlog", "adaptive": ("0 seconds", "250 milliseconds"),
                         "options": {"backlog.maxOffsetsPerTrigger": "5000000", "maxOffsetsPerTrigger": "50000"}},
    "backlog-fixed-0s": {"source": "backlog", "trigger": "0 seconds",
                         "options": {"backlog.maxOffsetsPerTrigger": "5000000", "maxOffsetsPerTrigger": "50000"}},
    "kafka-no-limit-0s": {"source": "kafka", "trigger": "0 seconds", "options": {}},
    "kafka-50k-0s": {"source": "kafka", "trigger": "0 seconds", "options": {"maxOffsetsPerTrigger": "50000"}},
    "kafka-50k-1s": {"source": "kafka", "trigger": "1 second", "options": {"maxOffsetsPerTrigger": "50000"}},
    "kafka-500k-0s": {"source": "kafka", "trigger": "0 seconds", "options": {"maxOffsetsPerTrigger": "500000"}},
}
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def source_frame(spark, config: dict, bootstrap: str, topic: str, query: str):
    df = (spark.readStream.format(config["source"]).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").options(**config["options"]).load())
    if query == "stateful":
        from pyspark.sql.functions import window

        df = df.selectExpr("timestamp").withWatermark("timestamp", "10 seconds").groupBy(window("timestamp", "5 seconds")).count()
    return df


def writer_of(df, query: str, checkpoint: str, output: str):
    writer = df.writeStream.option("checkpointLocation", checkpoint)
    if query == "stateful":
        return writer.format("parquet").outputMode("append").option("path", output)
    return writer.format("noop")


def run(spark, log: ProgressLog, bootstrap: str, name: str, args) -> dict:
    from backlog_source import start_backlog_aware

    config = CONFIGS[name]
    topic = f"bench-restart-{name}-{time.time_ns()}"
    create_live_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, ((i % PARTITIONS, b"k%d" % (i % 1000), b"h" * 100) for i in range(HISTORY)))
    with tempfile.TemporaryDirectory() as folder:
        checkpoint, output = f"{folder}/checkpoint", f"{folder}/out"
        # The job's earlier life: its checkpoint ends at the log end.
        earlier = writer_of(source_frame(spark, config, bootstrap, topic, args.query), args.query, checkpoint, output)
        first = earlier.trigger(availableNow=True).start()
        first.awaitTermination()
        if first.exception() is not None:
            raise RuntimeError(f"{name}: the earlier run failed: {first.exception()}")
        # Downtime: the backlog builds up.
        produce(bootstrap, topic, ((i % PARTITIONS, b"k%d" % (i % 1000), b"b" * 100) for i in range(args.backlog)))
        backlog_ends = log_ends(bootstrap, topic, PARTITIONS)

        writer = writer_of(source_frame(spark, config, bootstrap, topic, args.query), args.query, checkpoint, output)
        handle = query = None
        producer, out = start_producer(bootstrap, topic, PARTITIONS, args.rate, args.live_seconds)
        with MemorySampler(spark) as memory:
            called = time.time()
            if "adaptive" in config:
                handle = start_backlog_aware(writer, *config["adaptive"])
                query_id = handle.query.id
            else:
                query = writer.trigger(processingTime=config["trigger"]).start()
                query_id = query.id
            try:
                wait_for_commit(log, query_id, topic, backlog_ends, 900, f"{name}: the backlog was not drained")
                delivered = await_deliveries(producer, out, args.live_seconds + 300)
                wait_for_commit(log, query_id, topic, delivered_ends(delivered), 300,
                                f"{name}: the live traffic was not read")
            finally:
                running = handle.query if handle is not None else query
                failure = running.exception() if running is not None and not running.isActive else None
                if handle is not None:
                    handle.stop()
                elif query is not None:
                    query.stop()
            if failure is not None:
                raise RuntimeError(f"{name}: the query failed: {failure}")

    progress = [p for p in log.of(query_id) if p["numInputRows"]]
    drained_at = commit_time_reaching(progress, topic, backlog_ends)
    after_drain = [latency for produced, latency in timed_latencies(topic, progress, delivered) if produced >= drained_at]
    largest = max(progress, key=lambda p: p["numInputRows"])
    slowest = max(progress, key=lambda p: p["durationMs"]["triggerExecution"])
    result = {
        "drain_s": drained_at - called,
        "live_records_after_drain": len(after_drain),
        "latency_p50_s": percentile(after_drain, 0.50),
        "latency_p99_s": percentile(after_drain, 0.99),
        "largest_batch_records": largest["numInputRows"],
        "largest_batch_s": largest["durationMs"]["triggerExecution"] / 1000,
        # Spark's steps of that batch: the source's (latestOffset, addBatch) apart from Spark's commits.
        "largest_batch_steps_ms": largest["durationMs"],
        # The query id is the checkpoint's, so the earlier run's progress is in the log too.
        "first_trigger_s": min(t for p in log.of(query_id) if (t := timestamp_s(p["timestamp"])) >= called) - called,
        "slowest_batch_s": slowest["durationMs"]["triggerExecution"] / 1000,
        **drain_batches(progress, drained_at),
        "heap_peak_mib": memory.heap_peak_mib,
        "python_rss_peak_mib": memory.python_peak_mib,
        "python_rss_growth_mib": memory.python_peak_mib - memory.python_start_mib,
        "batch_timeline": batch_timeline(progress, called),
    }
    if not after_drain:
        # The drain outlasted the live traffic: no record arrived after it (a longer
        # --live-seconds is needed for this configuration); reported as n/a, not a crash.
        print(f"{name}: no live record was produced after the drain ended", flush=True)
    if handle is not None:
        result["switches"] = [{"to": t.to_mode, "apply_s": t.apply_seconds} for t in handle.transitions]
    print(f"{name}: drained {result['drain_s']:.1f} s in {result['batches_to_drain']} batches; live p50 "
          f"{fmt(result['latency_p50_s'])} s, p99 {fmt(result['latency_p99_s'])} s; largest batch "
          f"{result['largest_batch_records']:,} records in {result['largest_batch_s']:.1f} s; heap peak "
          f"{result['heap_peak_mib']:.0f} MiB, Python {result['python_rss_peak_mib']:.0f} MiB", flush=True)
    return result


def warm_up(spark, bootstrap: str, query: str) -> None:
    """A small query per source first, so no configuration pays the JVM's, the connector's
    or the Python workers' cold start."""
    topic = f"bench-warm-up-{time.time_ns()}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, ((i % PARTITIONS, None, b"w" * 100) for i in range(200_000)))
    for source in ("kafka", "backlog"):
        with tempfile.TemporaryDirectory() as folder:
            df = source_frame(spark, {"source": source, "options": {}}, bootstrap, topic, query)
            done = writer_of(df, query, f"{folder}/c", f"{folder}/o").trigger(availableNow=True).start()
            done.awaitTermination()


FIGURES = ("drain_s", "first_trigger_s", "latency_p50_s", "latency_p99_s", "largest_batch_records", "largest_batch_s", "slowest_batch_s",
           "batches_to_drain", "batches_after", "heap_peak_mib", "python_rss_peak_mib", "python_rss_growth_mib",
           "live_records_after_drain")


def compare(summaries: dict[str, dict], runs: dict[str, list[dict]], ours_name: str) -> dict:
    """``ours_name``'s drain and p99 against the fastest and best ``format("kafka")``
    configurations. A configuration whose drain outlasted the live traffic has no p99 (no
    record after its drain): it is left out of the p99 comparison, and a ratio that cannot be
    taken is None."""
    ours = summaries[ours_name]
    kafka = {n: s for n, s in summaries.items() if n.startswith("kafka-")}
    with_p99 = {n: s for n, s in kafka.items() if s["latency_p99_s"]["median"] is not None}
    fastest = min(kafka, key=lambda n: kafka[n]["drain_s"]["median"])
    best_p99 = min(with_p99, key=lambda n: with_p99[n]["latency_p99_s"]["median"]) if with_p99 else None

    def ratio(a, b):
        return None if a is None or b is None else a / b

    def better_on_both(s) -> bool:
        ours_p99, theirs_p99 = ours["latency_p99_s"]["median"], s["latency_p99_s"]["median"]
        return (s["drain_s"]["median"] < ours["drain_s"]["median"] and theirs_p99 is not None
                and (ours_p99 is None or theirs_p99 < ours_p99))

    return {
        "ours": ours_name,
        "drain_vs_fastest_kafka": ratio(ours["drain_s"]["median"], kafka[fastest]["drain_s"]["median"]),
        "fastest_kafka": fastest,
        "p99_vs_best_kafka": ratio(ours["latency_p99_s"]["median"],
                                   with_p99[best_p99]["latency_p99_s"]["median"] if best_p99 else None),
        "best_p99_kafka": best_p99,
        "kafka_better_on_both": [n for n, s in kafka.items() if better_on_both(s)],
        "per_round_drain_vs_fastest": [ratio(a["drain_s"], k["drain_s"])
                                       for a, k in zip(runs[ours_name], runs[fastest])],
        "per_round_p99_vs_best": [ratio(a["latency_p99_s"], k["latency_p99_s"])
                                  for a, k in zip(runs[ours_name], runs[best_p99])] if best_p99 else [],
    }


def report(runs: dict[str, list[dict]], args, spark_version: str) -> None:
    name = args.results_name or f"restart_after_downtime_{args.query}"
    command = "python -m benchmarks.restart_after_downtime " + " ".join(sys.argv[1:])
    summaries = {n: {f: median_and_spread([r[f] for r in rs if r.get(f) is not None]) for f in FIGURES}
                 for n, rs in runs.items()}
    ours = [n for n in runs if n.startswith("backlog-")]
    compared = ([compare(summaries, runs, n) for n in ours] if any(n.startswith("kafka-") for n in runs) else [])
    summary = {"command": command, "machine": machine(), "kafka": kafka_version(), "spark": spark_version,
               "query": args.query, "runs_per_config": args.runs, "backlog": args.backlog, "rate": args.rate,
               "live_seconds": args.live_seconds, "configs": {n: CONFIGS[n] for n in runs},
               "summaries": summaries, "compared": compared, "results": runs,
               "targets": {"drain_vs_fastest_kafka": 1.0, "p99_vs_best_kafka": 1.1, "kafka_better_on_both": []}}
    sink = ("a windowed count (5 s windows, 10 s watermark, RocksDB state store) appended to Parquet"
            if args.query == "stateful" else "`noop`")
    lines = [
        f"# A job restarted after downtime: format(\"backlog\") against format(\"kafka\") ({args.query})", "",
        f"Command: `{command}` ({machine()['cpus']} cores; Apache Kafka {summary['kafka']}, Spark {spark_version}, "
        f"Spark's default settings; sink: {sink}). Per run: a checkpoint at the log end of {HISTORY:,} records, then "
        f"{args.backlog:,} records of backlog over {PARTITIONS} partitions, then the restart with {args.rate:,.0f} "
        f"records/s of live traffic for {args.live_seconds:.0f} s from the restart. Median of {args.runs} rounds in "
        "rotated order (min-max) after a warm-up query per source. Latency: records produced after the drain, "
        "appended to Kafka (LogAppendTime) -> batch committed. Memory: peaks sampled every 0.5 s (JVM heap in use; resident memory "
        "of the JVM's Python processes).", "",
        "| configuration | drain s | start -> first trigger s | live p50 s | live p99 s | largest batch (records) | its time s | batches to "
        "drain | heap peak MiB | Python RSS peak MiB (growth in the run) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, s in summaries.items():
        lines.append(f"| {n} | {with_spread(s['drain_s'], '.1f')} | {with_spread(s['first_trigger_s'])} | "
                     f"{with_spread(s['latency_p50_s'])} | "
                     f"{with_spread(s['latency_p99_s'])} | {with_spread(s['largest_batch_records'], ',.0f')} | "
                     f"{with_spread(s['largest_batch_s'], '.1f')} | {with_spread(s['batches_to_drain'], '.0f')} | "
                     f"{with_spread(s['heap_peak_mib'], '.0f')} | {with_spread(s['python_rss_peak_mib'], '.0f')} "
                     f"(+{with_spread(s['python_rss_growth_mib'], '.0f')}) |")
    lines += ["", "The largest batch, by Spark's steps (`durationMs`, ms, median over rounds):", "",
              *step_table(runs, "largest_batch_steps_ms")]
    for c in compared:
        lines += ["", f"{c['ours']}:",
                  f"- drain / fastest `format(\"kafka\")` drain ({c['fastest_kafka']}): "
                  f"**{fmt(c['drain_vs_fastest_kafka'])}x** (target <= 1.0x; per round "
                  f"{', '.join(f'{fmt(r)}x' for r in c['per_round_drain_vs_fastest'])})",
                  f"- live p99 / best `format(\"kafka\")` p99 ({c['best_p99_kafka']}): "
                  f"**{fmt(c['p99_vs_best_kafka'])}x** (target <= 1.1x; per round "
                  f"{', '.join(f'{fmt(r)}x' for r in c['per_round_p99_vs_best'])})",
                  f"- `format(\"kafka\")` configurations better on both: {', '.join(c['kafka_better_on_both']) or 'none'}"]
    write_results("restart_after_downtime", name, summary, lines)
    # Records per batch over time, first round of every configuration.
    save_batch_timelines("restart_after_downtime", name, {"": runs})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=2_000_000)
    parser.add_argument("--rate", type=float, default=1_000)
    parser.add_argument("--live-seconds", type=float, default=120)
    parser.add_argument("--query", choices=("noop", "stateful"), default="noop")
    parser.add_argument("--results-name", default=None, help="result files' name (default restart_after_downtime_<query>)")
    parser.add_argument("--configs", default=",".join(n for n in CONFIGS if n != "backlog-fixed-0s"),
                        help="which configurations (backlog-fixed-0s is left out unless named)")
    args = parser.parse_args()
    names = [n.strip() for n in args.configs.split(",")]

    with kafka_and_spark(connector=True, warm_up_query=False) as bench:
        if args.query == "stateful":
            bench.spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        warm_up(bench.spark, bench.bootstrap, args.query)
        runs: dict[str, list[dict]] = {n: [] for n in names}
        for round_index in range(args.runs):
            for name in rotated(names, round_index):
                runs[name].append(run(bench.spark, bench.log, bench.bootstrap, name, args))
    report(runs, args, pyspark.__version__)


if __name__ == "__main__":
    main()
