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
  ``backlog.maxBytesPerTrigger``, 128 MiB);
* ``backlog-time``: ``format("backlog")`` with ``backlog.targetBatchDuration`` 10 s.

Figures per run: drain (``start()`` -> the batch reaching the backlog's end committed), the
largest batch (records, bytes of keys and values, seconds), batches, peak JVM heap and peak
resident memory of the Python processes, files written (Parquet), and a failure (e.g. the
driver out of memory) as an outcome. Not measured here yet (issue 35 asks for them): live
latency after the drain, the time to caught-up after a kill -9 mid-drain, and the start-up
floor of a one-row Python source.

Usage::

    .venv/bin/python -m benchmarks.catch_up_budgets [--runs 1] [--small-records 3000000]
        [--mixed-records 100000] [--workloads small,mixed] [--sink arrow|parquet]
        [--configs a,b,...] [--results-name NAME]

Writes ``benchmarks/results/catch_up_budgets/<results name>.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from itertools import accumulate

import pyspark

from backlog_source.demo.apache_kafka import kafka_version
from backlog_source.demo.embedded_broker import produce
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.costs import MemorySampler
from benchmarks.harness.progress import commit_time_reaching, drain_batches, offset_of
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.runs import rotated, wait_until
from benchmarks.harness.stats import median_and_spread, with_spread
from benchmarks.harness.traffic import create_live_topic, log_ends

PARTITIONS = 8
HISTORY = 1_000
MIB = 1 << 20
CONFIGS: dict[str, dict] = {
    "kafka-no-cap": {"source": "kafka", "options": {}},
    "kafka-cap-small": {"source": "kafka", "options": {"maxOffsetsPerTrigger": "1200000"}},
    "kafka-cap-mixed": {"source": "kafka", "options": {"maxOffsetsPerTrigger": "36000"}},
    "kafka-large-cap-min": {"source": "kafka", "trigger": "1 second",
                            "options": {"maxOffsetsPerTrigger": "1200000", "minOffsetsPerTrigger": "36000",
                                        "maxTriggerDelay": "5s"}},
    "backlog-default": {"source": "backlog", "options": {}},
    "backlog-time": {"source": "backlog", "options": {"backlog.targetBatchDuration": "10s"}},
}


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


def to_arrow(batch_df, batch_id) -> None:
    batch_df.select("key", "value", "partition", "offset").toArrow()


def writer(df, sink: str, checkpoint: str, output: str):
    w = df.writeStream.option("checkpointLocation", checkpoint)
    if sink == "parquet":
        return w.format("parquet").option("path", output)
    return w.foreachBatch(to_arrow)


def positions_of(progress: dict, topic: str, field: str) -> dict[int, int]:
    offset = offset_of(progress["sources"][0][field])
    return {int(p): o for p, o in offset.get("positions", offset).get(topic, {}).items()}


def run(bench, workload: str, name: str, args, round_index: int) -> dict:
    spark, log, bootstrap = bench.spark, bench.log, bench.bootstrap
    config = CONFIGS[name]
    topic = f"bench-catch-up-{workload}-{name}-{time.time_ns()}"
    create_live_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, ((i % PARTITIONS, b"h%d" % i, b"h" * 100) for i in range(HISTORY)))
    count = args.small_records if workload == "small" else args.mixed_records
    backlog = Backlog()
    for p in range(PARTITIONS):  # the history's offsets come first in every partition
        backlog.sizes[p] = [0] * sum(1 for i in range(HISTORY) if i % PARTITIONS == p)
    with tempfile.TemporaryDirectory() as folder:
        checkpoint, output = f"{folder}/checkpoint", f"{folder}/out"
        first = writer(frame(spark, config, bootstrap, topic), args.sink, checkpoint, output)
        earlier = first.trigger(availableNow=True).start()
        earlier.awaitTermination()
        if earlier.exception() is not None:
            raise RuntimeError(f"{name}: the earlier run failed: {earlier.exception()}")
        produce_backlog(bootstrap, topic, workload, count, seed=round_index, backlog=backlog)
        ends = log_ends(bootstrap, topic, PARTITIONS)
        restarted = writer(frame(spark, config, bootstrap, topic), args.sink, checkpoint, output)
        failure = None
        with MemorySampler(spark) as memory:
            called = time.time()
            query = restarted.trigger(processingTime=config.get("trigger", "0 seconds")).start()
            def drained() -> bool:
                if not query.isActive:  # failed (e.g. the driver out of memory): an outcome, not a crash
                    raise RuntimeError(str(query.exception() or "the query stopped"))
                return commit_time_reaching(log.of(query.id), topic, ends) is not None

            try:
                wait_until(drained, args.timeout, f"{name}: the backlog was not drained")
            except (TimeoutError, RuntimeError) as exc:
                failure = str(exc)[-4000:]  # the root cause ends the text
            finally:
                query.stop()
        files = sum(1 for _, _, names in os.walk(output) for n in names if n.endswith(".parquet"))
    # The query id is the checkpoint's: the earlier run's batch (ending at the history) is in
    # the log too and is left out.
    progress = [p for p in log.of(query.id) if p["numInputRows"] and positions_of(p, topic, "endOffset")
                and sum(positions_of(p, topic, "endOffset").values()) > HISTORY]
    if failure is not None:
        print(f"{workload} {name}: failed: {failure}", flush=True)
        return {"failed": failure, "heap_peak_mib": memory.heap_peak_mib, "python_rss_peak_mib": memory.python_peak_mib}
    drained_at = commit_time_reaching(progress, topic, ends)
    batches = []
    for p in progress:
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
        "heap_peak_mib": memory.heap_peak_mib,
        "python_rss_peak_mib": memory.python_peak_mib,
        "files": files if args.sink == "parquet" else None,
        "batches": batches,
    }
    print(f"{workload} {name}: drained {result['drain_s']:.1f} s in {result['batches_to_drain']} batches; largest "
          f"{result['largest_batch_bytes_mib']:.0f} MiB / {result['largest_batch_records']:,} records; longest batch "
          f"{result['largest_batch_s']:.1f} s; heap peak {result['heap_peak_mib']:.0f} MiB, Python "
          f"{result['python_rss_peak_mib']:.0f} MiB", flush=True)
    return result


