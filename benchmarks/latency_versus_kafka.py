"""A caught-up query, format("backlog") against Spark's format("kafka"): end-to-end latency
and batch time at the same triggers, on the same broker; Spark's real-time mode as the floor;
and the driver's Kafka requests while idle.

Issue 24, benchmarks 3 and 4. What a user choosing between the two sees once the backlog is
gone. Three phases, each on Apache Kafka (single node, ``make jvm``), Spark's defaults:

1. **Latency** (a broker the clients reach directly). After a warm-up query and a short
   first run of each source, every round runs each configuration (source x trigger,
   ``0 seconds`` and ``250 milliseconds`` by default) in rotated order, each on a fresh topic
   of ``--partitions`` (8; ``--partitions 1024 --rate 1500 --triggers "1 second"`` is the
   wide-topic case): the query starts at ``latest`` into ``noop`` and ``--rate`` records/s
   arrive for ``--seconds``. Latency of a record: its LogAppendTime (when Kafka appended it) -> the commit of the batch
   that read it. Reported over the **steady state** (records produced after the first
   ``--settle-seconds`` of traffic: the first batches after a query starts, or after a minute
   without data, also pay one-off costs, such as Spark starting Python workers) and over
   the whole window. A configuration that has not caught up ``--catch-up-seconds`` after the
   traffic stopped **did not keep up**: reported as such, with the records it had not read.
2. **Idle requests** (a broker behind a counting proxy): the driver's Kafka requests per
   second over ``IDLE_SECONDS`` with nothing to read (this source's admin and control-topic
   clients, Spark's ``adminclient-*``). Kept apart from phase 1 because the proxy (a Python
   thread in this process) carries every byte, which no user's query has.
3. **Real-time mode** (Spark 4.1+), the floor: ``format("kafka")`` with
   ``trigger(realTime="5 minutes")``, update mode, into a Kafka topic (a sink it supports;
   ``noop`` is not one); a record's latency is the output record's CreateTime (set when Spark
   emits it) minus the input's LogAppendTime. Its long-running tasks need a slot per partition, so it runs
   in its own session with ``local[<partitions + 1>]`` (Spark's default, ``local[*]``, is 2
   slots here: 6 of 8 partitions would wait for the 5-minute batch to end). Python data
   sources cannot use this mode. Skipped above 64 partitions.

Medians over rounds with the spread (min-max).

Usage::

    .venv/bin/python -m benchmarks.latency_versus_kafka [--runs 3] [--rate 1000] [--seconds 60]
        [--partitions 8] [--triggers "0 seconds,250 milliseconds"] [--results-name NAME]
        [--no-real-time] [--no-idle-requests] [--transactional]

``--transactional`` writes the live traffic in transactions, as an exactly-once writer does:
every read that ends at the log end then ends past commit markers (issue 32).

Writes ``benchmarks/results/latency_versus_kafka/<results name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from backlog_source.demo.apache_kafka import kafka_version, start_kafka
from backlog_source.demo.topics import create_topic, produce
from benchmarks.harness.broker_and_spark import spark_session, warm_up
from benchmarks.harness.progress import ProgressLog, step_medians, step_table
from benchmarks.harness.record_latency import timed_latencies
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.runs import rotated, wait_until
from benchmarks.harness.stats import fmt, median_and_spread, percentile, with_spread
from benchmarks.harness.traffic import await_deliveries, create_live_topic, produce_and_catch_up, start_producer
from tests.support.kafka_proxy import counting_broker
from tests.support.spark_kafka import spark_kafka_connector_jars

IDLE_SECONDS = 10.0
#: The client ids (prefixes) of each source's driver-side Kafka clients.
DRIVER_CLIENTS = {"backlog": ("backlog-source-admin", "backlog-source-events-reader"), "kafka": ("adminclient",)}
LATENCY_FIGURES = ("latency_p50_s", "latency_p99_s", "whole_p50_s", "whole_p99_s", "batch_p50_s", "batch_p99_s",
                   "records_unread")
REAL_TIME_MAX_PARTITIONS = 64
REAL_TIME = "kafka @ real-time mode"


def start_query(spark, source: str, bootstrap: str, topic: str, trigger: str, checkpoint: str):
    df = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "latest").load())
    return df.writeStream.format("noop").trigger(processingTime=trigger).option("checkpointLocation", checkpoint).start()


def steady_and_whole(timed: list[tuple[float, float]], settle_s: float) -> dict:
    """p50/p99 of ``(produced at, latency)`` pairs: after the first ``settle_s`` of traffic,
    and over all of it."""
    if not timed:
        return {"latency_p50_s": None, "latency_p99_s": None, "whole_p50_s": None, "whole_p99_s": None}
    first = min(at for at, _ in timed)
    steady = [latency for at, latency in timed if at >= first + settle_s]
    whole = [latency for _, latency in timed]
    return {"latency_p50_s": percentile(steady, 0.50), "latency_p99_s": percentile(steady, 0.99),
            "whole_p50_s": percentile(whole, 0.50), "whole_p99_s": percentile(whole, 0.99)}


def run_latency(spark, log: ProgressLog, bootstrap: str, source: str, trigger: str, args) -> dict:
    """One configuration on a fresh topic: start at ``latest``, live traffic, latencies."""
    topic = f"lvk-{source}-{trigger.replace(' ', '-')}-{time.time_ns()}"
    create_live_topic(bootstrap, topic, args.partitions)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = start_query(spark, source, bootstrap, topic, trigger, checkpoint)
        try:
            wait_until(lambda: query.lastProgress is not None, 120, "the query's first trigger")
            delivered, kept_up = produce_and_catch_up(query, bootstrap, topic, args.partitions, args.rate, args.seconds,
                                                      args.catch_up_seconds, args.transactional)
            if kept_up:  # the last batches' progress events may still be on Spark's listener bus
                wait_until(lambda: len(timed_latencies(topic, log.of(query.id), delivered)) == len(delivered), 60,
                           f"{topic}: the progress events of the batches that read every record")
        finally:
            query.stop()
    progress = [p for p in log.of(query.id) if p["numInputRows"]]
    timed = timed_latencies(topic, progress, delivered)
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    # Latencies of a query that fell behind describe only what it managed to read.
    latencies = steady_and_whole(timed, args.settle_seconds) if kept_up else steady_and_whole([], 0)
    return {"records": len(delivered), "records_unread": len(delivered) - len(timed), "kept_up": kept_up,
            "batches": len(progress), "batch_p50_s": percentile(seconds, 0.50), "batch_p99_s": percentile(seconds, 0.99),
            "steps_p50_ms": step_medians(progress), **latencies}


def run_idle(spark, proxy, bootstrap: str, source: str, trigger: str, partitions: int) -> float:
    """The driver's Kafka requests per second of a query with nothing to read."""
    topic = f"idle-{source}-{trigger.replace(' ', '-')}-{time.time_ns()}"
    create_topic(bootstrap, topic, partitions)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = start_query(spark, source, bootstrap, topic, trigger, checkpoint)
        try:
            wait_until(lambda: query.lastProgress is not None, 120, "the query's first trigger")
            before = sum(proxy.requests(client) for client in DRIVER_CLIENTS[source])
            time.sleep(IDLE_SECONDS)  # deliberately idle: requests counted over a fixed window
            return (sum(proxy.requests(client) for client in DRIVER_CLIENTS[source]) - before) / IDLE_SECONDS
        finally:
            query.stop()


