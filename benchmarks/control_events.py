"""What a kept producer saves each control event a reader publishes (``events/control_topic.py``).

Every task of a catch-up batch publishes a RecordSizesReport before it hands over its last
batch, and a task that carries a bucket past its boundary a BacklogFinishEvent: the task
waits for the acknowledgement. This times ``publish()`` on Apache Kafka (``make jvm``, one
node, loopback: no TLS or SASL, so a remote secured cluster saves more), with a fresh
producer per publish (a pool that keeps nothing, as before the worker kept them) against
the worker's kept producer; ``--publishes`` of each, interleaved, after a warm-up publish of
each. Median (min-max) milliseconds per publish.

Usage::

    .venv/bin/python -m benchmarks.control_events [--publishes 200]

Writes ``benchmarks/results/control_events/control_events.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import Producer

from backlog_source.core.settings import parse_options
from backlog_source.demo.apache_kafka import kafka, kafka_version
from backlog_source.events.control_topic import ProducerPool, publish
from backlog_source.events.sizes_report import RecordSizesReport, TopicSizes
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.stats import median_and_spread, with_spread
from benchmarks.harness.traffic import create_live_topic

TOPIC, CONTROL = "control-events-data", "control-events"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--publishes", type=int, default=200)
    args = parser.parse_args()
    pools = {"fresh producer per publish": ProducerPool(Producer, capacity=0),
             "kept producer": ProducerPool(Producer)}
    report = RecordSizesReport("bench", {TOPIC: TopicSizes(bytes=32 << 20, offsets=8_000)})
    times: dict[str, list[float]] = {name: [] for name in pools}
    with kafka() as cluster:
        bootstrap = cluster.bootstrap_servers
        create_live_topic(bootstrap, CONTROL, 1)
        config = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC,
                                "backlog.eventsTopic": CONTROL}).reader_config
        for pool in pools.values():  # warm-up
            if not publish(config, report, pool):
                raise SystemExit("the warm-up publish failed")
        for _ in range(args.publishes):
            for name, pool in pools.items():
                started = time.perf_counter()
                if not publish(config, report, pool):
                    raise SystemExit(f"{name}: a publish failed")
                times[name].append((time.perf_counter() - started) * 1000)
        for pool in pools.values():
            pool.close_all()
    summary = {name: median_and_spread(values) for name, values in times.items()}
    command = "python -m benchmarks.control_events " + " ".join(sys.argv[1:])
    lines = ["# A control event's publish: a fresh producer against a kept one", "",
             f"Command: `{command}` ({machine()['cpus']} cores; Apache Kafka {kafka_version()}, loopback, no TLS). "
             f"{args.publishes} publishes of a RecordSizesReport each, interleaved, after a warm-up; median (min-max).",
             "", "| producer | ms per publish |", "| --- | ---: |"]
    lines += [f"| {name} | {with_spread(s, '.2f')} |" for name, s in summary.items()]
    write_results("control_events", "control_events", {"command": command, "machine": machine(),
                                                       "kafka": kafka_version(), "args": vars(args),
                                                       "summary": summary, "runs": times}, lines)


if __name__ == "__main__":
    main()