FIGURES = ("drain_s", "largest_batch_bytes_mib", "largest_batch_records", "largest_batch_s", "batches_to_drain",
           "heap_peak_mib", "python_rss_peak_mib", "files")


def report(runs: dict[str, dict[str, list[dict]]], args) -> None:
    command = "python -m benchmarks.catch_up_budgets " + " ".join(sys.argv[1:])
    summaries = {w: {n: {f: median_and_spread([r[f] for r in rs if r.get(f) is not None]) for f in FIGURES}
                     | {"failed": sum(1 for r in rs if "failed" in r), "runs": len(rs)}
                     for n, rs in by_config.items()} for w, by_config in runs.items()}
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
    ]
    for workload, by_config in summaries.items():
        lines += [f"## {workload}", "",
                  "| configuration | failed | drain s | largest batch MiB | largest batch records | longest batch s | "
                  "batches | JVM heap peak MiB | Python RSS peak MiB |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, s in by_config.items():
            lines.append(f"| {name} | {s['failed']} of {s['runs']} | " + " | ".join(
                with_spread(s[f], ".0f" if f in ("largest_batch_records", "batches_to_drain") else ".1f")
                for f in FIGURES if f != "files") + " |")
        lines.append("")
    write_results("catch_up_budgets", args.results_name,
                  {"command": command, "machine": machine(), "kafka": kafka_version(), "spark": pyspark.__version__,
                   "args": vars(args), "configs": CONFIGS, "summaries": summaries, "runs": runs}, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--small-records", type=int, default=3_000_000)
    parser.add_argument("--mixed-records", type=int, default=100_000)
    parser.add_argument("--workloads", default="small,mixed")
    parser.add_argument("--sink", choices=("arrow", "parquet"), default="arrow")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds a drain may take before it counts as failed")
    parser.add_argument("--results-name", default="catch_up_budgets")
    args = parser.parse_args()
    configs = [c.strip() for c in args.configs.split(",")]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    workloads = [w.strip() for w in args.workloads.split(",")]
    runs: dict[str, dict[str, list[dict]]] = {w: {c: [] for c in configs} for w in workloads}
    with kafka_and_spark(connector=True) as bench:
        for round_index in range(args.runs):
            for workload in workloads:
                for name in rotated(configs, round_index):
                    runs[workload][name].append(run(bench, workload, name, args, round_index))
    report(runs, args)


if __name__ == "__main__":
    main()
