"""Catch-up batches sized by bytes and time against the record caps of ``format("kafka")``:
a job restarted after downtime, on two record mixes, with the same options for every mix.

Issue 35. Per run, on a fresh topic of 8 partitions on Apache Kafka:

1. the job's earlier life: 1,000 records read by the same query with ``Trigger.AvailableNow``,
   so its checkpoint ends at the log end;
2. downtime: a backlog is written, ``--workload small`` (values of 100 B) or ``mixed``
   (nine in ten values of 200 B, one in ten of 16-64 KB: about 3.6 KB per record on average);
3. the restart: the query starts again on that checkpoint with a ``0 seconds`` trigger (a
   configuration may name another) and runs until the batch that reaches the backlog's end
   has committed.

The sink is a ``foreachBatch`` that turns each batch into Arrow (``DataFrame.toArrow()``), as
PySpark users do before writing to a database: its memory in the driver grows with the batch,
the case where the first batch after downtime fails a job. ``--sink parquet`` appends to
Parquet instead.

Configurations, each with the same options in both workloads (a user does not know the mix):

* ``kafka-no-cap``: ``format("kafka")`` as a user gets it: the whole backlog in one batch;
* ``kafka-cap-small`` / ``kafka-cap-mixed``: ``maxOffsetsPerTrigger`` sized so a batch holds
  about 128 MiB of the small / of the mixed workload (1,200,000 and 36,000 records);
* ``kafka-large-cap-min``: a large cap (1,200,000) with ``minOffsetsPerTrigger`` 36,000 and
  ``maxTriggerDelay`` 5 s under a ``1 second`` trigger (the strongest static setup);
* ``backlog-default``: ``format("backlog")`` with no option (its default
  ``backlog.maxBytesPerTrigger``, 256 MiB; 128 MiB before 2026-11-26's last round);
* ``backlog-time``: ``format("backlog")`` with ``backlog.targetBatchDuration`` 10 s;
* only when named in ``--configs``: ``kafka-cap-small-256m`` / ``kafka-cap-mixed-256m``, caps
  sized for about 256 MiB (2,400,000 and 72,000 records), and ``backlog-128m``,
  ``backlog-256m``, ``backlog-512m`` and ``backlog-4g``, byte budgets set explicitly.

Figures per run: drain (``start()`` -> the batch reaching the backlog's end committed), and
for ``format("backlog")`` the drain less the start-up floor of any Python streaming source
(``start()`` -> first trigger of a one-row Python source, measured once per round in the same
session); the largest batch (records, bytes of keys and values, seconds), batches, peak JVM
heap and peak resident memory of the Python processes (all together, and the largest one),
files written (Parquet), and a failure (e.g. the driver out of memory) as an outcome. Then
``--live-seconds`` of live traffic and its end-to-end latency (p50, p99). With
``--recovery`` (the default) the same restart runs again in a job of its own
(:mod:`benchmarks.harness.catch_up_job`), is killed with SIGKILL once half the backlog has
committed (or, with batches that large, a warm drain's time after
``start()``) and started again on its checkpoint: the time to caught-up, and the share of the
backlog committed before the kill (the rest is read again); where the restart's time went
(before ``start()``: the session, ``load()``; then its batches), and the same less a restart
floor: what a fresh job of the one-row Python source pays in ``load()`` and to its first
trigger (:func:`restart_floor`, once per round).

Usage::

    .venv/bin/python -m benchmarks.catch_up_budgets [--runs 1] [--small-records 3000000]
        [--mixed-records 100000] [--workloads small,mixed] [--sink arrow|parquet]
        [--configs a,b,...] [--live-seconds 20] [--live-rate 1000] [--no-recovery]
        [--results-name NAME]

Writes ``benchmarks/results/catch_up_budgets/<results name>.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from itertools import accumulate
from pathlib import Path

import pyspark

from backlog_source.demo.apache_kafka import kafka_version
from backlog_source.demo.topics import produce
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.catch_up_job import to_arrow
from benchmarks.harness.costs import MemorySampler
from benchmarks.harness.job_process import JobProcess
from benchmarks.harness.progress import (
    commit_time_reaching,
    committed_at,
    drain_batches,
    offset_of,
    step_medians,
    step_table,
    timestamp_s,
)
from benchmarks.harness.record_latency import record_latencies
from benchmarks.harness.results import batch_timeline, machine, save_batch_timelines, write_results
from benchmarks.harness.runs import first_trigger_and_total_s, rotated, wait_until
from benchmarks.harness.stats import fmt, median_and_spread, percentile, with_spread
from benchmarks.harness.traffic import create_live_topic, log_ends, produce_and_catch_up
from benchmarks.harness.trivial_source import register_trivial_source
from tests.support.spark_kafka import spark_kafka_connector_jars
from tests.support.topics import delete_topic

PARTITIONS = 8
HISTORY = 1_000
MIB = 1 << 20
MAIN_CONFIGS: dict[str, dict] = {
    "kafka-no-cap": {"source": "kafka", "options": {}},
    "kafka-cap-small": {"source": "kafka", "options": {"maxOffsetsPerTrigger": "1200000"}},
    "kafka-cap-mixed": {"source": "kafka", "options": {"maxOffsetsPerTrigger": "36000"}},
    "kafka-large-cap-min": {"source": "kafka", "trigger": "1 second",
                            "options": {"maxOffsetsPerTrigger": "1200000", "minOffsetsPerTrigger": "36000",
                                        "maxTriggerDelay": "5s"}},
    "backlog-default": {"source": "backlog", "options": {}},
    "backlog-time": {"source": "backlog", "options": {"backlog.targetBatchDuration": "10s"}},
}
#: Run only when named in ``--configs``: caps and budgets of other sizes, for the trade-off between a batch's size
#: and the drain (``backlog-4g`` reads the backlogs of this benchmark in one batch).
SWEEP: dict[str, dict] = {
    "kafka-cap-small-256m": {"source": "kafka", "options": {"maxOffsetsPerTrigger": "2400000"}},
    "kafka-cap-mixed-256m": {"source": "kafka", "options": {"maxOffsetsPerTrigger": "72000"}},
    "backlog-128m": {"source": "backlog", "options": {"backlog.maxBytesPerTrigger": "128m"}},
    "backlog-256m": {"source": "backlog", "options": {"backlog.maxBytesPerTrigger": "256m"}},
    "backlog-512m": {"source": "backlog", "options": {"backlog.maxBytesPerTrigger": "512m"}},
    "backlog-4g": {"source": "backlog", "options": {"backlog.maxBytesPerTrigger": "4g"}},
    # The readers' fetch-ahead queue (librdkafka's queued.max.messages.kbytes; the source's
    # default is 16 MiB): what a catch-up range fetches past its end and drops.
    "backlog-fetch-ahead-4m": {"source": "backlog", "options": {"kafka.queued.max.messages.kbytes": "4096"}},
    "backlog-fetch-ahead-64m": {"source": "backlog", "options": {"kafka.queued.max.messages.kbytes": "65536"}},
    # Catch-up fetches of librdkafka's 1 MiB per partition (the readers' size before fetches
    # were sized by the bytes a range is expected to hold, up to 4 MiB).
    "backlog-fetch-1m": {"source": "backlog", "options": {"kafka.max.partition.fetch.bytes": "1048576"}},
}
CONFIGS = {**MAIN_CONFIGS, **SWEEP}


def values(workload: str, count: int, seed: int) -> list[int]:
    """The value sizes of ``count`` records of ``workload``."""
    if workload == "small":
        return [100] * count
    rng = random.Random(seed)
    return [rng.randint(16_000, 64_000) if rng.random() < 0.1 else 200 for _ in range(count)]


class Backlog:
    """What was produced: per partition, the bytes (key + value) before each offset, so the
    bytes of any batch ``[start, end)`` are known exactly."""

    def __init__(self) -> None:
        self.sizes: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}

    def add(self, partition: int, size: int) -> None:
        self.sizes[partition].append(size)

    def bytes_between(self, start: dict[int, int], end: dict[int, int]) -> int:
        total = 0
        for p, sizes in self.sizes.items():
            prefix = self._prefix(p)
            total += prefix[min(end.get(p, 0), len(sizes))] - prefix[min(start.get(p, 0), len(sizes))]
        return total

    def _prefix(self, p: int) -> list[int]:
        cache = self.__dict__.setdefault("_prefixes", {})
        if p not in cache or len(cache[p]) != len(self.sizes[p]) + 1:
            cache[p] = [0, *accumulate(self.sizes[p])]
        return cache[p]


def produce_backlog(bootstrap: str, topic: str, workload: str, count: int, seed: int, backlog: Backlog) -> None:
    def records():
        for i, size in enumerate(values(workload, count, seed)):
            p = i % PARTITIONS
            key = b"k%07d" % i
            backlog.add(p, len(key) + size)
            yield p, key, b"b" * size

    produce(bootstrap, topic, records())


def frame(spark, config: dict, bootstrap: str, topic: str):
    return (spark.readStream.format(config["source"]).option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").options(**config["options"]).load())


def writer(df, sink: str, checkpoint: str, output: str):
    w = df.writeStream.option("checkpointLocation", checkpoint)
    if sink == "parquet":
        return w.format("parquet").option("path", output)
    return w.foreachBatch(to_arrow)


def positions_of(progress: dict, topic: str, field: str) -> dict[int, int]:
    offset = offset_of(progress["sources"][0][field])
    return {int(p): o for p, o in offset.get("positions", offset).get(topic, {}).items()}


def prepare(bench, workload: str, name: str, args, round_index: int, folder: str) -> tuple[str, Backlog, dict[int, int]]:
    """The job's earlier life and its downtime: a fresh topic with :data:`HISTORY` records, a
    checkpoint in ``folder`` at their end (``Trigger.AvailableNow``, this session), then the
    backlog. Returns the topic, what was produced, and the log ends."""
    config = CONFIGS[name]
    topic = f"bench-catch-up-{workload}-{name}-{time.time_ns()}"
    create_live_topic(bench.bootstrap, topic, PARTITIONS)
    produce(bench.bootstrap, topic, ((i % PARTITIONS, b"h%d" % i, b"h" * 100) for i in range(HISTORY)))
    backlog = Backlog()
    for p, end in history_ends().items():  # the history's offsets come first in every partition
        backlog.sizes[p] = [0] * end
    first = writer(frame(bench.spark, config, bench.bootstrap, topic), args.sink, f"{folder}/checkpoint", f"{folder}/out")
    earlier = first.trigger(availableNow=True).start()
    earlier.awaitTermination()
    if earlier.exception() is not None:
        raise RuntimeError(f"{name}: the earlier run failed: {earlier.exception()}")
    count = args.small_records if workload == "small" else args.mixed_records
    produce_backlog(bench.bootstrap, topic, workload, count, seed=round_index, backlog=backlog)
    return topic, backlog, log_ends(bench.bootstrap, topic, PARTITIONS)


def run(bench, workload: str, name: str, args, round_index: int) -> dict:
    """One restart after downtime in this session: the drain, its batches and memory, then
    ``--live-seconds`` of live traffic and its end-to-end latency."""
    spark, log, bootstrap = bench.spark, bench.log, bench.bootstrap
    config = CONFIGS[name]
    with tempfile.TemporaryDirectory() as folder:
        topic, backlog, ends = prepare(bench, workload, name, args, round_index, folder)
        output = f"{folder}/out"
        restarted = writer(frame(spark, config, bootstrap, topic), args.sink, f"{folder}/checkpoint", output)
        failure, live, files = None, {}, None
        with MemorySampler(spark) as memory:
            called = time.time()
            query = restarted.trigger(processingTime=config.get("trigger", "0 seconds")).start()
            def drained() -> bool:
                if not query.isActive:  # failed (e.g. the driver out of memory): an outcome, not a crash
                    raise RuntimeError(str(query.exception() or "the query stopped"))
                return commit_time_reaching(log.of(query.id), topic, ends) is not None

            try:
                wait_until(drained, args.timeout, f"{name}: the backlog was not drained")
                files = parquet_files(output)  # the drain's, before the live traffic's
                if args.live_seconds:
                    live = live_latency(query, log, bootstrap, topic, args)
            except (TimeoutError, RuntimeError) as exc:
                failure = str(exc)[-4000:]  # the root cause ends the text
            finally:
                query.stop()
        delete_topic(bootstrap, topic)
    # The query id is the checkpoint's: the earlier run's batch (ending at the history) is in
    # the log too and is left out.
    progress = [p for p in log.of(query.id) if p["numInputRows"] and positions_of(p, topic, "endOffset")
                and sum(positions_of(p, topic, "endOffset").values()) > HISTORY]
    if failure is not None:
        print(f"{workload} {name}: failed: {failure}", flush=True)
        return {"failed": failure, "heap_peak_mib": memory.heap_peak_mib, "python_rss_peak_mib": memory.python_peak_mib,
                "largest_worker_mib": memory.largest_worker_mib, "batch_timeline": batch_timeline(progress, called)}
    drained_at = commit_time_reaching(progress, topic, ends)
    batches, drain_progress = [], []
    for p in progress:
        if committed_at(p) > drained_at:
            continue  # a batch of the live traffic
        drain_progress.append(p)
        start, end = positions_of(p, topic, "startOffset"), positions_of(p, topic, "endOffset")
        batches.append({"records": p["numInputRows"], "bytes": backlog.bytes_between(start, end),
                        "seconds": p["durationMs"]["triggerExecution"] / 1000})
    largest = max(batches, key=lambda b: b["bytes"])
    result = {
        "drain_s": drained_at - called,
        "largest_batch_bytes_mib": largest["bytes"] / MIB,
        "largest_batch_records": largest["records"],
        "largest_batch_s": max(b["seconds"] for b in batches),
        **drain_batches(progress, drained_at),
        # Where a catch-up batch's time goes, and whose cost it is (median per step).
        "steps_ms": step_medians(drain_progress),
        "heap_peak_mib": memory.heap_peak_mib,
        "python_rss_peak_mib": memory.python_peak_mib,
        "largest_worker_mib": memory.largest_worker_mib,
        "files": files if args.sink == "parquet" else None,
        **live,
        "batches": batches,
        "batch_timeline": batch_timeline(progress, called),
    }
    print(f"{workload} {name}: drained {result['drain_s']:.1f} s in {result['batches_to_drain']} batches; largest "
          f"{result['largest_batch_bytes_mib']:.0f} MiB / {result['largest_batch_records']:,} records; longest batch "
          f"{result['largest_batch_s']:.1f} s; heap peak {result['heap_peak_mib']:.0f} MiB, Python "
          f"{result['python_rss_peak_mib']:.0f} MiB; live p50/p99 {live.get('latency_p50_s', float('nan')):.2f}/"
          f"{live.get('latency_p99_s', float('nan')):.2f} s", flush=True)
    return result


def live_latency(query, log, bootstrap: str, topic: str, args) -> dict:
    """``--live-rate`` records/s of 100 B for ``--live-seconds`` into the drained query's topic;
    the end-to-end latency of each (:mod:`benchmarks.harness.record_latency`)."""
    delivered, caught_up = produce_and_catch_up(query, bootstrap, topic, PARTITIONS, args.live_rate, args.live_seconds)
    if not caught_up:
        raise RuntimeError(f"the query did not keep up with {args.live_rate:g} records/s of live traffic")
    latencies = record_latencies(topic, log.of(query.id), delivered)
    return {"latency_p50_s": percentile(latencies, 0.50), "latency_p99_s": percentile(latencies, 0.99),
            "live_records": len(latencies)}


class CatchUpJob:
    """:mod:`benchmarks.harness.catch_up_job` as a :class:`JobProcess` (killed with its JVM
    and Python workers), told what to run by ``spec.json`` in ``work`` and stopped by a
    ``stop`` file there; it writes ``started.json`` and ``progress.jsonl``."""

    def __init__(self, spec: dict, work: Path) -> None:
        self.work = work
        (work / "spec.json").write_text(json.dumps(spec))
        self.job = JobProcess("benchmarks.harness.catch_up_job", [str(work / "spec.json")], work / "job.log")

    def start(self, timeout_s: float) -> dict[str, float]:
        """Start the job; returns its ``started.json``: the wall-clock times its ``main()`` began,
        its session was ready, ``load()`` returned and ``start()`` was called."""
        (self.work / "started.json").unlink(missing_ok=True)
        self.job.start()
        wait_until(lambda: self.job.running() and (self.work / "started.json").exists(), timeout_s, "the job to start")
        return json.loads((self.work / "started.json").read_text())

    def progress(self) -> list[dict]:
        path = self.work / "progress.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def running(self) -> bool:
        return self.job.running()

    def kill(self) -> None:
        self.job.kill()

    def stop(self, timeout_s: float = 120) -> None:
        """Ask the job to stop its query and exit; killed if it has not within ``timeout_s``."""
        if self.job.process is None or self.job.process.poll() is not None:
            return
        (self.work / "stop").write_text("")
        try:
            self.job.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


def recover(bench, workload: str, name: str, args, round_index: int, drain_s: float) -> dict:
    """The driver killed halfway through the drain: the same restart after downtime as
    :func:`run`, in a job of its own, SIGKILLed once it has committed half the backlog, or
    ``drain_s`` after its ``start()`` if it has not by then (``drain_s``: this configuration's
    drain in :func:`run`, same round; a configuration whose batches are that large loses the
    batch in flight), then started again on its checkpoint. Figures: the share committed
    before the kill, and the time from the new ``start()`` to the commit of the batch
    reaching the backlog's end."""
    config = CONFIGS[name]
    with tempfile.TemporaryDirectory() as folder:
        topic, backlog, ends = prepare(bench, workload, name, args, round_index, folder)
        work = Path(folder) / "job"
        work.mkdir()
        spec = {"bootstrap": bench.bootstrap, "topic": topic, "source": config["source"], "options": config["options"],
                "trigger": config.get("trigger", "0 seconds"), "sink": args.sink, "checkpoint": f"{folder}/checkpoint",
                "output": f"{folder}/out", "work": str(work),
                "jars": [str(j) for j in spark_kafka_connector_jars()] if config["source"] == "kafka" else []}
        job = CatchUpJob(spec, work)
        try:
            called = job.start(timeout_s=300)["start_called"]
            half = HISTORY + (sum(ends.values()) - HISTORY) / 2

            def committed() -> int:
                return max((sum(positions_of(p, topic, "endOffset").values()) for p in job.progress()
                            if p["numInputRows"]), default=HISTORY)

            wait_until(lambda: job.running() and (committed() >= half or time.time() >= called + drain_s),
                       args.timeout, "halfway")
            job.kill()
            killed_at = time.time()
            committed_at_kill = committed()
            before_restart = len(job.progress())
            started = job.start(timeout_s=300)
            restarted = started["start_called"]
            wait_until(lambda: job.running() and commit_time_reaching(job.progress(), topic, ends) is not None,
                       args.timeout, f"{name}: the restarted job did not drain the backlog")
            caught_up = commit_time_reaching(job.progress(), topic, ends)
            recovered = [p for p in job.progress()[before_restart:] if p["numInputRows"]]
        except (TimeoutError, RuntimeError) as exc:
            print(f"{workload} {name}: recovery failed: {exc}", flush=True)
            return {"recovery_failed": str(exc)[-4000:]}
        finally:
            job.stop()
        delete_topic(bench.bootstrap, topic)
    total = sum(ends.values()) - HISTORY
    result = {"recovery_s": caught_up - restarted, "kill_to_caught_up_s": caught_up - killed_at,
              "committed_before_kill": (committed_at_kill - HISTORY) / total, "killed_after_s": killed_at - called,
              # Where a restart's time goes: before start() (the new JVM, registering and loading
              # the source) and the restarted job's batches with data, in Spark's steps.
              "restart_phases_s": {"kill_to_main": started["began"] - killed_at,
                                   "session": started["session_ready"] - started["began"],
                                   "load": started["loaded"] - started["session_ready"],
                                   "to_start": restarted - started["loaded"]},
              "first_recovered_batch_committed_s": committed_at(recovered[0]) - restarted,
              "recovered_batches": [{"batchId": p["batchId"], "numInputRows": p["numInputRows"],
                                     "timestamp": p["timestamp"], "durationMs": p["durationMs"]} for p in recovered]}
    print(f"{workload} {name}: killed {killed_at - called:.1f} s after start() with {result['committed_before_kill']:.0%} committed; "
          f"restarted job caught up {result['recovery_s']:.1f} s after its start() "
          f"({result['kill_to_caught_up_s']:.1f} s after the kill)", flush=True)
    return result


