"""Where a catch-up batch stops fitting Spark's default 1 GiB driver when a sink collects it.

Issue 46: a restart in front of 1 GB of mixed records, read by ``format("backlog")`` with no
option into a ``foreachBatch`` that calls ``toArrow()``, ran the default driver out of heap in
batch 0. This benchmark finds the edge and checks the default's margin from it.

Per run, a job in a process of its own (:class:`~benchmarks.harness.job_process.JobProcess`,
so an ``OutOfMemoryError`` kills only that job), with Spark's default settings (``local[*]``,
a 1 GiB driver unless ``--driver-memory`` says otherwise): ``format("backlog")`` from
``earliest`` over a topic of 8 partitions holding ``--backlog-mib`` of one workload, with
``Trigger.AvailableNow``, into a ``foreachBatch`` sink of one kind:

* ``arrow``: ``batch.toArrow()`` (what a user does before writing to a database);
* ``pandas``: ``batch.toPandas()``;
* ``collect``: ``batch.collect()``.

Workloads: ``mixed`` (nine in ten values of 200 B, one in ten of 32 KB, the issue's mix) and
``large`` (values of 900 KB, near Kafka's default 1 MB record limit). Budgets: ``default``
(no option: the source sizes it from the driver's heap, ``core/jvm_heap.py``) and the
explicit ``backlog.maxBytesPerTrigger`` sizes given in ``--budgets``.

Figures per run: the outcome (drained, or the failure: out of heap, the driver gone), the
largest batch (MiB of keys and values, from the progress events), the JVM's heap in use at its
peak, and its live heap: the most any GC left in use (the sum of each pool's usage after its
last collection, which is what the batch needs; the peak in use follows G1's lazy collection
and reaches the maximum whatever the batch).

Usage::

    .venv/bin/python -m benchmarks.driver_heap [--rounds 2] [--workloads mixed,large]
        [--sinks arrow,pandas,collect] [--budgets default,192m,256m] [--backlog-mib 600]
        [--driver-memory 1g] [--results-name NAME]

Writes ``benchmarks/results/driver_heap/<results name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

PARTITIONS = 8
MIB = 1 << 20
#: How long one job may take before it counts as hung (a drain of --backlog-mib takes ~20 s).
JOB_TIMEOUT_S = 600


def value_sizes(workload: str, backlog_bytes: int, seed: int = 7) -> list[int]:
    """The value sizes of a backlog of about ``backlog_bytes`` of ``workload``."""
    if workload == "large":
        return [900_000] * max(1, backlog_bytes // 900_000)
    rng = random.Random(seed)
    sizes, total = [], 0
    while total < backlog_bytes:
        size = 32_768 if rng.random() < 0.1 else 200
        sizes.append(size)
        total += size
    return sizes


# ------------------------------------------------------------------ the job (its own process)


def job(spec_path: str) -> None:
    """One drain in this process: prints one JSON line ``RESULT {...}`` at the end."""
    spec = json.loads(Path(spec_path).read_text())
    import os

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource

    builder = SparkSession.builder.master("local[*]")
    if spec["driver_memory"]:
        builder = builder.config("spark.driver.memory", spec["driver_memory"])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BacklogDataSource)
    heap = HeapSampler(spark)
    sink = {"arrow": lambda df, _: df.toArrow(), "pandas": lambda df, _: df.toPandas(),
            "collect": lambda df, _: df.collect()}[spec["sink"]]
    reader = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", spec["bootstrap"])
              .option("subscribe", spec["topic"]).option("startingOffsets", "earliest"))
    if spec["budget"] != "default":
        reader = reader.option("backlog.maxBytesPerTrigger", spec["budget"])
    began = time.monotonic()
    result: dict = {}
    with heap:
        try:
            query = (reader.load().writeStream.foreachBatch(sink).trigger(availableNow=True)
                     .option("checkpointLocation", spec["checkpoint"]).start())
            query.awaitTermination(JOB_TIMEOUT_S)
            progress = query.recentProgress
            result["failed"] = None if query.exception() is None else _first_line(str(query.exception()))
        except Exception as exc:  # the driver gone (out of heap): py4j loses its gateway
            progress, result["failed"] = [], _first_line(f"{type(exc).__name__}: {exc}")
    batches = [p for p in progress if p.get("numInputRows", 0) > 0]
    budgets = {_budget_of(p) for p in batches} - {None}
    result.update(seconds=time.monotonic() - began, batches=len(batches), budget_bytes=max(budgets, default=None),
                  largest_batch_records=max((p["numInputRows"] for p in batches), default=0),
                  records=sum(p["numInputRows"] for p in batches),
                  heap_in_use_peak_mib=heap.in_use_peak_mib, live_heap_peak_mib=heap.live_peak_mib,
                  heap_max_mib=heap.max_mib)
    print("RESULT " + json.dumps(result), flush=True)


def _budget_of(progress: dict) -> int | None:
    """The byte budget a catch-up batch was planned with (its offset dict's ``plan``)."""
    end = progress["sources"][0]["endOffset"]
    plan = (json.loads(end) if isinstance(end, str) else end).get("plan") or {}
    return plan.get("budget_bytes")


class HeapSampler:
    """The driver JVM's heap in use at its peak and its live heap (each pool's usage after its
    last collection, summed) at its peak, sampled every 50 ms while a run lasts."""

    def __init__(self, spark) -> None:
        management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
        self._memory = management.getMemoryMXBean()
        self._pools = [p for p in management.getMemoryPoolMXBeans() if p.getType().name() == "HEAP"]
        self.max_mib = self._memory.getHeapMemoryUsage().getMax() / MIB
        self.in_use_peak_mib = 0.0
        self.live_peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "HeapSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.in_use_peak_mib = max(self.in_use_peak_mib, self._memory.getHeapMemoryUsage().getUsed() / MIB)
                live = sum(p.getCollectionUsage().getUsed() for p in self._pools if p.getCollectionUsage() is not None)
                self.live_peak_mib = max(self.live_peak_mib, live / MIB)
            except Exception:  # the gateway gone (the driver died): the last samples stand
                return
            self._stop.wait(0.05)


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    oom = next((line for line in lines if "OutOfMemoryError" in line), None)
    return (oom or (lines[0] if lines else "?"))[:300]


# ------------------------------------------------------------------ the benchmark


def run_job(spec: dict, folder: Path) -> dict:
    from benchmarks.harness.job_process import JobProcess

    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec))
    log = folder / "job.log"
    process = JobProcess("benchmarks.driver_heap", ["--job", str(spec_path)], log)
    process.start()
    try:
        process.process.wait(JOB_TIMEOUT_S + 120)
    except Exception:
        process.kill()
        return {"failed": "hung: the job did not end"}
    text = log.read_text(errors="replace")
    line = next((line for line in reversed(text.splitlines()) if line.startswith("RESULT ")), None)
    if line is None:
        oom = "OutOfMemoryError" in text
        return {"failed": "java.lang.OutOfMemoryError: Java heap space (the driver died)" if oom
                else f"the job ended with {process.process.returncode} and no result"}
    result = json.loads(line.removeprefix("RESULT "))
    if result.get("failed") is None and "OutOfMemoryError" in text:
        result["failed"] = "java.lang.OutOfMemoryError in the log"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default="mixed,large")
    parser.add_argument("--sinks", default="arrow,collect")
    parser.add_argument("--budgets", default="default,192m,256m")
    parser.add_argument("--backlog-mib", type=int, default=600)
    parser.add_argument("--driver-memory", default="", help="spark.driver.memory (default: Spark's, 1g)")
    parser.add_argument("--results-name", default="driver_heap")
    args = parser.parse_args()
    if args.job:
        job(args.job)
        return

    from backlog_source.core.jvm_heap import default_catch_up_bytes, max_heap_of
    from backlog_source.demo.apache_kafka import kafka_version, start_kafka
    from backlog_source.demo.topics import create_topic, produce
    from benchmarks.harness.results import machine, write_results
    from benchmarks.harness.stats import median_and_spread

    command = "python -m benchmarks.driver_heap " + " ".join(sys.argv[1:])
    workloads, sinks, budgets = args.workloads.split(","), args.sinks.split(","), args.budgets.split(",")
    broker = start_kafka(heap_mb=1024)
    runs: list[dict] = []
    try:
        topics = {}
        for workload in workloads:
            topic = f"bench-driver-heap-{workload}-{time.time_ns()}"
            create_topic(broker.bootstrap_servers, topic, PARTITIONS)
            sizes = value_sizes(workload, args.backlog_mib * MIB)
            produce(broker.bootstrap_servers, topic,
                    ((i % PARTITIONS, b"k%08d" % i, b"v" * size) for i, size in enumerate(sizes)))
            topics[workload] = (topic, len(sizes), sum(sizes) + 9 * len(sizes))
            print(f"{workload}: {len(sizes):,} records, {topics[workload][2] / MIB:.0f} MiB", flush=True)
        cases = [(w, s, b) for w in workloads for s in sinks for b in budgets]
        for round_index in range(args.rounds):
            for workload, sink, budget in cases[round_index % len(cases):] + cases[:round_index % len(cases)]:
                topic, records, backlog_bytes = topics[workload]
                with tempfile.TemporaryDirectory(prefix="driver-heap-") as tmp:
                    spec = {"bootstrap": broker.bootstrap_servers, "topic": topic, "sink": sink, "budget": budget,
                            "driver_memory": args.driver_memory, "checkpoint": f"{tmp}/checkpoint"}
                    result = run_job(spec, Path(tmp))
                result.update(workload=workload, sink=sink, budget=budget, round=round_index,
                              drained=result.get("failed") is None and result.get("records") == records,
                              largest_batch_mib=result.get("largest_batch_records", 0) * backlog_bytes / records / MIB)
                runs.append(result)
                print(json.dumps(result), flush=True)
    finally:
        broker.stop()

    heap = max_heap_of(["java", f"-Xmx{args.driver_memory}"], None) if args.driver_memory else None
    default_mib = default_catch_up_bytes(heap) / MIB
    markdown = [
        "# Catch-up batches against the driver's heap (collect-style sinks)", "",
        f"Command: `{command}` (2 cores; Apache Kafka {kafka_version()}, Spark's default settings: `local[*]`, "
        f"driver heap {args.driver_memory or '1g (default)'}). Per run: a job of its own reads a topic of "
        f"{PARTITIONS} partitions holding about {args.backlog_mib} MiB from `earliest` with `Trigger.AvailableNow` "
        f"into a `foreachBatch` that calls the sink. `default` is no option: the source sizes the budget from "
        f"the driver's heap ({default_mib:.0f} MiB here). Median (min-max) of {args.rounds} "
        "round(s); live heap: the most a GC left in use (what the batch needs); in use: G1's peak.", "",
        "| workload | sink | budget | drained | largest batch MiB | live heap peak MiB | heap in use peak MiB | "
        "drain s | failure |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for workload, sink, budget in cases:
        rows = [r for r in runs if (r["workload"], r["sink"], r["budget"]) == (workload, sink, budget)]

        def figure(key: str, rows=rows) -> str:
            # A live heap of 0 is a sample taken before any pool reported a collection: not measured.
            values = [r[key] for r in rows if r.get(key) and r.get("failed") is None]
            if not values:
                return "n/a"
            spread = median_and_spread(values)
            return f"{spread['median']:.0f} ({spread['min']:.0f}-{spread['max']:.0f})"

        failures = sorted({r["failed"] for r in rows if r.get("failed")})
        markdown.append(f"| {workload} | {sink} | {budget} | {sum(r['drained'] for r in rows)} of {len(rows)} | "
                        f"{figure('largest_batch_mib')} | {figure('live_heap_peak_mib')} | "
                        f"{figure('heap_in_use_peak_mib')} | {figure('seconds')} | {'; '.join(failures) or ''} |")
    write_results("driver_heap", args.results_name,
                  {"command": command, "machine": machine(), "driver_memory": args.driver_memory or "1g",
                   "backlog_mib": args.backlog_mib, "runs": runs}, markdown)


if __name__ == "__main__":
    main()
