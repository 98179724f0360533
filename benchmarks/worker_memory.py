"""Peak memory against record size: how large a Python worker grows while ``format("backlog")``
reads records of 100 B to 1 MB, beside ``format("kafka")``'s JVM on the same topics (issue 35
item 4).

The read path is bounded by bytes: each Arrow batch a reader yields holds about
``ARROW_BATCH_BYTES`` (32 MiB) whatever the record size (``reader/kafka_reader.py``), and a
catch-up batch reads about ``backlog.maxBytesPerTrigger`` (256 MiB by default), cut into tasks
of at most ``TASK_BYTES`` (32 MiB) once sizes are measured. So a worker's peak should stay
within a small multiple of those bounds, however large the records (before the bound, one
task reading 1 GB of 256 KB records peaked at 2.66 GB).

For each ``--value-sizes``: one topic of about ``--topic-mib`` MiB over ``--partitions``
partitions on Apache Kafka (``make jvm``), drained by each source with ``Trigger.AvailableNow``
into ``noop`` from ``earliest``, Spark's defaults and each source's defaults. A warm-up drain of
each source first, then ``--rounds`` rounds in rotated order. Per drain, sampled every 0.2 s:
the **largest single Python worker's** resident memory (the figure the bound is about) and
its growth over that worker's size before the drain, the growth of all Spark's Python
processes together, the JVM heap in use, and the seconds. Medians with the spread.

Usage::

    .venv/bin/python -m benchmarks.worker_memory [--value-sizes 100,10000,100000,1000000] [--topic-mib 256] [--rounds 2]

Writes ``benchmarks/results/worker_memory/worker_memory.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import sys

import pyspark

from backlog_source.demo.apache_kafka import kafka_version
from backlog_source.demo.topics import create_topic
from backlog_source.reader.kafka_reader import ARROW_BATCH_BYTES
from backlog_source.split.batch_splits import TASK_BYTES
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.costs import MemorySampler
from benchmarks.harness.results import machine, results_folder, write_results
from benchmarks.harness.runs import rotated, run_available_now
from benchmarks.harness.stats import median_and_spread, with_spread

SOURCES = ("kafka", "backlog")
MIB = 1 << 20


def fill(bootstrap: str, topic: str, partitions: int, value_size: int, total_mib: int) -> int:
    """About ``total_mib`` MiB of ``value_size``-byte values; returns the records written."""
    from confluent_kafka import Producer

    records = max(partitions, total_mib * MIB // value_size)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.max.bytes": max(1_000_000, value_size + 4_096)})
    value = b"v" * value_size
    for n in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=b"k%d" % n, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(300) != 0:
        raise RuntimeError(f"{topic}: not every record was acknowledged")
    return records


def drain(spark, source: str, bootstrap: str, topic: str, expected: int) -> dict:
    df = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").load())
    with MemorySampler(spark, interval_s=0.2) as peaks:
        _, seconds, query = run_available_now(df)
    progress = [json.loads(p.json) for p in query.recentProgress]
    rows = sum(p["numInputRows"] for p in progress)
    if rows != expected:
        raise RuntimeError(f"format({source!r}) read {rows:,} of {expected:,} records of {topic}")
    return {"seconds": seconds, "largest_worker_mib": peaks.largest_worker_mib,
            "largest_worker_growth_mib": peaks.largest_worker_growth_mib,
            "all_python_growth_mib": peaks.python_peak_mib - peaks.python_start_mib, "heap_peak_mib": peaks.heap_peak_mib,
            "batches": sum(1 for p in progress if p["numInputRows"] > 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--value-sizes", default="100,10000,100000,1000000")
    parser.add_argument("--topic-mib", type=int, default=256)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--results-name", default="worker_memory")
    args = parser.parse_args()
    sizes = [int(s) for s in args.value_sizes.split(",")]
    runs: dict[str, dict[str, list[dict]]] = {str(size): {s: [] for s in SOURCES} for size in sizes}
    records: dict[str, int] = {}
    with kafka_and_spark(connector=True) as bench:
        spark, bootstrap = bench.spark, bench.bootstrap
        for size in sizes:
            topic = f"bench-worker-memory-{size}"
            create_topic(bootstrap, topic, args.partitions)
            records[str(size)] = fill(bootstrap, topic, args.partitions, size, args.topic_mib)
            print(f"{topic}: {records[str(size)]:,} records", flush=True)
            for source in SOURCES:  # warm-up on this topic
                drain(spark, source, bootstrap, topic, records[str(size)])
            for round_index in range(args.rounds):
                for source in rotated(list(SOURCES), round_index):
                    run = drain(spark, source, bootstrap, topic, records[str(size)])
                    runs[str(size)][source].append(run)
                    print(f"{size} B, round {round_index}: {source}: {run['seconds']:.1f} s, largest worker "
                          f"{run['largest_worker_mib']:.0f} MiB, JVM heap {run['heap_peak_mib']:.0f} MiB", flush=True)
    summary = summarize(args, runs, records)
    write_results("worker_memory", args.results_name, summary, markdown(summary))
    picture(summary, results_folder("worker_memory") / f"{args.results_name}.png")


def summarize(args, runs: dict, records: dict) -> dict:
    figures = {size: {source: {key: median_and_spread([r[key] for r in per_source[source]])
                               for key in ("seconds", "largest_worker_mib", "largest_worker_growth_mib",
                                           "all_python_growth_mib", "heap_peak_mib", "batches")}
                      for source in SOURCES}
               for size, per_source in runs.items()}
    return {"command": "python -m benchmarks.worker_memory " + " ".join(sys.argv[1:]), "machine": machine(),
            "kafka": kafka_version(), "spark": pyspark.__version__, "args": vars(args), "records": records,
            "bounds_mib": {"arrow_batch": ARROW_BATCH_BYTES / MIB, "task": TASK_BYTES / MIB},
            "figures": figures, "runs": runs}


def markdown(summary: dict) -> list[str]:
    args = summary["args"]
    lines = [f"# Peak memory against record size ({args['topic_mib']} MiB per topic, {args['partitions']} partitions)",
             "", f"Command: `{summary['command']}` (Apache Kafka {summary['kafka']}, Spark {summary['spark']}, Spark's "
             "defaults and each source's; `Trigger.AvailableNow` into `noop`)", "",
             f"Median of {args['rounds']} rounds in rotated order after a warm-up drain (min-max). The read path's "
             f"bounds: {summary['bounds_mib']['arrow_batch']:.0f} MiB per Arrow batch, "
             f"{summary['bounds_mib']['task']:.0f} MiB per catch-up task.", "",
             "| value size | records | source | seconds | batches | largest Python worker MiB | its growth MiB | "
             "all Python growth MiB | JVM heap peak MiB |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size, per_source in summary["figures"].items():
        for source, figure in per_source.items():
            lines.append(f"| {int(size):,} B | {summary['records'][size]:,} | `{source}` | {with_spread(figure['seconds'])} | "
                         f"{figure['batches']['median']:.0f} | {with_spread(figure['largest_worker_mib'], '.0f')} | "
                         f"{with_spread(figure['largest_worker_growth_mib'], '.0f')} | "
                         f"{with_spread(figure['all_python_growth_mib'], '.0f')} | "
                         f"{with_spread(figure['heap_peak_mib'], '.0f')} |")
    return lines


def picture(summary: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) for s in summary["figures"]]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for source, key, label in (("backlog", "largest_worker_mib", "format('backlog'): largest Python worker"),
                               ("kafka", "heap_peak_mib", "format('kafka'): JVM heap in use"),
                               ("backlog", "heap_peak_mib", "format('backlog'): JVM heap in use")):
        ax.plot(sizes, [summary["figures"][str(s)][source][key]["median"] for s in sizes], "o-", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("value size (bytes)")
    ax.set_ylabel("peak MiB")
    ax.set_title(f"Peak memory draining {summary['args']['topic_mib']} MiB per record size")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
