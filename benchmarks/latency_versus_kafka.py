"""A caught-up query, format("backlog") against Spark's format("kafka"): end-to-end latency,
batch time and the driver's idle Kafka requests, at the same triggers, on the same broker.

What a user choosing between the two sees once the backlog is gone. After a warm-up query
of each source, every round runs each configuration (source x trigger, ``0 seconds`` and
``250 milliseconds`` by default) in rotated order, each on a fresh topic of ``--partitions``
(8 by default; 1,024 with ``--rate 1500 --triggers "1 second"`` is the wide-topic case): the
query starts at ``latest`` into ``noop``; first ``IDLE_SECONDS`` with nothing to read (the
driver's Kafka requests are counted by a proxy in front of the broker: this source's admin
and control-topic clients, Spark's ``adminclient-*``), then ``--rate`` records/s for
``--seconds``. Reported per configuration: latency p50/p99 (the record's CreateTime -> the
commit of the batch that read it), batch time p50/p99 and idle driver requests per second;
the median over rounds with the spread (min-max). Spark's default settings, Apache Kafka.

Usage::

    .venv/bin/python -m benchmarks.latency_versus_kafka [--runs 3] [--rate 1000] [--seconds 60]
        [--partitions 8] [--triggers "0 seconds,250 milliseconds"] [--results-name NAME]

Writes ``benchmarks/results/latency_versus_kafka/<results name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from backlog_source.testing.apache_kafka import kafka_version, spark_kafka_connector_jars
from backlog_source.testing.broker import create_topic
from backlog_source.testing.kafka_proxy import counting_broker
from benchmarks.harness import (
    ProgressLog,
    fmt,
    machine,
    median_and_spread,
    percentile,
    produce_and_catch_up,
    rotated,
    spark_session,
    timed_latencies,
    wait_until,
    warm_up,
    with_spread,
    write_results,
)

IDLE_SECONDS = 10.0
#: The client ids (prefixes) of each source's driver-side Kafka clients.
DRIVER_CLIENTS = {"backlog": ("backlog-source-admin", "backlog-source-events-reader"), "kafka": ("adminclient",)}
FIGURES = ("latency_p50_s", "latency_p99_s", "batch_p50_s", "batch_p99_s", "idle_driver_requests_per_s")


def start_query(spark, source: str, bootstrap: str, topic: str, trigger: str, checkpoint: str):
    df = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "latest").load())
    return df.writeStream.format("noop").trigger(processingTime=trigger).option("checkpointLocation", checkpoint).start()


def run(spark, log: ProgressLog, broker, proxy, source: str, trigger: str, args) -> dict:
    topic = f"lvk-{source}-{trigger.replace(' ', '-')}-{time.time_ns()}"
    create_topic(broker.bootstrap_servers, topic, args.partitions)
    with tempfile.TemporaryDirectory() as checkpoint:
        query = start_query(spark, source, broker.bootstrap_servers, topic, trigger, checkpoint)
        try:
            wait_until(lambda: query.lastProgress is not None, 120, "the query's first trigger")
            before = sum(proxy.requests(client) for client in DRIVER_CLIENTS[source])
            time.sleep(IDLE_SECONDS)  # deliberately idle: requests counted over a fixed window
            idle = sum(proxy.requests(client) for client in DRIVER_CLIENTS[source]) - before
            delivered = produce_and_catch_up(query, broker, topic, args.partitions, args.rate, args.seconds)
        finally:
            query.stop()
    progress = [p for p in log.of(query.id) if p["numInputRows"]]
    latencies = [latency for _, latency in timed_latencies(topic, progress, delivered)]
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    return {
        "records": len(delivered), "records_measured": len(latencies), "batches": len(progress),
        "latency_p50_s": percentile(latencies, 0.50), "latency_p99_s": percentile(latencies, 0.99),
        "batch_p50_s": percentile(seconds, 0.50), "batch_p99_s": percentile(seconds, 0.99),
        "idle_driver_requests_per_s": idle / IDLE_SECONDS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=1_000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--triggers", default="0 seconds,250 milliseconds")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--results-name", default="latency_versus_kafka")
    args = parser.parse_args()

    triggers = [t.strip() for t in args.triggers.split(",")]
    configs = [f"{source} @ {trigger}" for trigger in triggers for source in ("backlog", "kafka")]
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    with counting_broker() as (broker, proxy):
        spark = spark_session(jars=spark_kafka_connector_jars())
        log = ProgressLog()
        spark.streams.addListener(log.listener)
        warm_up(spark, broker.bootstrap_servers)
        for source in ("backlog", "kafka"):  # each source's first query pays its own start-up
            run(spark, log, broker, proxy, source, triggers[0],
                argparse.Namespace(rate=args.rate, seconds=5, partitions=args.partitions))
        for round_index in range(args.runs):
            for config in rotated(configs, round_index):
                source, trigger = config.split(" @ ")
                runs[config].append(run(spark, log, broker, proxy, source, trigger, args))
        spark.stop()
        version = kafka_version()
    report(runs, configs, triggers, args, version)


def report(runs: dict[str, list[dict]], configs: list[str], triggers: list[str], args, version: str) -> None:
    summaries = {c: {f: median_and_spread([r[f] for r in runs[c] if r[f] is not None]) for f in FIGURES} for c in configs}
    command = "python -m benchmarks.latency_versus_kafka " + " ".join(sys.argv[1:])
    lines = [
        "# A caught-up query: format(\"backlog\") against format(\"kafka\")", "",
        f"Command: `{command}`", "",
        f"Apache Kafka {version}, {args.partitions:,} partitions, {args.rate:,.0f} records/s for {args.seconds:.0f} s into `noop`, "
        f"Spark's defaults, a warm-up query of each source, median (min-max) of {args.runs} rounds in rotated order. "
        f"Idle requests: the driver's Kafka requests per second over {IDLE_SECONDS:.0f} s with nothing to read.", "",
        "| source @ trigger | latency p50 s | latency p99 s | batch p50 s | batch p99 s | idle driver requests/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for config in configs:
        s = summaries[config]
        lines.append(f"| {config} | " + " | ".join(with_spread(s[f], ".1f" if f.startswith("idle") else ".2f")
                                                for f in FIGURES) + " |")
    lines.append("")
    ratios = {}
    for trigger in triggers:
        ours, theirs = summaries[f"backlog @ {trigger}"], summaries[f"kafka @ {trigger}"]
        ratios[trigger] = {f: (ours[f]["median"] / theirs[f]["median"]) if ours[f]["median"] and theirs[f]["median"]
                           else None for f in ("latency_p50_s", "latency_p99_s")}
        lines.append(f"At `{trigger}`: backlog / kafka latency p50 {fmt(ratios[trigger]['latency_p50_s'])}x, "
                     f"p99 {fmt(ratios[trigger]['latency_p99_s'])}x (target: within 1.25x; p50 <= 0.35 s, p99 <= 0.8 s).")
    write_results("latency_versus_kafka", args.results_name,
                  {"command": command, "machine": machine(), "kafka": version, "args": vars(args),
                   "summaries": summaries, "ratios": ratios, "runs": runs}, lines)


if __name__ == "__main__":
    main()
