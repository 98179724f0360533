"""Time to a caught-up query: from a snapshot plus the log's tail vs. replaying the topic.

One broker, one keyed topic of ``--updates`` updates over ``--keys`` keys, a snapshot taken
with ``backlog-source snapshot``'s code, then ``--tail`` more updates. Two queries, each
``Trigger.AvailableNow`` into ``noop``, timed from ``start()`` to termination (query start-up
included), alternated ``--repeats`` times on fresh checkpoints:

* ``replay``: ``startingOffsets=earliest``, the whole log;
* ``snapshot``: ``snapshot.path`` (the snapshot's rows, then the log from its offsets).

Usage::

    .venv/bin/python benchmarks/snapshot_bootstrap.py [--updates 5000000] [--keys 500000] [--tail 50000]

Writes ``benchmarks/results/snapshot_bootstrap.json`` and ``.md``. Target: >= 5x faster.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backlog_source.testing.broker import create_topic, produce, start_broker  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 8


def updates(seed: int, count: int, keys: int, value: bytes):
    rng = random.Random(seed)
    for _ in range(count):
        key = rng.randrange(keys)
        yield key % PARTITIONS, b"k%d" % key, value


def timed_query(spark, bootstrap: str, topic: str, **options: str) -> dict:
    with tempfile.TemporaryDirectory() as checkpoint:
        df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").options(**options).load())
        started = time.perf_counter()
        query = df.writeStream.format("noop").trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
        query.awaitTermination()
        seconds = time.perf_counter() - started
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        rows = sum(p.numInputRows for p in query.recentProgress)
    return {"seconds": seconds, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--tail", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource
    from backlog_source.snapshot import take_snapshot

    broker = start_broker()
    work = tempfile.mkdtemp(prefix="bench-snapshot-")
    try:
        bootstrap, topic, value = broker.bootstrap_servers, "bench-snapshot", b"v" * 100
        create_topic(bootstrap, topic, PARTITIONS)
        t0 = time.perf_counter()
        produce(bootstrap, topic, updates(1, args.updates, args.keys, value))
        print(f"produced {args.updates:,} updates in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        manifest = take_snapshot({"kafka.bootstrap.servers": bootstrap}, topic, f"{work}/snapshot")
        snapshot_seconds = time.perf_counter() - t0
        snapshot_rows = sum(p.rows for p in manifest.partitions.values())
        print(f"snapshot of {snapshot_rows:,} keys in {snapshot_seconds:.1f} s")
        produce(bootstrap, topic, updates(2, args.tail, args.keys, value))

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.driver.memory", "4g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(BacklogDataSource)
        timed_query(spark, bootstrap, topic, **{"snapshot.path": f"{work}/snapshot"})  # warm-up
        runs: dict[str, list[dict]] = {"replay": [], "snapshot": []}
        for _ in range(args.repeats):
            runs["replay"].append(timed_query(spark, bootstrap, topic))
            runs["snapshot"].append(timed_query(spark, bootstrap, topic, **{"snapshot.path": f"{work}/snapshot"}))
            print({name: f"{r[-1]['seconds']:.1f} s, {r[-1]['rows']:,} rows" for name, r in runs.items()})
        spark.stop()
    finally:
        broker.stop()

    best = {name: min(r["seconds"] for r in rs) for name, rs in runs.items()}
    speedup = best["replay"] / best["snapshot"]
    summary = {
        "command": "python benchmarks/snapshot_bootstrap.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "updates": args.updates, "keys": args.keys, "tail": args.tail, "partitions": PARTITIONS,
        "snapshot_rows": snapshot_rows, "snapshot_take_seconds": snapshot_seconds,
        "runs": runs, "best_seconds": best, "speedup": speedup,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "snapshot_bootstrap.json").write_text(json.dumps(summary, indent=2) + "\n")
    (RESULTS / "snapshot_bootstrap.md").write_text(f"""# Snapshot bootstrap

Command: `{summary['command']}` ({summary['machine']['cpus']} cores, Python {summary['machine']['python']})

{args.updates:,} updates over {args.keys:,} keys ({PARTITIONS} partitions), a snapshot of
{snapshot_rows:,} keys (taken in {snapshot_seconds:.1f} s, not counted below), then {args.tail:,}
more updates. Time from `start()` to a caught-up `Trigger.AvailableNow` query, best of
{args.repeats}:

| start | seconds | rows read |
| --- | ---: | ---: |
| replay from earliest | {best['replay']:.1f} | {runs['replay'][0]['rows']:,} |
| snapshot + tail | {best['snapshot']:.1f} | {runs['snapshot'][0]['rows']:,} |

Speed-up: **{speedup:.1f}x** (target >= 5x).
""")
    print(json.dumps({"speedup": speedup, "best_seconds": best}))


if __name__ == "__main__":
    main()