def parquet_files(folder: str) -> int:
    return sum(1 for _, _, names in os.walk(folder) for n in names if n.endswith(".parquet"))


def history_ends() -> dict[int, int]:
    """Per partition, where the backlog starts: the end of the job's earlier life."""
    return {p: sum(1 for i in range(HISTORY) if i % PARTITIONS == p) for p in range(PARTITIONS)}


def startup_floor(bench) -> float:
    """Seconds from ``start()`` to the first trigger of a one-row Python streaming source
    (PySpark's own floor for any Python source, issue 35 item 6), in this session."""
    register_trivial_source(bench.spark)
    return first_trigger_and_total_s(bench.spark.readStream.format("trivial_python").load())[0]


def restart_floor(folder: str) -> dict[str, float]:
    """What a fresh job of the one-row Python source spends in ``load()`` and from ``start()``
    to its first trigger (in seconds): what a restarted job pays for any Python streaming
    source, a fresh JVM's and fresh Python processes' share of PySpark's machinery."""
    work = Path(folder) / "floor"
    work.mkdir()
    spec = {"source": "trivial_python", "options": {}, "trigger": "0 seconds", "sink": "noop",
            "checkpoint": f"{folder}/floor-checkpoint", "work": str(work), "jars": []}
    job = CatchUpJob(spec, work)
    try:
        started = job.start(timeout_s=300)
        wait_until(lambda: job.running() and bool(job.progress()), 300, "the one-row Python source's first trigger")
        first_trigger = timestamp_s(job.progress()[0]["timestamp"])
    finally:
        job.stop()
    return {"load_s": started["loaded"] - started["session_ready"],
            "first_trigger_s": first_trigger - started["start_called"]}


