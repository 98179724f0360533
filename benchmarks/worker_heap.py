"""What pinning glibc's malloc thresholds saves a reader (``reader/worker_heap.py``).

A read allocates and frees its data in waves (librdkafka's fetch buffers, a Python ``bytes``
per key and value, Arrow batches of ``ARROW_BATCH_BYTES``). With glibc's start-up thresholds
the freed memory at the heap's top is handed back to the kernel and faulted in again by the
next wave. The first ``read()`` of a Python worker pins the thresholds where glibc's own
adaptive rule ends; this measures what that saves, on the read path alone (no Spark, so the
figure is the reader's own).

On Apache Kafka (``make jvm``), one partition per workload: issue 35's mix (90 % 200 B, 10 %
16-64 KB values) and 100 B values. Each read is a fresh Python process (as a new Python
worker is), reading the whole partition in catch-up-sized ranges (``TASK_BYTES`` each, as
the planner cuts them once sizes are known) with one pooled consumer, and writing every
batch into an Arrow IPC stream to ``/dev/null`` (as a worker streams batches to its JVM).
Per read: wall seconds, CPU seconds (user + system), minor page faults, peak RSS. A warm-up
read first, then ``--rounds`` rounds, the two settings alternating. Medians with the spread.

Usage::

    .venv/bin/python -m benchmarks.worker_heap [--mixed-records 100000] [--small-records 1000000] [--rounds 6]

Writes ``benchmarks/results/worker_heap/worker_heap.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time

import pyarrow as pa
from confluent_kafka import Consumer

from backlog_source.core.settings import parse_options
from backlog_source.demo.apache_kafka import kafka, kafka_version
from backlog_source.demo.topics import produce
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.reader.worker_heap import pin_malloc_thresholds
from backlog_source.split.batch_splits import TASK_BYTES
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.stats import summarize, with_spread
from benchmarks.harness.traffic import create_live_topic, mixed_value

SETTINGS = ("glibc defaults", "pinned")
FIGURES = ("wall_s", "cpu_s", "minor_faults", "peak_rss_mib")



def read_in_this_process(bootstrap: str, topic: str, records: int, per_range: int, pinned: bool) -> dict:
    """The child's side: read ``[0, records)`` of ``topic``'s partition 0 in ranges of
    ``per_range`` records and return the figures of this process."""
    if pinned and not pin_malloc_thresholds():
        raise SystemExit("the thresholds could not be pinned here (not glibc, or MALLOC_*_ set)")
    config = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                            "backlog.enabled": "false"}).reader_config
    pool = ConsumerPool(Consumer, capacity=1)
    sink = pa.PythonFile(open("/dev/null", "wb"))
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    rows = 0
    for start in range(0, records, per_range):
        split = KafkaSplit((KafkaRange(topic, 0, start, min(records, start + per_range)),), "bench")
        writer = None
        for batch in read_split(split, config, pool=pool):
            writer = writer or pa.ipc.new_stream(sink, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
    after = resource.getrusage(resource.RUSAGE_SELF)
    if rows != records:
        raise SystemExit(f"read {rows} records of {records}")
    return {"wall_s": time.perf_counter() - started,
            "cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
            "minor_faults": after.ru_minflt - before.ru_minflt, "peak_rss_mib": peak_rss_mib()}


def peak_rss_mib() -> float:
    """This process's peak resident memory: ``VmHWM``, which starts afresh at ``exec``
    (``ru_maxrss`` carries the parent's peak over it)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def read_in_fresh_process(bootstrap: str, topic: str, records: int, per_range: int, pinned: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.worker_heap", "--child", bootstrap, topic, str(records),
               str(per_range), "pinned" if pinned else "defaults"]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        bootstrap, topic, records, per_range, setting = sys.argv[2:7]
        print(json.dumps(read_in_this_process(bootstrap, topic, int(records), int(per_range), setting == "pinned")))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mixed-records", type=int, default=100_000)
    parser.add_argument("--small-records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    rng = random.Random(35)
    workloads = {  # name: (topic, records, one value, records per range of TASK_BYTES)
        "mixed (90 % 200 B, 10 % 16-64 KB)": ("heap-mixed", args.mixed_records, lambda: mixed_value(rng),
                                              TASK_BYTES // 4_300),
        "100 B values": ("heap-small", args.small_records, lambda: b"v" * 100, TASK_BYTES // 110),
    }
    runs: dict[str, dict[str, list[dict]]] = {}
    with kafka(heap_mb=1024) as cluster:
        bootstrap = cluster.bootstrap_servers
        for name, (topic, records, value, per_range) in workloads.items():
            create_live_topic(bootstrap, topic, 1)
            produce(bootstrap, topic, ((0, b"k%d" % i, value()) for i in range(records)))
            read_in_fresh_process(bootstrap, topic, records, per_range, True)  # warm-up: broker caches, bytecode
            runs[name] = {setting: [] for setting in SETTINGS}
            for round_index in range(args.rounds):
                order = SETTINGS if round_index % 2 == 0 else SETTINGS[::-1]
                for setting in order:
                    runs[name][setting].append(read_in_fresh_process(bootstrap, topic, records, per_range,
                                                                     setting == "pinned"))
    summary = summarize(runs, FIGURES)
    command = "python -m benchmarks.worker_heap " + " ".join(sys.argv[1:])
    lines = ["# A reader's heap: glibc's malloc thresholds pinned or left alone", "",
             f"Command: `{command}` ({machine()['cpus']} cores; Apache Kafka {kafka_version()}, loopback). "
             f"One partition per workload, read whole in ranges of about {TASK_BYTES >> 20} MiB by a fresh "
             f"Python process per read; median (min-max) of {args.rounds} reads per setting, alternating.", ""]
    for name, by_setting in summary.items():
        lines += [f"## {name}", "", "| malloc thresholds | wall s | CPU s | minor page faults | peak RSS MiB |",
                  "| --- | ---: | ---: | ---: | ---: |"]
        for setting, s in by_setting.items():
            lines.append(f"| {setting} | {with_spread(s['wall_s'])} | {with_spread(s['cpu_s'])} | "
                         f"{with_spread(s['minor_faults'], ',.0f')} | {with_spread(s['peak_rss_mib'], '.0f')} |")
        cpu = {setting: by_setting[setting]["cpu_s"]["median"] for setting in SETTINGS}
        lines += ["", f"CPU pinned / defaults: {cpu['pinned'] / cpu['glibc defaults']:.2f}x", ""]
    write_results("worker_heap", "worker_heap", {"command": command, "machine": machine(), "kafka": kafka_version(),
                                                 "args": vars(args), "summary": summary, "runs": runs}, lines)


if __name__ == "__main__":
    main()
