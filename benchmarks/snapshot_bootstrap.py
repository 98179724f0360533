"""Time to a caught-up query: from a snapshot plus the log's tail vs. replaying the topic.

One broker, one keyed topic of ``--updates`` updates over ``--keys`` keys, a snapshot taken
with ``backlog-source snapshot``'s code, then ``--tail`` more updates. Two queries, each
``Trigger.AvailableNow`` into ``noop``, timed from ``start()`` to termination (query start-up
included), Spark's default settings, one warm-up query, then ``--repeats`` interleaved rounds
on fresh checkpoints, reported as median and spread (min-max):

* ``replay``: ``startingOffsets=earliest``, the whole log;
* ``snapshot``: ``snapshot.path`` (the snapshot's rows, then the log from its offsets).

Usage::

    .venv/bin/python -m benchmarks.snapshot_bootstrap [--updates 5000000] [--keys 500000] [--tail 50000] [--repeats 3]

Writes ``benchmarks/results/snapshot_bootstrap/snapshot_bootstrap.json`` and ``.md``. Target: >= 5x faster.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time

from backlog_source.demo.topics import create_topic, produce
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.runs import backlog_stream, run_available_now
from benchmarks.harness.stats import median_and_spread, with_spread

PARTITIONS = 8


def updates(seed: int, count: int, keys: int, value: bytes):
    rng = random.Random(seed)
    for _ in range(count):
        key = rng.randrange(keys)
        yield key % PARTITIONS, b"k%d" % key, value


def timed_query(spark, bootstrap: str, topic: str, **options: str) -> dict:
    _, seconds, query = run_available_now(backlog_stream(spark, bootstrap, topic, **options))
    rows = sum(p.numInputRows for p in query.recentProgress)
    # Where the time went, per batch: Spark's own breakdown (the rest of `seconds` is
    # query start-up before the first trigger).
    batches = [{"rows": p.numInputRows, **{k: v for k, v in p.durationMs.items()}} for p in query.recentProgress]
    return {"seconds": seconds, "rows": rows, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--tail", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from backlog_source.snapshot import take_snapshot

    work = tempfile.mkdtemp(prefix="bench-snapshot-")
    with kafka_and_spark(warm_up_query=False) as bench:
        spark, bootstrap, topic, value = bench.spark, bench.bootstrap, "bench-snapshot", b"v" * 100
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

        timed_query(spark, bootstrap, topic, **{"snapshot.path": f"{work}/snapshot"})  # warm-up
        runs: dict[str, list[dict]] = {"replay": [], "snapshot": []}
        for _ in range(args.repeats):
            runs["replay"].append(timed_query(spark, bootstrap, topic))
            runs["snapshot"].append(timed_query(spark, bootstrap, topic, **{"snapshot.path": f"{work}/snapshot"}))
            print({name: f"{r[-1]['seconds']:.1f} s, {r[-1]['rows']:,} rows" for name, r in runs.items()})

    seconds = {name: median_and_spread([r["seconds"] for r in rs]) for name, rs in runs.items()}
    per_round = [replay["seconds"] / snap["seconds"] for replay, snap in zip(runs["replay"], runs["snapshot"])]
    speedup = seconds["replay"]["median"] / seconds["snapshot"]["median"]
    command = "python -m benchmarks.snapshot_bootstrap " + " ".join(sys.argv[1:])
    summary = {
        "command": command, "machine": machine(),
        "updates": args.updates, "keys": args.keys, "tail": args.tail, "partitions": PARTITIONS,
        "snapshot_rows": snapshot_rows, "snapshot_take_seconds": snapshot_seconds,
        "runs": runs, "seconds": seconds, "speedup_of_medians": speedup, "speedup_per_round": per_round,
    }

    write_results("snapshot_bootstrap", "snapshot_bootstrap", summary, [
        "# Snapshot bootstrap", "",
        f"Command: `{command}` ({summary['machine']['cpus']} cores, Python {summary['machine']['python']}, "
        "Spark's default settings)", "",
        f"{args.updates:,} updates over {args.keys:,} keys ({PARTITIONS} partitions), a snapshot of "
        f"{snapshot_rows:,} keys (taken in {snapshot_seconds:.1f} s, not counted below), then {args.tail:,} "
        "more updates. Time from `start()` to a caught-up `Trigger.AvailableNow` query (query start-up "
        f"included), after one warm-up query; median (min-max) of {args.repeats} interleaved rounds:", "",
        "| start | seconds | rows read |", "| --- | ---: | ---: |",
        f"| replay from earliest | {with_spread(seconds['replay'], '.1f')} | {runs['replay'][0]['rows']:,} |",
        f"| snapshot + tail | {with_spread(seconds['snapshot'], '.1f')} | {runs['snapshot'][0]['rows']:,} |", "",
        f"Speed-up (ratio of medians): **{speedup:.1f}x** (per round: "
        + ", ".join(f"{r:.1f}x" for r in per_round) + "; target >= 5x).",
    ])


if __name__ == "__main__":
    main()
