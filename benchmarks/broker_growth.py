"""How the embedded broker's (Tansu's) request cost grows with live traffic, without Spark.

Why this exists: the low-latency figures of ``latency.py`` and ``mode_switch.py`` get worse
the longer live traffic runs, for every trigger and for a bare confluent-kafka loop alike.
This isolates the broker: one topic (``live``) receives ``--rate`` records/s, one record per
produce request, as the benchmarks' live producer sends them; a second topic (``still``)
holds a few records and receives nothing. Every ``--every`` seconds it times, on both
topics, a ``ListOffsets(latest)`` of the 8 partitions, and a fresh consumer reading the
last 5 records of each partition (as a micro-batch's reader does). If the cost grows on
``live`` only, it is per partition (the record batches it stores), not the broker as a
whole nor the machine.

Usage::

    .venv/bin/python -m benchmarks.broker_growth [--seconds 120] [--rate 1000] [--every 10]

Writes ``benchmarks/results/broker_growth/broker_growth.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from backlog_source.demo.embedded_broker import start_broker
from backlog_source.demo.topics import create_topic
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.stats import fmt
from benchmarks.harness.traffic import log_end_offsets

PARTITIONS = 8
TAIL = 5  # records read per partition by each timed fetch


def list_offsets_ms(admin: AdminClient, topic: str) -> tuple[float, dict[int, int]]:
    started = time.perf_counter()
    ends = log_end_offsets(admin, topic, PARTITIONS)
    return (time.perf_counter() - started) * 1000, ends


def tail_fetch_ms(bootstrap: str, topic: str, ends: dict[int, int]) -> float:
    """A fresh consumer reads ``[end - TAIL, end)`` of every partition: time to the last record."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "broker-growth", "enable.auto.commit": False,
                         "auto.offset.reset": "error"})
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, max(0, end - TAIL)) for p, end in ends.items()])
    missing = {p: end for p, end in ends.items() if end > 0}
    while missing:
        # Ask for exactly what is missing, so consume() returns as soon as it has arrived.
        wanted = sum(min(TAIL, end) for end in missing.values())
        for message in consumer.consume(wanted, 1.0):
            if message.error() is None and message.offset() >= missing.get(message.partition(), 1 << 62) - 1:
                missing.pop(message.partition())
    seconds = time.perf_counter() - started
    consumer.close()
    return seconds * 1000


def produce_live(bootstrap: str, rate: float, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    started, sent = time.perf_counter(), 0
    while not stop.is_set():
        due = int((time.perf_counter() - started) * rate)
        while sent < due:
            producer.produce("live", value=b"l" * 100, partition=sent % PARTITIONS)
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--every", type=float, default=10)
    args = parser.parse_args()

    broker = start_broker()
    samples: list[dict] = []
    stop = threading.Event()
    try:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for topic in ("live", "still"):
            create_topic(bootstrap, topic, PARTITIONS)
        still = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        for i in range(PARTITIONS * 50):
            still.produce("still", value=b"s" * 100, partition=i % PARTITIONS)
        still.flush(30)
        producer = threading.Thread(target=produce_live, args=(bootstrap, args.rate, stop))
        started = time.perf_counter()
        producer.start()
        next_sample = started + args.every
        while time.perf_counter() - started < args.seconds:
            time.sleep(max(0.0, next_sample - time.perf_counter()))  # a sampling period, not a wait for a condition
            next_sample += args.every
            sample = {"at_s": round(time.perf_counter() - started, 1)}
            for topic in ("live", "still"):
                ms, ends = list_offsets_ms(admin, topic)
                sample[topic] = {"records": sum(ends.values()), "list_offsets_ms": ms,
                                 "tail_fetch_ms": tail_fetch_ms(bootstrap, topic, ends)}
            samples.append(sample)
            print(sample, flush=True)
    finally:
        stop.set()
        broker.stop()

    command = (f".venv/bin/python -m benchmarks.broker_growth --seconds {args.seconds:g} --rate {args.rate:g} "
               f"--every {args.every:g}")
    write_results("broker_growth", "broker_growth", {"command": command, "machine": machine(), "samples": samples}, [
        "# The embedded broker's request cost under live traffic", "", f"Command: `{command}`", "",
        f"`live` receives {args.rate:g} records/s in one-record produce requests; `still` holds "
        f"{PARTITIONS * 50} records and receives nothing. Times of one ListOffsets(latest) of 8 partitions "
        f"and of a fresh consumer reading the last {TAIL} records of each partition.", "",
        "| s | live records | live ListOffsets ms | live tail fetch ms | still ListOffsets ms | still tail fetch ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
        *(f"| {s['at_s']:.0f} | {s['live']['records']:,} | {fmt(s['live']['list_offsets_ms'], '.1f')} | "
          f"{fmt(s['live']['tail_fetch_ms'], '.1f')} | {fmt(s['still']['list_offsets_ms'], '.1f')} | "
          f"{fmt(s['still']['tail_fetch_ms'], '.1f')} |" for s in samples),
    ])


if __name__ == "__main__":
    main()