def with_recovery_less_floor(runs: dict[str, dict[str, list[dict]]], floors: list[dict[str, float]]) -> None:
    """Adds ``kill_to_caught_up_less_floor_s`` to each ``format("backlog")`` run with a kill -9
    figure: less its round's restart floor (:func:`restart_floor`): the first trigger's, and the
    share of the Python source's ``load()`` above the median ``load()`` of ``format("kafka")``'s
    restarted jobs (what a JVM source pays there too stays in the figure). ``format("kafka")``'s
    figure is the same as without the floor."""
    kafka_loads = [r["restart_phases_s"]["load"] for by_config in runs.values() for n, rs in by_config.items()
                   if CONFIGS[n]["source"] == "kafka" for r in rs if "restart_phases_s" in r]
    kafka_load = percentile(kafka_loads, 0.5) if kafka_loads else None
    for by_config in runs.values():
        for name, rs in by_config.items():
            for r in rs:
                if "kill_to_caught_up_s" not in r:
                    continue
                floor = floors[r["round"]]
                less = 0.0
                if CONFIGS[name]["source"] == "backlog":
                    less = floor["first_trigger_s"] + (max(0.0, floor["load_s"] - kafka_load)
                                                       if kafka_load is not None else 0.0)
                r["kill_to_caught_up_less_floor_s"] = r["kill_to_caught_up_s"] - less


