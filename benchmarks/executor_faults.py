"""Executors that die and speculative tasks on a standalone cluster: how long until the query
commits again.

Issue 49, item 1. Per round, a fresh Spark standalone cluster on loopback (a master and two
one-core workers, the second on 127.0.0.2) running the installed wheel, Apache Kafka (one
node), and the scenario of ``tests/reliability/cluster_faults.py``: ``start_backlog_aware``
into Parquet drains ``--partitions`` x ``--per-partition`` records of 20 B at
``--per-batch`` records a batch (a task a partition) with ``--live-rate`` live records/s
arriving and ``spark.speculation`` on, while (a) the second worker's executor JVM is SIGKILLed
while its read task of a backlog batch runs (held by the job until the kill; no speculative
copy is waited for, so Spark runs the task again) and (b) the first executor's forked Python
workers are SIGKILLed while one of them runs a read task of a later batch; the query is never
touched.

Figures per round: kill -> the next committed batch, for each fault; kill (a) -> the
replacement executor registered; speculative task attempts launched and won (the copy
finished first); failed task attempts; and the checks the test makes: every record exactly
once, one backlog finish per partition, one switch to low latency. Medians with the spread
(min-max) over ``--rounds``; every round in the JSON.

Usage::

    .venv/bin/python -m benchmarks.executor_faults [--rounds 3] [--partitions 8] [--per-partition 20000]
        [--per-batch 32000] [--live-rate 200]

Writes ``benchmarks/results/executor_faults/executor_faults.{json,md,png}`` (the picture: each
round's seconds from each kill to the next committed batch, and to the replacement executor).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyspark

from backlog_source.demo.apache_kafka import kafka, kafka_version
from benchmarks.harness.results import machine, results_folder, write_results
from benchmarks.harness.stats import median_and_spread, with_spread

FIGURES = ("jvm_kill_to_commit_s", "workers_kill_to_commit_s", "replacement_executor_s", "speculative_launched",
           "speculative_won", "failed_attempts", "run_s")


def round_figures(broker, python: Path, args) -> dict:
    """One round on a fresh cluster and topic: the figures of the module docstring. Raises
    RuntimeError when the job failed or a check did not hold."""
    import pyarrow.parquet as pq

    from tests.integration.helpers import committed_parquet_files, log_end_offsets
    from tests.reliability.cluster_faults import run_executor_faults, standalone_cluster
    from tests.reliability.test_crashes import checkpointed_offsets

    topic = f"bench-executor-faults-{time.time_ns()}"
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        with standalone_cluster(out, python) as master:
            # The JVM is killed as soon as its read task is held: Spark runs the task again, as
            # it must when no speculative copy happens to be running (the test covers the copy).
            run = run_executor_faults(broker, topic, out, python, master, partitions=args.partitions,
                                      per_partition=args.per_partition, per_batch=args.per_batch,
                                      live_rate=args.live_rate, copy_before_jvm_kill=False)
        if run.returncode != 0:
            raise RuntimeError(f"the job exited with {run.returncode}: {run.stderr[-3000:]}")
        table = pq.ParquetDataset(committed_parquet_files(out / "parquet")).read(columns=["partition", "offset"])
        pairs = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
        counts = checkpointed_offsets(out / "checkpoint")[-1]["backlog"]["event_counts"]
    expected = sum(log_end_offsets(broker, topic).values())
    [done] = [e for e in run.log if e["what"] == "caught up and stopped"]
    switches = [(t["from_mode"], t["to_mode"]) for t in done["transitions"]]
    finishes = counts["handled"] + counts["finished_by_position"]
    if len(pairs) != expected or len(set(pairs)) != expected or finishes != args.partitions or switches != [
            ("high-throughput", "low-latency")]:
        raise RuntimeError(f"a check failed: {len(pairs)} rows, {len(set(pairs))} distinct, {expected} records; "
                           f"finishes {counts}; switches {switches}")
    jvm, workers = run.kills
    attempts = run.events.attempts
    speculative = [a for a in attempts if a["speculative"]]
    replaced = [at for at in run.events.executors_added.values() if at > jvm.at]
    return {"jvm_kill_to_commit_s": jvm.next_commit_s, "workers_kill_to_commit_s": workers.next_commit_s,
            "replacement_executor_s": min(replaced) - jvm.at if replaced else None,
            "speculative_launched": len(speculative),
            "speculative_won": sum(a["end"] == "Success" for a in speculative),
            "failed_attempts": sum(a["end"] not in ("Success", "TaskKilled") for a in attempts),
            "run_s": run.seconds, "records": expected, "duplicate_finish_events": counts["duplicate"],
            "kills": [k.__dict__ for k in run.kills],
            "attempt_ends": {end: sum(a["end"] == end for a in attempts) for end in {a["end"] for a in attempts}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--per-partition", type=int, default=20_000)
    parser.add_argument("--per-batch", type=int, default=32_000)
    parser.add_argument("--live-rate", type=int, default=200)
    args = parser.parse_args()
    from tests.wheel.wheel_env import ensure_installed

    python = ensure_installed()
    rounds = []
    with kafka() as broker:
        for number in range(args.rounds):
            rounds.append(round_figures(broker, python, args))
            print(f"round {number + 1}: {rounds[-1]}", flush=True)
    summary = {f: median_and_spread([r[f] for r in rounds if r[f] is not None]) for f in FIGURES}
    command = "python -m benchmarks.executor_faults " + " ".join(sys.argv[1:])
    rows = [("(a) executor JVM SIGKILLed mid-drain -> next batch committed, s", "jvm_kill_to_commit_s", ".1f"),
            ("(b) Python workers SIGKILLed mid-batch -> next batch committed, s", "workers_kill_to_commit_s", ".1f"),
            ("(a) -> the replacement executor registered, s", "replacement_executor_s", ".1f"),
            ("(c) speculative task attempts launched", "speculative_launched", ".0f"),
            ("(c) speculative attempts that finished first", "speculative_won", ".0f"),
            ("failed task attempts (both kills)", "failed_attempts", ".0f"),
            ("the job: start -> caught up and stopped, s", "run_s", ".0f")]
    lines = ["# Executors that die and speculative tasks on a standalone cluster", "",
             f"Command: `{command}` ({machine()['cpus']} cores; Spark {pyspark.__version__} standalone, a master "
             f"and two one-core workers (127.0.0.1, 127.0.0.2); Apache Kafka {kafka_version()}). "
             f"{args.partitions} partitions x {args.per_partition:,} records of 20 B, {args.per_batch:,} a batch, "
             f"{args.live_rate} live records/s, `start_backlog_aware` into Parquet, `spark.speculation` on. "
             f"Every round: every record exactly once, one backlog finish per partition, one switch to low latency. "
             f"Median (min-max) of {len(rounds)} rounds.", "",
             "| figure | value |", "| --- | ---: |"]
    lines += [f"| {label} | {with_spread(summary[key], spec)} |" for label, key, spec in rows]
    write_results("executor_faults", "executor_faults", {"command": command, "machine": machine(),
                                                         "kafka": kafka_version(), "spark": pyspark.__version__,
                                                         "args": vars(args), "summary": summary, "rounds": rounds},
                  lines)
    save_picture(rounds, summary, command)


#: The picture's rows: (label, the round's figure).
PICTURE_ROWS = (("(a) executor JVM killed\n-> next batch committed", "jvm_kill_to_commit_s"),
                ("(a) executor JVM killed\n-> replacement registered", "replacement_executor_s"),
                ("(b) Python workers killed\n-> next batch committed", "workers_kill_to_commit_s"))


def save_picture(rounds: list[dict], summary: dict, command: str) -> None:
    """``executor_faults.png``: every round's seconds for each row of :data:`PICTURE_ROWS` as
    a dot, the median of ``summary`` (the Markdown's) as a bar, so the spread is visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3))
    for row, (label, key) in enumerate(PICTURE_ROWS):
        values = [r[key] for r in rounds if r[key] is not None]
        if values:
            ax.barh(row, summary[key]["median"], color="tab:blue", alpha=0.35)
            ax.scatter(values, [row] * len(values), color="tab:blue", zorder=3)
    ax.set_yticks(range(len(PICTURE_ROWS)), [label for label, _ in PICTURE_ROWS], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"seconds (dots: each of {len(rounds)} rounds; bar: median)", fontsize=8)
    ax.set_title(command, fontsize=8)
    fig.tight_layout()
    fig.savefig(results_folder("executor_faults") / "executor_faults.png", dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
