"""Low-latency mode: end-to-end latency of live records into a caught-up query, what a
small batch costs and where its time goes, broker requests while idle, and a wide topic.

After a warm-up query, for each trigger (``0 seconds``, ``250 milliseconds``, ``1 second``)
on a fresh topic of 8 partitions: a caught-up ``format("backlog")`` query into ``noop``;
first 10 s with nothing to read (the driver's broker requests per second are counted by a
proxy in front of the broker, by client id), then ``--rate`` records/s for ``--seconds``.
Reported per trigger: latency p50/p99 (appended to Kafka -> batch committed), batch time p50/p99,
Spark's ``durationMs`` breakdown (median per key), and the source's own step timings
(``BACKLOG_SOURCE_STEP_TIMINGS``). Then the wide case: 1,024 partitions, 1 s trigger,
~1,500 records per batch: batch time and the number of tasks per batch.

Every trigger runs ``--runs`` times (interleaved: run 1 of each trigger, then run 2, ...);
the report gives the median over runs and the spread (min-max) of each figure.

Usage::

    .venv/bin/python -m benchmarks.latency [--runs 3] [--rate 1000] [--seconds 120] [--triggers "0 seconds,250 milliseconds,1 second"]

Writes ``benchmarks/results/latency/latency.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from backlog_source.core import step_timings
from backlog_source.core.buckets import Bucket
from backlog_source.core.kafka_config import ClientRole, KafkaClientConfig
from backlog_source.split.planning import TASK_RECORDS, pack_tasks, plan_ranges
from benchmarks.harness.broker_and_spark import spark_session, warm_up
from benchmarks.harness.progress import ProgressLog, offset_of
from benchmarks.harness.record_latency import timed_latencies, windows
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.runs import wait_until
from benchmarks.harness.stats import fmt, median_and_spread, percentile, with_spread
from benchmarks.harness.traffic import (
    create_live_topic,
    delivered_ends,
    log_end_offsets,
    produce_and_catch_up,
    start_producer,
)
from tests.support.kafka_proxy import counting_broker

DRIVER_CLIENTS = ("backlog-source-admin", "backlog-source-events-reader")
DURATION_KEYS = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


IDLE_SECONDS = 10.0
WINDOW_S = 30.0  # latency is also reported per window of produce time (the broker slows down, see README)


def start_query(spark, bootstrap: str, topic: str, trigger: str, checkpoint: str):
    df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "latest").load())
    return (df.writeStream.format("noop").trigger(processingTime=trigger)
            .option("checkpointLocation", checkpoint).start())


def run_trigger(spark, log: ProgressLog, broker, proxy, trigger: str, args, timings_dir: Path) -> dict:
    topic = f"latency-{trigger.replace(' ', '-')}-{int(time.time())}"
    create_live_topic(broker.bootstrap_servers, topic, 8)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = start_query(spark, broker.bootstrap_servers, topic, trigger, checkpoint)
        try:
            wait_until(lambda: query.status["message"] != "Initializing sources", 120, "the query did not start")
            time.sleep(2)  # the first triggers run their one-off setup
            before = sum(proxy.requests(client) for client in DRIVER_CLIENTS)
            time.sleep(IDLE_SECONDS)  # deliberately idle: requests counted over a fixed window
            idle_requests = sum(proxy.requests(client) for client in DRIVER_CLIENTS) - before
            for f in timings_dir.glob("*.jsonl"):
                f.unlink()
            delivered, kept_up = produce_and_catch_up(query, broker.bootstrap_servers, topic, 8, args.rate, args.seconds)
            if not kept_up:
                raise RuntimeError(f"{topic}: the query did not catch up within 300 s")
        finally:
            query.stop()
    progress = [p for p in log.of(query.id) if p["numInputRows"]]
    timed = timed_latencies(topic, progress, delivered)
    latencies = [latency for _, latency in timed]
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    return {
        "trigger": trigger,
        "windows": windows(timed, WINDOW_S),
        "records": len(delivered),
        "records_measured": len(latencies),
        "latency_p50_s": percentile(latencies, 0.50),
        "latency_p99_s": percentile(latencies, 0.99),
        "batches": len(progress),
        "batch_p50_s": percentile(seconds, 0.50),
        "batch_p99_s": percentile(seconds, 0.99),
        "records_per_batch_median": statistics.median(p["numInputRows"] for p in progress) if progress else None,
        "duration_ms_median": {k: statistics.median(p["durationMs"].get(k, 0) for p in progress) for k in DURATION_KEYS}
        if progress else {},
        "idle_driver_requests_per_s": idle_requests / IDLE_SECONDS,
        "steps": step_report(timings_dir),
    }


def run_bare(broker, args) -> dict:
    """The same live traffic read without Spark by a bare confluent-kafka micro-batch loop:
    each cycle asks for the latest offsets, reads ``[position, latest)`` of every partition
    with a fresh consumer configured as the source's reader, and a record is done when the
    cycle that read it ends. What the broker lets any micro-batch reader do here; its
    ListOffsets and fetch times, per window, show how the broker's own cost grows."""
    topic = f"latency-bare-{int(time.time())}"
    create_live_topic(broker.bootstrap_servers, topic, 8)
    config = KafkaClientConfig(bootstrap_servers=broker.bootstrap_servers)
    admin = AdminClient(config.librdkafka(ClientRole.ADMIN))
    positions = log_end_offsets(admin, topic, 8)
    producer, out = start_producer(broker.bootstrap_servers, topic, 8, args.rate, args.seconds)
    timed, cycles, steps = [], [], []
    final: dict[int, int] | None = None  # where the live traffic ended, once the producer said
    while final is None or any(positions[p] < end for p, end in final.items()):
        if final is None and not out.empty():
            final = delivered_ends(out.get())
        started = time.time()
        ends = log_end_offsets(admin, topic, 8)
        listed = time.time()
        if ends == positions:
            time.sleep(0.01)  # Spark's idle poll interval
            continue
        consumer = Consumer(config.librdkafka(ClientRole.READER))
        wanted = {p: e for p, e in ends.items() if e > positions[p]}
        consumer.assign([TopicPartition(topic, p, positions[p]) for p in wanted])
        stamps, first = [], None
        while any(positions[p] < e for p, e in wanted.items()):
            missing = sum(max(0, e - positions[p]) for p, e in wanted.items())
            for message in consumer.consume(missing, 1.0):
                if message.error() is None and message.offset() < wanted.get(message.partition(), -1):
                    stamps.append(message.timestamp()[1])
                    positions[message.partition()] = message.offset() + 1
                    first = first or time.time()
                elif message.error() is not None and message.error().code() == KafkaError._PARTITION_EOF:
                    # Records at or past this cycle's end are read again by the next cycle.
                    end = wanted.get(message.partition(), positions[message.partition()])
                    positions[message.partition()] = max(positions[message.partition()], min(message.offset(), end))
        consumer.close()
        finished = time.time()
        timed += [(ts / 1000, finished - ts / 1000) for ts in stamps]
        cycles.append(finished - started)
        steps.append((started, (listed - started) * 1000, ((first or finished) - listed) * 1000))
    producer.join(30)
    latencies = [latency for _, latency in timed]
    origin = steps[0][0] if steps else 0
    step_windows = []
    for index in range(int(args.seconds // WINDOW_S) + 1):
        chosen = [s for s in steps if index * WINDOW_S <= s[0] - origin < (index + 1) * WINDOW_S]
        if chosen:
            step_windows.append({"from_s": index * WINDOW_S, "list_offsets_ms_median": statistics.median(s[1] for s in chosen),
                                 "first_fetch_ms_median": statistics.median(s[2] for s in chosen)})
    return {
        "trigger": "bare loop (no Spark)",
        "records_measured": len(latencies),
        "latency_p50_s": percentile(latencies, 0.50),
        "latency_p99_s": percentile(latencies, 0.99),
        "batches": len(cycles),
        "batch_p50_s": percentile(cycles, 0.50),
        "batch_p99_s": percentile(cycles, 0.99),
        "windows": windows(timed, WINDOW_S),
        "broker_windows": step_windows,
    }


def step_report(directory: Path) -> dict:
    """Median, p99 and count of each step the source timed (BACKLOG_SOURCE_STEP_TIMINGS)."""
    steps: dict[str, list[float]] = defaultdict(list)
    for path in directory.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            steps[entry["step"]].append(entry["ms"])
    return {name: {"median_ms": statistics.median(v), "p99_ms": percentile(v, 0.99), "count": len(v)}
            for name, v in sorted(steps.items())}


def run_wide(spark, log: ProgressLog, broker, args) -> dict:
    """1,024 partitions, a caught-up query with a 1 s trigger, ~1,500 records per batch."""
    partitions = 1024
    topic = f"latency-wide-{int(time.time())}"
    create_live_topic(broker.bootstrap_servers, topic, partitions)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = start_query(spark, broker.bootstrap_servers, topic, "1 second", checkpoint)
        try:
            wait_until(lambda: query.status["message"] != "Initializing sources", 120, "the wide query did not start")
            time.sleep(2)
            _, kept_up = produce_and_catch_up(query, broker.bootstrap_servers, topic, partitions, 1_500, args.wide_seconds)
            if not kept_up:
                raise RuntimeError(f"{topic}: the wide query did not catch up within 300 s")
        finally:
            query.stop()
    progress = [p for p in log.of(query.id) if p["numInputRows"]]
    tasks = []
    for p in progress:  # the same pure planning partitions() runs, so the same task count
        start = offset_of(p["sources"][0]["startOffset"]) or {"positions": {}}
        end = offset_of(p["sources"][0]["endOffset"])
        first = {Bucket(t, int(k)): o for t, parts in start["positions"].items() for k, o in parts.items()}
        last = {Bucket(t, int(k)): o for t, parts in end["positions"].items() for k, o in parts.items()}
        tasks.append(len(pack_tasks(plan_ranges(first, last), task_records=TASK_RECORDS)))
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    return {
        "partitions": partitions,
        "batches": len(progress),
        "records_per_batch_median": statistics.median(p["numInputRows"] for p in progress) if progress else None,
        "tasks_per_batch_median": statistics.median(tasks) if tasks else None,
        "batch_p50_s": percentile(seconds, 0.5),
        "batch_p99_s": percentile(seconds, 0.99),
        "add_batch_ms_median": statistics.median(p["durationMs"].get("addBatch", 0) for p in progress) if progress else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=1_000)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--triggers", default="0 seconds,250 milliseconds,1 second")
    parser.add_argument("--wide-seconds", type=float, default=30)
    parser.add_argument("--no-wide", action="store_true")
    args = parser.parse_args()

    timings_dir = Path(tempfile.mkdtemp(prefix="backlog-steps-"))
    step_timings.switch_on(str(timings_dir))  # local mode: every Python worker inherits it
    with counting_broker() as (broker, proxy):
        spark = spark_session()
        log = ProgressLog()
        spark.streams.addListener(log.listener)
        warm_up(spark, broker.bootstrap_servers, records=50_000)
        triggers = [t.strip() for t in args.triggers.split(",")]
        runs: dict[str, list[dict]] = {t: [] for t in triggers}
        bare_runs: list[dict] = []
        for _ in range(args.runs):
            for trigger in triggers:
                runs[trigger].append(run_trigger(spark, log, broker, proxy, trigger, args, timings_dir))
            bare_runs.append(run_bare(broker, args))
        results = [summarise(trigger, runs[trigger]) for trigger in triggers]
        bare = summarise("bare loop (no Spark)", bare_runs)
        wide = None
        if not args.no_wide:
            wide_runs = [run_wide(spark, log, broker, args) for _ in range(args.runs)]
            wide = {"partitions": wide_runs[0]["partitions"], "runs": wide_runs}
            for name in ("records_per_batch_median", "tasks_per_batch_median", "batch_p50_s", "batch_p99_s",
                         "add_batch_ms_median"):
                wide[name] = median_and_spread([r[name] for r in wide_runs if r[name] is not None])
        spark.stop()
    report(results, bare, wide, args)


FIGURES = ("latency_p50_s", "latency_p99_s", "batch_p50_s", "batch_p99_s", "records_per_batch_median",
           "idle_driver_requests_per_s")


def summarise(trigger: str, runs: list[dict]) -> dict:
    """The median over runs of each figure, with its spread; every run kept as measured."""
    summary = {"trigger": trigger, "runs": runs}
    for name in FIGURES:
        summary[name] = median_and_spread([r[name] for r in runs if r.get(name) is not None])
    summary["batches"] = median_and_spread([r["batches"] for r in runs])
    summary["duration_ms_median"] = {
        k: statistics.median(r.get("duration_ms_median", {}).get(k, 0) for r in runs) for k in DURATION_KEYS}
    summary["windows"] = [
        {"from_s": w["from_s"],
         "p50": median_and_spread([r["windows"][i]["p50"] for r in runs if len(r["windows"]) > i]),
         "p99": median_and_spread([r["windows"][i]["p99"] for r in runs if len(r["windows"]) > i])}
        for i, w in enumerate(max((r["windows"] for r in runs), key=len))]
    return summary


def report(results: list[dict], bare: dict, wide: dict | None, args) -> None:
    command = "python -m benchmarks.latency " + " ".join(sys.argv[1:])
    summary = {"command": command, "machine": machine(), "rate": args.rate, "seconds": args.seconds,
               "results": results, "bare_loop": bare, "wide": wide,
               "targets": {"latency_p50_s": 0.35, "latency_p99_s": 0.8, "wide_batch_s": 1.0}}
    lines = [
        "# Low-latency mode: latency and per-batch cost", "",
        f"Command: `{command}` ({machine()['cpus']} cores, Spark defaults, noop sink). A caught-up query on 8 "
        f"partitions; {args.rate:,.0f} records/s for {args.seconds:.0f} s; latency = appended to Kafka -> batch committed. "
        f"Median of {args.runs} runs per trigger (min-max across runs) after a warm-up query.", "",
        "| trigger | latency p50 s | latency p99 s | batch p50 s | batch p99 s | records/batch | batches | idle driver requests/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(f"| {r['trigger']} | {with_spread(r['latency_p50_s'])} | {with_spread(r['latency_p99_s'])} | "
                     f"{with_spread(r['batch_p50_s'])} | {with_spread(r['batch_p99_s'])} | {with_spread(r['records_per_batch_median'], '.0f')} | "
                     f"{with_spread(r['batches'], '.0f')} | {with_spread(r['idle_driver_requests_per_s'], '.1f')} |")
    lines.append(f"| {bare['trigger']} | {with_spread(bare['latency_p50_s'])} | {with_spread(bare['latency_p99_s'])} | "
                 f"{with_spread(bare['batch_p50_s'])} | {with_spread(bare['batch_p99_s'])} | n/a | {with_spread(bare['batches'], '.0f')} | n/a |")
    lines += ["", f"Latency p50 / p99 s by when the record was produced ({WINDOW_S:.0f} s windows from the first live record; "
              "median over runs):", "",
              "| trigger | " + " | ".join(f"{w['from_s']:.0f}-{w['from_s'] + WINDOW_S:.0f} s" for w in bare["windows"]) + " |",
              "| --- |" + " ---: |" * len(bare["windows"])]
    for r in [*results, bare]:
        cells = [f"{fmt(w['p50']['median'])} / {fmt(w['p99']['median'])}" for w in r["windows"]][:len(bare["windows"])]
        lines.append(f"| {r['trigger']} | " + " | ".join(cells) + " |")
    broker = [w for run in bare["runs"][:1] for w in run["broker_windows"]]
    if broker:
        lines += ["", "The broker's own cost in the bare loop's first run (median per window, ms): "
                  + "; ".join(f"{w['from_s']:.0f} s: ListOffsets {w['list_offsets_ms_median']:.1f}, first fetch "
                              f"{w['first_fetch_ms_median']:.1f}" for w in broker)]
    lines += ["", "Spark's `durationMs` per batch (median, ms):", "",
              "| trigger | " + " | ".join(DURATION_KEYS) + " |", "| --- |" + " ---: |" * len(DURATION_KEYS)]
    for r in results:
        lines.append(f"| {r['trigger']} | " + " | ".join(fmt(r["duration_ms_median"].get(k), ".0f") for k in DURATION_KEYS) + " |")
    first = results[0]
    lines += ["", f"The source's own steps with the `{first['trigger']}` trigger, first run (median / p99 ms, count):", ""]
    for name, s in first["runs"][0]["steps"].items():
        lines.append(f"- `{name}`: {s['median_ms']:.1f} / {fmt(s['p99_ms'], '.1f')} ms ({s['count']})")
    if wide:
        lines += ["", f"Wide topic ({wide['partitions']:,} partitions, 1 s trigger, {with_spread(wide['records_per_batch_median'], '.0f')} "
                  f"records per batch, {args.runs} runs): batch p50 {with_spread(wide['batch_p50_s'])} s, p99 {with_spread(wide['batch_p99_s'])} s, "
                  f"addBatch median {with_spread(wide['add_batch_ms_median'], '.0f')} ms, {with_spread(wide['tasks_per_batch_median'], '.0f')} "
                  f"task(s) per batch (target: under 1 s)."]
    write_results("latency", "latency", summary, lines)


if __name__ == "__main__":
    main()