FIGURES = ("drain_s", "drain_less_floor_s", "largest_batch_bytes_mib", "largest_batch_records", "largest_batch_s",
           "batches_to_drain", "heap_peak_mib", "python_rss_peak_mib", "largest_worker_mib", "files", "latency_p50_s",
           "latency_p99_s", "recovery_s", "kill_to_caught_up_s", "kill_to_caught_up_less_floor_s",
           "committed_before_kill")
#: Markdown columns: figure -> (header, format).
COLUMNS = {"drain_s": ("drain s", ".1f"), "drain_less_floor_s": ("drain less floor s", ".1f"),
           "largest_batch_bytes_mib": ("largest batch MiB", ".0f"), "largest_batch_records": ("largest batch records", ".0f"),
           "largest_batch_s": ("longest batch s", ".1f"), "batches_to_drain": ("batches", ".0f"),
           "heap_peak_mib": ("JVM heap peak MiB", ".0f"), "python_rss_peak_mib": ("Python RSS peak MiB", ".0f"),
           "largest_worker_mib": ("largest Python process MiB", ".0f"), "files": ("files", ".0f"),
           "latency_p50_s": ("live p50 s", ".2f"), "latency_p99_s": ("live p99 s", ".2f"),
           "recovery_s": ("kill -9: start() -> caught up s", ".1f"),
           "kill_to_caught_up_s": ("kill -9 -> caught up s", ".1f"),
           "kill_to_caught_up_less_floor_s": ("kill -9 -> caught up less floor s", ".1f"),
           "committed_before_kill": ("committed at kill", ".2f")}


