"""Adaptive triggers vs. fixed ones: drain time, then latency under live traffic.

After one warm-up query, for each configuration, on a fresh topic with the same backlog
and live traffic:

* ``adaptive``: ``start_backlog_aware(writer, "0 seconds", "1 second")`` with
  ``backlog.maxOffsetsPerTrigger`` = 5M (high-throughput) and ``maxOffsetsPerTrigger`` = 50k
  (low-latency);
* ``fixed-low-latency``: 1 s trigger, ``maxOffsetsPerTrigger`` 50k;
* ``fixed-high-throughput``: 30 s trigger, ``maxOffsetsPerTrigger`` 5M.

Measured in the sink (``foreachBatch``, in the driver): drain time (query start -> the
batch that reaches the backlog's end offsets has committed), then for every live record
its end-to-end latency (produce timestamp -> end of the batch that wrote it), and the
number of batches. For ``adaptive`` also the switch cost: end of the last high-throughput
batch -> start of the first low-latency batch.

Usage::

    .venv/bin/python benchmarks/mode_switch.py [--backlog 2000000] [--rate 1000] [--live-seconds 120]

Writes ``benchmarks/results/mode_switch.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backlog_source.testing.broker import create_topic, produce, start_broker  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 8


def live_producer(bootstrap: str, topic: str, rate: int, seconds: float, stop) -> None:
    """``rate`` records/s, one record per request (no ListOffsets quirk), round-robin."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    started = time.perf_counter()
    sent = 0
    while not stop.is_set() and time.perf_counter() - started < seconds:
        due = int((time.perf_counter() - started) * rate)
        while sent < due:
            producer.produce(topic, value=b"l" * 100, partition=sent % PARTITIONS)
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(30)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(spark, bootstrap: str, name: str, args) -> dict:
    from pyspark.sql import functions as F

    from backlog_source import start_backlog_aware

    topic = f"bench-mode-{name}-{int(time.time())}"
    create_topic(bootstrap, topic, PARTITIONS)
    per = args.backlog // PARTITIONS
    produce(bootstrap, topic, ((i % PARTITIONS, None, b"b" * 100) for i in range(per * PARTITIONS)))
    backlog_end = per + 1  # + the seal record

    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    if name == "adaptive":
        options |= {"backlog.maxOffsetsPerTrigger": "5000000", "maxOffsetsPerTrigger": "50000"}
    elif name == "fixed-low-latency":
        options |= {"maxOffsetsPerTrigger": "50000"}
    else:
        options |= {"maxOffsetsPerTrigger": "5000000"}
    df = spark.readStream.format("backlog").options(**options).load()

    batches: list[dict] = []
    latencies: list[float] = []
    seen: dict[int, int] = {}  # highest offset written so far, per partition
    state = {"drained_at": None, "handle": None}
    started = time.time()
    live_from_ms = [None]

    def sink(batch_df, batch_id):
        begin = time.time()
        # One read of the batch: the actions below would each re-read Kafka otherwise.
        batch_df = batch_df.select("partition", "offset", F.unix_millis("timestamp").alias("ms"),
                                   F.col("value").startswith(F.lit(b"l")).alias("live")).persist()
        stats = batch_df.groupBy("partition").agg(F.max("offset").alias("max_offset"), F.count("*").alias("n")).collect()
        live = batch_df.where("live").select("ms").collect() if live_from_ms[0] else []
        count = sum(r.n for r in stats)
        batch_df.unpersist()
        end = time.time()
        latencies.extend(end - row.ms / 1000 for row in live)
        handle = state["handle"]
        batches.append({"batch_id": batch_id, "start": begin - started, "end": end - started, "records": count,
                        "mode": handle.mode if handle else name})
        for row in stats:
            seen[row.partition] = max(seen.get(row.partition, -1), row.max_offset)
        if state["drained_at"] is None and len(seen) == PARTITIONS and all(o >= backlog_end - 1 for o in seen.values()):
            state["drained_at"] = end - started

    with tempfile.TemporaryDirectory() as checkpoint:
        writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
        stop = mp.Event()
        producer = None
        try:
            if name == "adaptive":
                state["handle"] = start_backlog_aware(writer, "0 seconds", "1 second")
            else:
                interval = "1 second" if name == "fixed-low-latency" else "30 seconds"
                query = writer.trigger(processingTime=interval).start()
            while state["drained_at"] is None:
                if time.time() - started > 900:
                    raise RuntimeError(f"{name}: backlog not drained in 15 minutes")
                time.sleep(0.2)
            live_from_ms[0] = time.time() * 1000
            producer = mp.Process(target=live_producer, args=(bootstrap, topic, args.rate, args.live_seconds, stop))
            producer.start()
            producer.join(args.live_seconds + 60)
            time.sleep(32 if name == "fixed-high-throughput" else 3)  # let the last live records land
        finally:
            stop.set()
            if state["handle"] is not None:
                state["handle"].stop()
            elif "query" in locals():
                query.stop()
    result = {
        "drain_seconds": state["drained_at"],
        "live_records_measured": len(latencies),
        "latency_p50_s": percentile(latencies, 0.50),
        "latency_p99_s": percentile(latencies, 0.99),
        "batches_to_drain": sum(1 for b in batches if b["end"] <= state["drained_at"]),
        "batches_live": sum(1 for b in batches if b["end"] > state["drained_at"]),
        "batches": batches,
    }
    if state["handle"] is not None:
        transitions = state["handle"].transitions
        result["transitions"] = [t.__dict__ for t in transitions]
        last_ht = max((b for b in batches if b["mode"] == "high-throughput"), key=lambda b: b["end"], default=None)
        first_ll = min((b for b in batches if b["mode"] == "low-latency"), key=lambda b: b["start"], default=None)
        if last_ht and first_ll:
            result["switch_cost_seconds"] = first_ll["start"] - last_ht["end"]
    print(f"{name}: drained in {result['drain_seconds']:.1f} s, p50 {result['latency_p50_s']}, "
          f"p99 {result['latency_p99_s']}, switch {result.get('switch_cost_seconds')}")
    return result