def run_real_time(spark, bootstrap: str, args) -> dict:
    """``format("kafka")`` in real-time mode into a Kafka topic; latency = output CreateTime -
    input LogAppendTime, which the query carries in the value."""
    from confluent_kafka import Consumer, TopicPartition

    source_topic, sink_topic = f"rtm-in-{time.time_ns()}", f"rtm-out-{time.time_ns()}"
    create_live_topic(bootstrap, source_topic, args.partitions)
    create_topic(bootstrap, sink_topic, 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rtm-latency", "enable.auto.commit": False})
    consumer.assign([TopicPartition(sink_topic, 0, 0)])
    out: list[tuple[float, float]] = []  # (produced at, latency) of every record the query emitted

    def read_output(wait_s: float) -> None:
        for message in consumer.consume(10_000, wait_s):
            if message.error() is None:
                produced_ms = int(message.value())
                out.append((produced_ms / 1000, (message.timestamp()[1] - produced_ms) / 1000))

    df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source_topic)
          .option("startingOffsets", "latest").load()
          .selectExpr("CAST(CAST(unix_millis(timestamp) AS STRING) AS BINARY) AS value"))
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (df.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", sink_topic).option("checkpointLocation", checkpoint).outputMode("update")
                 .trigger(realTime="5 minutes").start())
        try:
            # Running means a first record goes through: probe until one does.
            def reading() -> bool:
                produce(bootstrap, source_topic, [(0, None, b"probe")])
                read_output(1.0)
                return bool(out)

            wait_until(reading, 120, "the real-time query did not start reading")
            out.clear()
            producer, done = start_producer(bootstrap, source_topic, args.partitions, args.rate, args.seconds)
            delivered = await_deliveries(producer, done, args.seconds + 120)
            deadline = time.time() + args.catch_up_seconds
            while len(out) < len(delivered) and time.time() < deadline:
                read_output(1.0)
        finally:
            query.stop()
            consumer.close()
    measured = [(at, latency) for at, latency in out if at >= min(ts for _, _, ts in delivered) / 1000]
    kept_up = len(measured) >= len(delivered)
    return {"records": len(delivered), "records_unread": max(0, len(delivered) - len(measured)), "kept_up": kept_up,
            "batches": None, "batch_p50_s": None, "batch_p99_s": None,
            **steady_and_whole(measured if kept_up else [], args.settle_seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=1_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--settle-seconds", type=float, default=10, help="left out of the steady-state figures")
    parser.add_argument("--catch-up-seconds", type=float, default=120,
                        help="after the traffic: longer than this to catch up counts as not keeping up")
    parser.add_argument("--triggers", default="0 seconds,250 milliseconds")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--results-name", default="latency_versus_kafka")
    parser.add_argument("--no-real-time", dest="real_time", action="store_false")
    parser.add_argument("--no-idle-requests", dest="idle_requests", action="store_false")
    parser.add_argument("--transactional", action="store_true",
                        help="the live traffic in transactions (a commit marker per partition every 0.2 s)")
    args = parser.parse_args()

    triggers = [t.strip() for t in args.triggers.split(",")]
    configs = [f"{source} @ {trigger}" for trigger in triggers for source in ("backlog", "kafka")]
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    jars = spark_kafka_connector_jars()
    broker = start_kafka(heap_mb=1024)
    try:
        spark = spark_session(jars=jars)
        log = ProgressLog()
        spark.streams.addListener(log.listener)
        warm_up(spark, broker.bootstrap_servers)
        first_run = argparse.Namespace(**{**vars(args), "seconds": 5})
        for source in ("backlog", "kafka"):  # each source's first query pays its own start-up
            run_latency(spark, log, broker.bootstrap_servers, source, triggers[0], first_run)
        for round_index in range(args.runs):
            for config in rotated(configs, round_index):
                source, trigger = config.split(" @ ")
                runs[config].append(run_latency(spark, log, broker.bootstrap_servers, source, trigger, args))
                print(f"{config}: {runs[config][-1]}", flush=True)
        spark.stop()
        if args.real_time and args.partitions <= REAL_TIME_MAX_PARTITIONS:
            spark = spark_session(jars=jars, master=f"local[{args.partitions + 1}]")
            run_real_time(spark, broker.bootstrap_servers, first_run)  # warm-up
            runs[REAL_TIME] = [run_real_time(spark, broker.bootstrap_servers, args) for _ in range(args.runs)]
            print(f"{REAL_TIME}: {runs[REAL_TIME]}", flush=True)
            spark.stop()
    finally:
        broker.stop()
    idle: dict[str, list[float]] = {}
    if args.idle_requests:
        with counting_broker() as (proxied, proxy):
            spark = spark_session(jars=jars)
            for config in configs:  # the first query of each source pays its start-up: once untimed
                source, trigger = config.split(" @ ")
                idle[config] = [run_idle(spark, proxy, proxied.bootstrap_servers, source, trigger, args.partitions)
                                for _ in range(1 + args.runs)][1:]
            spark.stop()
    report(runs, idle, triggers, args, kafka_version())


def report(runs: dict[str, list[dict]], idle: dict[str, list[float]], triggers: list[str], args, version: str) -> None:
    summaries = {c: {f: median_and_spread([r[f] for r in rs if r[f] is not None]) for f in LATENCY_FIGURES}
                 for c, rs in runs.items()}
    for config, rs in runs.items():
        summaries[config]["kept_up"] = f"{sum(r['kept_up'] for r in rs)} of {len(rs)}"
        summaries[config]["idle_driver_requests_per_s"] = median_and_spread(idle.get(config, []))
    command = "python -m benchmarks.latency_versus_kafka " + " ".join(sys.argv[1:])
    lines = [
        "# A caught-up query: format(\"backlog\") against format(\"kafka\")", "",
        f"Command: `{command}`", "",
        f"Apache Kafka {version}, {args.partitions:,} partitions, {args.rate:,.0f} records/s for {args.seconds:.0f} s into "
        f"`noop`, Spark's defaults, a warm-up query of each source, median (min-max) of {args.runs} rounds in rotated "
        f"order. Latency: a record's LogAppendTime (when Kafka appended it) -> the commit of the batch that read it; steady state = records produced "
        f"after the first {args.settle_seconds:.0f} s of traffic. Kept up: caught up within {args.catch_up_seconds:.0f} s "
        f"after the traffic stopped. Idle requests: the driver's Kafka requests per second over {IDLE_SECONDS:.0f} s "
        "with nothing to read (measured apart, through a counting proxy)."
        + (" Traffic in transactions committed every 0.2 s (commit markers at every log end)."
           if args.transactional else ""), "",
        "| source @ trigger | kept up | steady p50 s | steady p99 s | whole p50 s | whole p99 s | batch p50 s | "
        "batch p99 s | records not read | idle driver requests/s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for config, s in summaries.items():
        lines.append(f"| {config} | {s['kept_up']} | " + " | ".join(
            with_spread(s[f], ".0f" if f == "records_unread" else ".3f") for f in LATENCY_FIGURES)
            + f" | {with_spread(s['idle_driver_requests_per_s'], '.1f')} |")
    lines += ["", "Where a batch with data spends its time: the median milliseconds of each of Spark's steps "
              "(`durationMs`), median over rounds.", "", *step_table(runs, "steps_p50_ms")]
    lines.append("")
    ratios = {}
    for trigger in triggers:
        ours, theirs = summaries[f"backlog @ {trigger}"], summaries[f"kafka @ {trigger}"]
        ratios[trigger] = {f: (ours[f]["median"] / theirs[f]["median"]) if ours[f]["median"] and theirs[f]["median"]
                           else None for f in ("latency_p50_s", "latency_p99_s", "whole_p50_s", "whole_p99_s")}
        lines.append(f"- At `{trigger}`, backlog / kafka: steady p50 {fmt(ratios[trigger]['latency_p50_s'])}x, "
                     f"p99 {fmt(ratios[trigger]['latency_p99_s'])}x; whole window p50 "
                     f"{fmt(ratios[trigger]['whole_p50_s'])}x, p99 {fmt(ratios[trigger]['whole_p99_s'])}x "
                     "(targets: within 1.25x; p50 <= 0.35 s, p99 <= 0.8 s).")
    if REAL_TIME in runs:
        lines.append(f"- {REAL_TIME}: `local[{args.partitions + 1}]` (a task slot per partition), output into a Kafka "
                     "topic; latency to the output record's CreateTime, i.e. when Spark emitted it; no batches.")
    write_results("latency_versus_kafka", args.results_name,
                  {"command": command, "machine": machine(), "kafka": version, "args": vars(args),
                   "summaries": summaries, "ratios": ratios, "runs": runs, "idle_requests_per_s": idle}, lines)


if __name__ == "__main__":
    main()