def restart_table(by_config: dict[str, list[dict]]) -> list[str]:
    """Where the kill -9 runs' restart went, median over rounds: before ``start()`` (to the
    job's ``main()``, the session with the source registered, ``load()``, to ``start()``),
    then the first batch the restarted job committed and the batches after it."""
    def med(values) -> str:
        return fmt(median_and_spread([v for v in values if v is not None])["median"])

    lines = ["Where a restart after kill -9 went (median over rounds; s, and ms for Spark's steps): before "
             "`start()`, then the restarted job's batches with data (the first one replays the batch in flight "
             "at the kill).", "",
             "| configuration | kill -> main() | session + register | load() | -> start() | start() -> first batch "
             "committed | first batch: triggerExecution / addBatch ms | later batches: triggerExecution / addBatch "
             "ms (median) | batches |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, rs in by_config.items():
        rs = [r for r in rs if "restart_phases_s" in r and r["recovered_batches"]]
        if not rs:
            continue
        phases = [r["restart_phases_s"] for r in rs]
        firsts = [r["recovered_batches"][0]["durationMs"] for r in rs]
        laters = [b["durationMs"] for r in rs for b in r["recovered_batches"][1:]]
        lines.append(
            f"| {name} | "
            + " | ".join(med(p[k] for p in phases) for k in ("kill_to_main", "session", "load", "to_start"))
            + f" | {med(r['first_recovered_batch_committed_s'] for r in rs)}"
            + f" | {med(f['triggerExecution'] for f in firsts)} / {med(f.get('addBatch') for f in firsts)}"
            + f" | {med(d['triggerExecution'] for d in laters)} / {med(d.get('addBatch') for d in laters)}"
            + f" | {med(len(r['recovered_batches']) for r in rs)} |")
    return lines + [""]


def report(runs: dict[str, dict[str, list[dict]]], floors: list[float], restart_floors: list[dict[str, float]],
           args) -> None:
    command = "python -m benchmarks.catch_up_budgets " + " ".join(sys.argv[1:])
    summaries = {w: {n: {f: median_and_spread([r[f] for r in rs if r.get(f) is not None]) for f in FIGURES}
                     | {"failed": sum(1 for r in rs if "failed" in r), "runs": len(rs)}
                     for n, rs in by_config.items()} for w, by_config in runs.items()}
    floor = median_and_spread(floors)

    def restart_floor_s(part: str) -> str:
        return with_spread(median_and_spread([f[part] for f in restart_floors]))
    columns = [f for f in FIGURES if f != "files" or args.sink == "parquet"]
    lines = [
        "# Catch-up batches sized by bytes and time against format(\"kafka\")'s record caps", "",
        f"Command: `{command}` ({machine()['cpus']} cores; Apache Kafka {kafka_version()}, Spark {pyspark.__version__}, "
        f"Spark's default settings: a 1 GiB driver). Per run: a checkpoint at the log end of {HISTORY:,} records, "
        f"then a backlog over {PARTITIONS} partitions (small: {args.small_records:,} records of 100 B values; mixed: "
        f"{args.mixed_records:,} records, 90 % 200 B and 10 % 16-64 KB values), then the restart with a `0 seconds` "
        f"trigger until the backlog is read. Sink: "
        + ("a `foreachBatch` that converts each batch to Arrow (`toArrow()`)" if args.sink == "arrow" else "Parquet")
        + f". Median (min-max) of {args.runs} round(s) in rotated order, after a warm-up query. Same options in "
        "both workloads. Bytes: keys and values of the batch's offsets, as produced.", "",
        f"Drain: `start()` -> the batch reaching the backlog's end committed. Drain less floor: for `format(\"backlog\")`, "
        f"the drain less the start-up floor of any Python source (`start()` -> first trigger of a one-row Python "
        f"source, measured once per round in this session: {with_spread(floor)} s); for `format(\"kafka\")` the drain. "
        + (f"Live: {args.live_rate:g} records/s of 100 B for {args.live_seconds:g} s after the drain, end-to-end "
           "latency per record (Kafka's append time -> the batch's commit). " if args.live_seconds else "")
        + ("Kill -9: the same restart in a job of its own, SIGKILLed (process group: JVM and Python workers) once "
           "half the backlog has committed (with batches too large for that, the warm drain's time after `start()`: "
           "the batch in flight is lost), then started again on its checkpoint; `start()` -> caught up excludes the "
           "new JVM's start-up, kill -9 -> caught up includes it; committed at kill: the backlog's share committed "
           "before the kill (the rest is read again). Less floor: for `format(\"backlog\")`, less what a fresh job "
           "of the one-row Python source pays that a JVM source does not, measured once per round in a job of its "
           f"own: `start()` -> first trigger, {restart_floor_s('first_trigger_s')} s, and `load()`, "
           f"{restart_floor_s('load_s')} s, above the median "
           "`load()` of `format(\"kafka\")`'s restarted jobs (in the table of where a restart went, below)."
           if args.recovery else ""), "",
    ]
    for workload, by_config in summaries.items():
        lines += [f"## {workload}", "", "| configuration | failed | " + " | ".join(COLUMNS[f][0] for f in columns) + " |",
                  "| --- | --- | " + " | ".join("---:" for _ in columns) + " |"]
        for name, s in by_config.items():
            lines.append(f"| {name} | {s['failed']} of {s['runs']} | "
                         + " | ".join(with_spread(s[f], COLUMNS[f][1]) for f in columns) + " |")
        lines += ["", "Spark's steps of a drain batch (`durationMs`, median per run, median over rounds, ms):", "",
                  *step_table({n: [r for r in rs if "failed" not in r] for n, rs in runs[workload].items()},
                              "steps_ms"), ""]
        if args.recovery:
            lines += restart_table(runs[workload])
    write_results("catch_up_budgets", args.results_name,
                  {"command": command, "machine": machine(), "kafka": kafka_version(), "spark": pyspark.__version__,
                   "args": vars(args), "configs": CONFIGS, "floor_s": floors, "restart_floors": restart_floors,
                   "summaries": summaries, "runs": runs},
                  lines)
    save_batch_timelines("catch_up_budgets", args.results_name, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--small-records", type=int, default=3_000_000)
    parser.add_argument("--mixed-records", type=int, default=100_000)
    parser.add_argument("--workloads", default="small,mixed")
    parser.add_argument("--sink", choices=("arrow", "parquet"), default="arrow")
    parser.add_argument("--configs", default=",".join(MAIN_CONFIGS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds a drain may take before it counts as failed")
    parser.add_argument("--live-seconds", type=float, default=20,
                        help="seconds of live traffic after the drain, for its latency (0: none)")
    parser.add_argument("--live-rate", type=float, default=1_000, help="records/s of the live traffic")
    parser.add_argument("--recovery", action=argparse.BooleanOptionalAction, default=True,
                        help="also kill the driver halfway through a second drain and time the recovery")
    parser.add_argument("--results-name", default="catch_up_budgets")
    args = parser.parse_args()
    configs = [c.strip() for c in args.configs.split(",")]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    workloads = [w.strip() for w in args.workloads.split(",")]
    runs: dict[str, dict[str, list[dict]]] = {w: {c: [] for c in configs} for w in workloads}
    floors: list[float] = []
    restart_floors: list[dict[str, float]] = []
    with kafka_and_spark(connector=True) as bench:
        startup_floor(bench)  # its warm-up
        for round_index in range(args.runs):
            floors.append(startup_floor(bench))
            if args.recovery:
                with tempfile.TemporaryDirectory() as folder:
                    restart_floors.append(restart_floor(folder))
            for workload in workloads:
                for name in rotated(configs, round_index):
                    result = run(bench, workload, name, args, round_index) | {"round": round_index}
                    if "drain_s" in result:
                        result["drain_less_floor_s"] = result["drain_s"] - (
                            floors[-1] if CONFIGS[name]["source"] == "backlog" else 0.0)
                        if args.recovery:
                            result.update(recover(bench, workload, name, args, round_index, result["drain_s"]))
                    runs[workload][name].append(result)
    if args.recovery:
        with_recovery_less_floor(runs, restart_floors)
    report(runs, floors, restart_floors, args)


if __name__ == "__main__":
    main()