def warm_up(spark, bootstrap: str) -> None:
    """One small query first, so no configuration pays the JVM's and the Python workers'
    cold start (the first query of a session was measured ~5 s slower)."""
    topic = f"bench-warm-up-{int(time.time())}"
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, ((i % PARTITIONS, None, b"w" * 100) for i in range(200_000)))
    with tempfile.TemporaryDirectory() as checkpoint:
        (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest").load()
         .writeStream.foreachBatch(lambda df, _: df.count()).trigger(availableNow=True)
         .option("checkpointLocation", checkpoint).start().awaitTermination())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=2_000_000)
    parser.add_argument("--rate", type=int, default=1_000)
    parser.add_argument("--live-seconds", type=float, default=120)
    parser.add_argument("--configs", default="adaptive,fixed-low-latency,fixed-high-throughput")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource

    broker = start_broker()
    try:
        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.driver.memory", "4g").config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(BacklogDataSource)
        warm_up(spark, broker.bootstrap_servers)
        results = {name: run(spark, broker.bootstrap_servers, name, args) for name in args.configs.split(",")}
        spark.stop()
    finally:
        broker.stop()
    write_report(results, args)


def write_report(results: dict, args) -> None:
    RESULTS.mkdir(exist_ok=True)
    command = "python benchmarks/mode_switch.py " + " ".join(sys.argv[1:])
    summary = {"command": command, "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
               "backlog": args.backlog, "rate": args.rate, "live_seconds": args.live_seconds, "results": results}
    fixed = [results[n] for n in ("fixed-low-latency", "fixed-high-throughput") if n in results]
    if "adaptive" in results and fixed:
        best_drain = min(r["drain_seconds"] for r in fixed)
        summary["adaptive_drain_vs_best_fixed"] = results["adaptive"]["drain_seconds"] / best_drain
        if "fixed-low-latency" in results and results["fixed-low-latency"]["latency_p99_s"]:
            summary["adaptive_p99_vs_fixed_low_latency"] = (
                results["adaptive"]["latency_p99_s"] / results["fixed-low-latency"]["latency_p99_s"])
    (RESULTS / "mode_switch.json").write_text(json.dumps(summary, indent=2) + "\n")

    def fmt(value, spec=".2f"):
        return "n/a" if value is None else format(value, spec)

    rows = "\n".join(
        f"| {name} | {fmt(r['drain_seconds'], '.1f')} | {r['batches_to_drain']} | {fmt(r['latency_p50_s'])} | "
        f"{fmt(r['latency_p99_s'])} | {r['batches_live']} | {r['live_records_measured']:,} |"
        for name, r in results.items()
    )
    adaptive = results.get("adaptive", {})
    lines = [
        "# Adaptive vs. fixed triggers", "",
        f"Command: `{command}` ({os.cpu_count()} cores). Backlog {args.backlog:,} records over {PARTITIONS} partitions, "
        f"then {args.rate:,} records/s of live traffic for {args.live_seconds:.0f} s.", "",
        "| configuration | drain s | batches to drain | live latency p50 s | p99 s | live batches | live records |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |", rows, "",
    ]
    if "adaptive_drain_vs_best_fixed" in summary:
        lines.append(f"- adaptive drain / best fixed drain: **{summary['adaptive_drain_vs_best_fixed']:.2f}x** (target <= 1.1x)")
    if "adaptive_p99_vs_fixed_low_latency" in summary:
        lines.append(f"- adaptive p99 / fixed low-latency p99: **{summary['adaptive_p99_vs_fixed_low_latency']:.2f}x** (target <= 1.1x)")
    if adaptive.get("switch_cost_seconds") is not None:
        lines.append(f"- switch cost (last high-throughput batch committed -> first low-latency batch started): "
                     f"**{adaptive['switch_cost_seconds']:.2f} s** (target <= 2 s); controller restart "
                     + ', '.join(f"{t['restart_seconds']:.2f} s" for t in adaptive.get('transitions', [])))
    (RESULTS / "mode_switch.md").write_text("\n".join(lines) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(10, 2.6 * len(results)), sharex=True, squeeze=False)
    for ax, (name, r) in zip(axes[:, 0], results.items()):
        colors = ["tab:red" if b["mode"] in ("high-throughput", "fixed-high-throughput") else "tab:blue" for b in r["batches"]]
        ax.bar([b["start"] for b in r["batches"]], [b["records"] for b in r["batches"]],
               width=[max(0.2, b["end"] - b["start"]) for b in r["batches"]], align="edge", color=colors)
        ax.axvline(r["drain_seconds"], color="black", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_ylabel("records/batch")
        ax.set_title(f"{name}: drained {r['drain_seconds']:.1f} s, live p99 {fmt(r['latency_p99_s'])} s", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since query start (red: high-throughput batches, dashed: backlog drained)")
    fig.tight_layout()
    fig.savefig(RESULTS / "mode_switch.png", dpi=100)
    print((RESULTS / "mode_switch.md").read_text())


if __name__ == "__main__":
    main()
