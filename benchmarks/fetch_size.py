"""What a catch-up read's fetch size costs the broker and the reader (``reader/kafka_reader.py``
``fetch_bytes``).

A reader asks for ``max.partition.fetch.bytes`` per partition and request: librdkafka's 1 MiB,
or for a catch-up range whose bytes the planner measured, the power of two that holds it, up
to 4 MiB. The broker spends CPU on every request whatever its size, and on a machine it
shares with the readers (as here) that CPU is theirs too.

The read path alone (``read_split``, no Spark) on Apache Kafka: one partition of
``--records`` records of issue 35's mix (90 % 200 B, 10 % 16-64 KB values), read whole in
catch-up-sized ranges (``TASK_BYTES`` each, splits carrying the measured bytes per offset,
as the planner cuts them), one pooled consumer per read, every batch written into an Arrow
IPC stream to ``/dev/null``. Per read and fetch size: wall seconds, the reader's CPU seconds
(this process: librdkafka's threads included) and the broker's CPU seconds (its JVM, from
/proc). A warm-up read first, then ``--rounds`` rounds in rotated order; medians with the
spread.

Usage::

    .venv/bin/python -m benchmarks.fetch_size [--records 100000] [--rounds 5]

Writes ``benchmarks/results/fetch_size/fetch_size.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import pyarrow as pa
from confluent_kafka import Consumer

from backlog_source.core.settings import parse_options
from backlog_source.demo.apache_kafka import kafka, kafka_version
from backlog_source.demo.topics import produce
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.batch_splits import TASK_BYTES
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from benchmarks.harness.costs import CpuAccount
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.stats import summarize, with_spread
from benchmarks.harness.traffic import create_live_topic, mixed_value

#: Setting name -> ``kafka.max.partition.fetch.bytes`` (None: the reader's own rule).
FETCH_SIZES = {"1 MiB (librdkafka's default)": "1048576", "the rule (4 MiB here)": None, "16 MiB": "16777216"}
FIGURES = ("wall_s", "reader_cpu_s", "broker_cpu_s")
#: Bytes per offset of the mix, as the planner measures it (keys, values).
MIXED_BYTES_PER_OFFSET = 4_300


def read_whole(bootstrap: str, topic: str, records: int, fetch: str | None) -> dict:
    """Read ``[0, records)`` of ``topic``'s partition 0 in catch-up-sized ranges."""
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "backlog.enabled": "false"}
    if fetch is not None:
        options["kafka.max.partition.fetch.bytes"] = fetch
    config = parse_options(options).reader_config
    per_range = TASK_BYTES // MIXED_BYTES_PER_OFFSET
    pool = ConsumerPool(Consumer, capacity=1)
    sink = pa.PythonFile(open(os.devnull, "wb"))
    started, rows = time.perf_counter(), 0
    with CpuAccount() as cpu:
        for start in range(0, records, per_range):
            r = KafkaRange(topic, 0, start, min(records, start + per_range))
            writer = None
            split = KafkaSplit((r,), "bench", bytes_per_offset=float(MIXED_BYTES_PER_OFFSET))
            for batch in read_split(split, config, pool=pool):
                writer = writer or pa.ipc.new_stream(sink, batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is not None:
                writer.close()
        pool.close_all()
    figures = {"wall_s": time.perf_counter() - started, "reader_cpu_s": cpu.seconds.get("benchmark", 0.0),
               "broker_cpu_s": cpu.seconds.get("broker", 0.0)}
    if rows != records:
        raise SystemExit(f"read {rows} records of {records}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(35)
    settings = list(FETCH_SIZES)
    workload = "mixed (90 % 200 B, 10 % 16-64 KB)"
    runs: dict[str, dict[str, list[dict]]] = {workload: {s: [] for s in settings}}
    with kafka(heap_mb=1024) as cluster:
        bootstrap = cluster.bootstrap_servers
        create_live_topic(bootstrap, "fetch-size", 1)
        produce(bootstrap, "fetch-size", ((0, b"k%d" % i, mixed_value(rng)) for i in range(args.records)))
        read_whole(bootstrap, "fetch-size", args.records, None)  # warm-up: page cache, JIT
        for round_index in range(args.rounds):
            shift = round_index % len(settings)
            for setting in settings[shift:] + settings[:shift]:
                runs[workload][setting].append(read_whole(bootstrap, "fetch-size", args.records, FETCH_SIZES[setting]))
    summary = summarize(runs, FIGURES)
    command = "python -m benchmarks.fetch_size " + " ".join(sys.argv[1:])
    lines = ["# A catch-up read's fetch size: the broker's CPU and the reader's", "",
             f"Command: `{command}` ({machine()['cpus']} cores; Apache Kafka {kafka_version()}, loopback, the "
             f"broker on the same cores). One partition of {args.records:,} records, read whole in ranges of "
             f"about {TASK_BYTES >> 20} MiB; median (min-max) of {args.rounds} reads per setting, rotated.", ""]
    for name, by_setting in summary.items():
        lines += [f"## {name}", "", "| max.partition.fetch.bytes | wall s | reader CPU s | broker CPU s |",
                  "| --- | ---: | ---: | ---: |"]
        for setting, s in by_setting.items():
            lines.append(f"| {setting} | {with_spread(s['wall_s'])} | {with_spread(s['reader_cpu_s'])} | "
                         f"{with_spread(s['broker_cpu_s'])} |")
        lines.append("")
    write_results("fetch_size", "fetch_size", {"command": command, "machine": machine(), "kafka": kafka_version(),
                                               "args": vars(args), "summary": summary, "runs": runs}, lines)


if __name__ == "__main__":
    main()
