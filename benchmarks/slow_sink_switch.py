"""What a slow sink does to a mode switch: in place against restart.

Issue #14 measured a ``foreachBatch`` that takes 8 s making each restart switch take 9-10 s
(the controller waits for the running batch, then stops it) and once abort and replay a
batch. In place there is nothing to wait for. This runs the same query both ways and
measures it.

Per run, on a fresh topic of 4 partitions: a ``--backlog`` record backlog (20k) read with
``backlog.maxOffsetsPerTrigger`` 10k (two batches), so the query starts in high-throughput
and switches to low-latency once drained; then a burst of ``--burst`` records (20k) past
``backlog.reenterLag`` (5k), so it switches back to high-throughput and, drained again, to
low-latency: three switches per run. A trickle of live records (20 per second) runs
throughout, so that every switch is decided while the next ``--sink-seconds`` (8 s) batch
is already running, as in a job that always has data: a batch that outlasts the interval
starts the next one at once.

The sink is a ``foreachBatch`` that counts its batch and sleeps ``--sink-seconds``.
Reported per method: each switch's own cost (``Transition.apply_seconds``: the field
written and read back, or the stop + start), decision -> first trigger under the new
interval (``Transition.effective_seconds``; in place it includes the batch already running,
which nothing interrupts), batches the sink was called for more than once (replayed after
an interrupted one), and whether its batches, each batch id counted once (what an idempotent
``foreachBatch`` writes), hold every record produced.

One warm-up query first; ``--runs`` rounds of both methods, the order alternating per
round; medians with the spread (min-max) over every switch, every run in the JSON.

Usage::

    .venv/bin/python -m benchmarks.slow_sink_switch [--runs 3] [--sink-seconds 8]

Writes ``benchmarks/results/slow_sink_switch/slow_sink_switch.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter

from backlog_source.demo.topics import create_topic, produce
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.runs import rotated, wait_until
from benchmarks.harness.stats import median_and_spread, with_spread

PARTITIONS = 4
METHODS = ("in-place", "restart")
DIRECTIONS = ("low-latency", "high-throughput")


class Trickle:
    """Live records in the background (a thread producing a few records twice a second),
    counting what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.produced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(bootstrap, topic), daemon=True)
        self._thread.start()

    def _run(self, bootstrap: str, topic: str) -> None:
        while not self._stop.wait(0.5):
            self.produced += produce(bootstrap, topic, ((i % PARTITIONS, None, b"l" * 100) for i in range(10)))

    def stop(self) -> int:
        """Stop producing; how many records were produced."""
        self._stop.set()
        self._thread.join(60)
        return self.produced


class CountingSlowSink:
    """A ``foreachBatch`` function: records every call's batch id and the batch's record
    count, then sleeps. Runs on the driver (classic PySpark calls it back over py4j)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.lock = threading.Lock()
        self.calls: list[int] = []  # batch ids, in call order (a replayed batch appears again)
        self.committed_records: dict[int, int] = {}  # batch id -> records, the last call's

    def __call__(self, batch_df, batch_id: int) -> None:
        with self.lock:
            self.calls.append(batch_id)
        records = batch_df.count()
        time.sleep(self.seconds)  # the slow sink under measurement
        with self.lock:
            self.committed_records[batch_id] = records

    def records(self) -> int:
        with self.lock:
            return sum(self.committed_records.values())


def run(spark, bootstrap: str, method: str, args) -> dict:
    """One query switched ``method``'s way three times (see the module docstring)."""
    from backlog_source import start_backlog_aware

    topic = f"bench-slow-sink-{method}-{time.time_ns()}"
    create_topic(bootstrap, topic, PARTITIONS)
    produced = produce(bootstrap, topic, ((i % PARTITIONS, None, b"b" * 100) for i in range(args.backlog)))
    sink = CountingSlowSink(args.sink_seconds)
    df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("backlog.maxOffsetsPerTrigger", str(args.backlog // 2))
          .option("maxOffsetsPerTrigger", "1000").option("backlog.reenterLag", str(args.burst // 4)).load())
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.time()
        handle = start_backlog_aware(df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint),
                                     "0 seconds", "1 second", switch_method=method)
        trickle = Trickle(bootstrap, topic)
        try:
            wait_until(lambda: len(handle.transitions) >= 1, 600, f"{method}: the switch to low-latency")
            produced += produce(bootstrap, topic, ((i % PARTITIONS, None, b"u" * 100) for i in range(args.burst)))
            wait_until(lambda: len(handle.transitions) >= 3, 600, f"{method}: the burst's two switches")
            wait_until(lambda: all(t.effective_seconds is not None for t in handle.transitions), 120,
                       f"{method}: the first trigger under each new interval")
            produced += trickle.stop()
            wait_until(lambda: sink.records() >= produced, 600, f"{method}: every record in the sink")
        finally:
            trickle.stop()
            handle.stop()
    replayed = sorted(batch for batch, calls in Counter(sink.calls).items() if calls > 1)
    result = {
        "seconds": time.time() - started,
        "switch_method": handle.switch_method,
        "switches": [{"to": t.to_mode, "method": t.method, "apply_s": t.apply_seconds,
                      "effective_s": t.effective_seconds} for t in handle.transitions],
        "sink_calls": len(sink.calls),
        "replayed_batches": replayed,
        "records_in_sink": sink.records(),
        "records_produced": produced,
    }
    print(f"{method}: switches {[(s['to'], round(s['apply_s'], 3), s['effective_s']) for s in result['switches']]}, "
          f"replayed {replayed}, records {result['records_in_sink']} of {result['records_produced']}", flush=True)
    return result


def summarise(runs: list[dict]) -> dict:
    switches = [s for r in runs for s in r["switches"]]
    return {
        "methods_used": sorted({s["method"] for s in switches}),
        **{f"to_{d}": {"count": sum(1 for s in switches if s["to"] == d),
                       "apply_s": median_and_spread([s["apply_s"] for s in switches if s["to"] == d]),
                       "effective_s": median_and_spread([s["effective_s"] for s in switches
                                                         if s["to"] == d and s["effective_s"] is not None])}
           for d in DIRECTIONS},
        "runs_with_replays": sum(1 for r in runs if r["replayed_batches"]),
        "replayed_batches": sum(len(r["replayed_batches"]) for r in runs),
        "runs_exactly_once": sum(1 for r in runs if r["records_in_sink"] == r["records_produced"]),
        "runs": len(runs),
    }


def report(results: dict[str, list[dict]], args) -> None:
    command = "python -m benchmarks.slow_sink_switch " + " ".join(sys.argv[1:])
    summaries = {method: summarise(runs) for method, runs in results.items()}
    lines = [
        "# A slow sink and the mode switch: in place vs. restart", "",
        f"Command: `{command}` ({machine()['cpus']} cores, Spark defaults). A `foreachBatch` that sleeps "
        f"{args.sink_seconds:g} s per batch; {args.backlog:,} records of backlog over {PARTITIONS} partitions, then a "
        f"burst of {args.burst:,}, and 20 live records/s throughout: three switches per run, each decided while the "
        f"next batch is already running. "
        f"{args.runs} runs per method after a warm-up; medians (min-max) over every switch.", "",
        "| method | to | switches | own cost s | decision -> first trigger under it s |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for method, s in summaries.items():
        for d in DIRECTIONS:
            figure = s[f"to_{d}"]
            lines.append(f"| {method} | {d} | {figure['count']} | {with_spread(figure['apply_s'], '.3f')} | "
                         f"{with_spread(figure['effective_s'], '.2f')} |")
    lines += ["", "| method | batches replayed (runs with any) | runs whose batches, each batch id counted once, hold every record produced |",
              "| --- | ---: | ---: |"]
    for method, s in summaries.items():
        lines.append(f"| {method} | {s['replayed_batches']} ({s['runs_with_replays']} of {s['runs']}) | "
                     f"{s['runs_exactly_once']} of {s['runs']} |")
    write_results("slow_sink_switch", args.results_name, {"command": command, "machine": machine(), "args": vars(args),
                                      "summaries": summaries, "results": results}, lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sink-seconds", type=float, default=8.0)
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--burst", type=int, default=20_000)
    parser.add_argument("--results-name", default="slow_sink_switch")
    args = parser.parse_args()
    with kafka_and_spark() as bench:
        results: dict[str, list[dict]] = {m: [] for m in METHODS}
        for round_index in range(args.runs):
            for method in rotated(list(METHODS), round_index):
                results[method].append(run(bench.spark, bench.bootstrap, method, args))
    report(results, args)


if __name__ == "__main__":
    main()
