"""A soak: a backlog-aware job on a three-broker cluster for half an hour while brokers die,
to show that nothing is lost or read twice and that nothing grows.

Setup: Apache Kafka, three brokers (replication 3, ``min.insync.replicas=2``), a topic of
``--partitions`` partitions written at ``--rate`` records/s by an idempotent producer
(``acks=all``) in its own process; the driver program ``benchmarks/harness/soak_job.py``
(``start_backlog_aware`` into Parquet, Spark's defaults, local[2]) in its own process group.
Every ``--broker-every`` seconds one broker (in turn) is killed with SIGKILL and restarted
``--broker-down`` seconds later, so leaders move; at half time the whole driver (its Python,
JVM and Python workers) is killed with SIGKILL and started again on its checkpoint.

Checked and reported:

* every acknowledged record exactly once in the Parquet output (read through the sink's
  commit log, independently of Spark), and no (partition, offset) twice;
* every ``--sample-every`` seconds, per job process: resident memory of the driver JVM, of
  the driver's Python and of each Python worker, open file descriptors and threads (from
  /proc), and the bytes the job logged; "flat" = the median of the run's last two minutes
  is within 10 % of the median of the two minutes after its first five (per driver run);
  the driver JVM's heap too (``jstat -gc``: used, committed, old generation), which tells a
  heap growing to its working size from live data growing;
* end-to-end latency p50/p99 per 5-minute window (a record's broker append time to the
  commit of the batch that read it).

Usage::

    .venv/bin/python -m benchmarks.soak [--minutes 30]     # or: make soak [SOAK_ARGS="--minutes 60"]

Writes ``benchmarks/results/soak/soak.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from backlog_source.demo.apache_kafka import kafka
from benchmarks.harness.broker_and_spark import compile_project_bytecode
from benchmarks.harness.costs import descendants
from benchmarks.harness.job_process import JobProcess
from benchmarks.harness.progress import offset_of
from benchmarks.harness.record_latency import timed_latencies, windows
from benchmarks.harness.results import machine, results_folder, write_results
from benchmarks.harness.stats import fmt
from benchmarks.harness.traffic import LIVE_TOPIC_CONFIG
from tests.integration.helpers import written_pairs

CLUSTER_SETTINGS = {"default.replication.factor": "3", "min.insync.replicas": "2",
                    "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3"}
FLAT_TOLERANCE = 0.10
WARM_UP_S = 300.0
WINDOW_S = 300.0
#: The driver JVM's heap (``jstat``), judged beside its RSS: see :func:`jvm_heap`.
JVM_HEAP_METRICS = ("heap_used_mib", "heap_committed_mib", "old_used_mib")


# ------------------------------------------------------------------ the producer (own process)

def produce(bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, out) -> None:
    """``rate`` records/s for ``seconds``, idempotent, ``acks=all``; sends back
    ``(acknowledged [(partition, offset, append ms)], failures)``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "message.timeout.ms": 600_000, "client.id": "soak-producer"})
    delivered: list[tuple[int, int, int]] = []
    failures: list[str] = []

    def on_delivery(error, message) -> None:
        if error is None:
            delivered.append((message.partition(), message.offset(), message.timestamp()[1]))
        else:
            failures.append(str(error))

    started, sent = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        due = int((time.perf_counter() - started) * rate)
        while sent < due:
            producer.produce(topic, key=str(sent).encode(), value=b"s" * 100, partition=sent % partitions,
                             on_delivery=on_delivery)
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(600)
    out.put((delivered, failures[:20], len(failures)))


# ------------------------------------------------------------------ the job (own process group)

class Job(JobProcess):
    """``benchmarks/harness/soak_job.py`` as a :class:`JobProcess` (``kill()`` is a SIGKILL to
    its whole process group); ``runs`` counts its starts, every run's output goes to
    ``job.log``."""

    def __init__(self, bootstrap: str, topic: str, work: Path) -> None:
        super().__init__("benchmarks.harness.soak_job", [bootstrap, topic, str(work)], work / "job.log")
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        super().start()

    def log_bytes(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0


def _process(pid: int) -> dict | None:
    try:
        command = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    if "VmRSS" not in fields:  # a zombie (exited, not yet reaped): nothing resident
        return None
    kind = "driver JVM" if "java" in command.split(" ")[0] else (
        "driver Python" if "benchmarks.harness.soak_job" in command else "Python worker")
    found = {"pid": pid, "kind": kind, "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
             "threads": int(fields["Threads"]), "fds": fds}
    if kind == "driver JVM":
        found.update(jvm_heap(pid))
    return found


def jvm_heap(pid: int) -> dict:
    """The JVM's heap, from ``jstat -gc`` (KiB columns): what its resident memory holds.
    RSS only grows when G1 commits more heap and rarely gives it back, so a step in RSS is
    either the heap growing to its working size or live data growing: ``heap_used_mib`` (a
    sawtooth: the median over minutes is its level) and ``old_used_mib`` (what survived
    young collections) tell which. Empty when ``jstat`` is missing or the JVM is gone."""
    try:
        lines = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=20).stdout.split("\n")
        columns = dict(zip(lines[0].split(), (float(v) for v in lines[1].split())))
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return {}
    try:
        return {"heap_used_mib": (columns["S0U"] + columns["S1U"] + columns["EU"] + columns["OU"]) / 1024,
                "heap_committed_mib": (columns["S0C"] + columns["S1C"] + columns["EC"] + columns["OC"]) / 1024,
                "old_used_mib": columns["OU"] / 1024}
    except KeyError:
        return {}


def sample(job: Job, since: float) -> dict:
    """Every process of the job's tree, and the bytes logged so far."""
    found = [info for pid in (job.process.pid, *descendants(job.process.pid)) if (info := _process(pid)) is not None]
    return {"at_s": round(time.time() - since, 1), "run": job.runs, "processes": found, "log_bytes": job.log_bytes()}


# ------------------------------------------------------------------ the run

def log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                                 request_timeout=30)
    return {tp.partition: f.result(timeout=60).offset for tp, f in futures.items()}


def read_progress(work: Path) -> list[dict]:
    path = work / "progress.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def caught_up(work: Path, topic: str, ends: dict[int, int]) -> bool:
    progress = read_progress(work)
    if not progress:
        return False
    end = offset_of(progress[-1]["sources"][0]["endOffset"])
    positions = end.get("positions", {}).get(topic, {})
    return all(positions.get(str(p), -1) >= o for p, o in ends.items())


def run(args) -> dict:
    compile_project_bytecode()
    seconds = args.minutes * 60
    topic = "soak"
    with kafka(nodes=3, settings=CLUSTER_SETTINGS) as cluster, tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        work = Path(tmp)
        bootstrap = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: a collected client cancels its futures
        admin.create_topics([NewTopic(topic, args.partitions, replication_factor=3,
                                      config={**LIVE_TOPIC_CONFIG, "min.insync.replicas": "2"})])[topic].result(60)
        out = mp.Queue()
        producer = mp.Process(target=produce, args=(bootstrap, topic, args.partitions, args.rate, seconds, out),
                              daemon=True)
        job = Job(bootstrap, topic, work)
        started = time.time()
        producer.start()
        job.start()
        events: list[dict] = []
        samples: list[dict] = []
        next_sample = next_kill = 0.0
        next_kill = args.broker_every
        restart_due: tuple[float, int] | None = None
        driver_killed = False
        victim = 0
        while (elapsed := time.time() - started) < seconds:
            if job.process.poll() is not None:
                raise RuntimeError(f"the job exited on its own ({job.process.returncode}); see {work}/job.log")
            if elapsed >= next_sample:
                samples.append(sample(job, started))
                next_sample += args.sample_every
            if elapsed >= next_kill and restart_due is None:
                victim = victim % 3 + 1
                cluster.node_of(victim).kill()
                events.append({"at_s": round(elapsed, 1), "what": f"broker {victim} killed (SIGKILL)"})
                restart_due = (elapsed + args.broker_down, victim)
                next_kill += args.broker_every
            if restart_due is not None and elapsed >= restart_due[0]:
                cluster.node_of(restart_due[1]).start()
                events.append({"at_s": round(elapsed, 1), "what": f"broker {restart_due[1]} restarted"})
                restart_due = None
            if not driver_killed and elapsed >= seconds / 2:
                job.kill()
                events.append({"at_s": round(elapsed, 1), "what": "driver killed (SIGKILL to its process group)"})
                job.start()
                events.append({"at_s": round(time.time() - started, 1), "what": "driver restarted on its checkpoint"})
                driver_killed = True
            time.sleep(0.5)
        if restart_due is not None:
            cluster.node_of(restart_due[1]).start()
            events.append({"at_s": round(time.time() - started, 1), "what": f"broker {restart_due[1]} restarted"})
        delivered, failure_samples, failures = out.get(timeout=900)
        producer.join(60)
        ends = log_ends(bootstrap, topic, args.partitions)
        deadline = time.time() + 600
        while not caught_up(work, topic, ends):
            if time.time() > deadline or job.process.poll() is not None:
                raise RuntimeError(f"the job did not catch up with {ends}; see {work}/job.log")
            time.sleep(1)
        (work / "stop").touch()
        job.process.wait(300)
        written = written_pairs(work / "parquet")
        progress = read_progress(work)
        timed = timed_latencies(topic, progress, delivered)
        return summarize(args, delivered, failures, failure_samples, written, samples, events, timed,
                         job, (work / "stopped").exists())


def summarize(args, delivered, failures, failure_samples, written, samples, events, timed, job, stopped) -> dict:
    acknowledged = {(p, o) for p, o, _ in delivered}
    written_set = set(written)
    growth = {kind: {metric: flatness(samples, kind, metric) for metric in ("rss_mib", "fds", "threads")}
              for kind in ("driver JVM", "driver Python", "Python worker")}
    growth["driver JVM"].update({metric: flatness(samples, "driver JVM", metric) for metric in JVM_HEAP_METRICS})
    per_minute = log_rate(samples)
    return {
        "command": f".venv/bin/python -m benchmarks.soak --minutes {args.minutes} --rate {args.rate:g} "
                   f"--partitions {args.partitions} --broker-every {args.broker_every:g} --broker-down "
                   f"{args.broker_down:g}",
        "machine": machine(),
        "acknowledged": len(acknowledged),
        "producer_failures": failures,
        "producer_failure_samples": failure_samples,
        "written_rows": len(written),
        "duplicates": len(written) - len(written_set),
        "acknowledged_missing": len(acknowledged - written_set),
        "exactly_once": not (acknowledged - written_set) and len(written) == len(written_set),
        "job_stopped_cleanly": stopped,
        "driver_runs": job.runs,
        "events": events,
        "flatness": growth,
        "log_bytes_per_minute": per_minute,
        "latency_windows": windows(timed, WINDOW_S),
        "samples": samples,
    }


def _values(samples: list[dict], kind: str, metric: str) -> list[tuple[float, int, float]]:
    """``(at_s, run, value)``: the largest process of ``kind`` (workers: each is judged by the largest)."""
    found = []
    for s in samples:
        values = [p[metric] for p in s["processes"] if p["kind"] == kind and metric in p]
        if values:
            found.append((s["at_s"], s["run"], float(max(values))))
    return found


def flatness(samples: list[dict], kind: str, metric: str) -> dict:
    """Per driver run: median of the 2 minutes after its first 5 against the median of its
    last 2 minutes; ``flat`` when the growth is under 10 %."""
    runs: dict[int, list[tuple[float, float]]] = {}
    for at, run_number, value in _values(samples, kind, metric):
        runs.setdefault(run_number, []).append((at, value))
    result = {}
    for run_number, points in sorted(runs.items()):
        start = points[0][0]
        early = [v for at, v in points if WARM_UP_S <= at - start < WARM_UP_S + 120]
        late = [v for at, v in points if at >= points[-1][0] - 120]
        if not early or points[-1][0] - start < WARM_UP_S + 240:
            result[str(run_number)] = {"judged": False, "why": "run shorter than 5 + 4 minutes"}
            continue
        before, after = statistics.median(early), statistics.median(late)
        growth = (after - before) / before if before else 0.0
        result[str(run_number)] = {"judged": True, "after_5_min": before, "last_2_min": after,
                                   "growth": round(growth, 3), "flat": growth < FLAT_TOLERANCE}
    return result


def log_rate(samples: list[dict]) -> list[dict]:
    """Bytes the job logged per minute."""
    by_minute: dict[int, list[int]] = {}
    for s in samples:
        by_minute.setdefault(int(s["at_s"] // 60), []).append(s["log_bytes"])
    minutes = sorted(by_minute)
    return [{"minute": m, "bytes": max(by_minute[m]) - (max(by_minute[minutes[i - 1]]) if i else 0)}
            for i, m in enumerate(minutes)]


def markdown(summary: dict) -> list[str]:
    lines = ["# Soak: three brokers, one killed every few minutes, the driver killed once", "",
             f"Command: `{summary['command']}`", "",
             f"- acknowledged records: {summary['acknowledged']:,}; rows written: {summary['written_rows']:,}; "
             f"duplicates: {summary['duplicates']}; acknowledged but missing: {summary['acknowledged_missing']}; "
             f"**exactly once: {'yes' if summary['exactly_once'] else 'NO'}** "
             f"(producer failures: {summary['producer_failures']})",
             f"- driver runs: {summary['driver_runs']}; stopped cleanly at the end: {summary['job_stopped_cleanly']}",
             "", "Events:", ""]
    lines += [f"- {e['at_s']:.0f} s: {e['what']}" for e in summary["events"]]
    lines += ["", "Growth per driver run (the largest process of each kind; median of the 2 minutes after the "
              "first 5 against the median of the last 2; flat < 10 %):", "",
              "| process | metric | run | after 5 min | last 2 min | growth | flat |", "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for kind, metrics in summary["flatness"].items():
        for metric, runs in metrics.items():
            for run_number, figure in runs.items():
                if figure.get("judged"):
                    lines.append(f"| {kind} | {metric} | {run_number} | {fmt(figure['after_5_min'], '.1f')} | "
                                 f"{fmt(figure['last_2_min'], '.1f')} | {figure['growth'] * 100:+.1f} % | "
                                 f"{'yes' if figure['flat'] else '**no**'} |")
                else:
                    lines.append(f"| {kind} | {metric} | {run_number} | - | - | - | not judged ({figure['why']}) |")
    lines += ["", "Log volume per minute (bytes): " + ", ".join(str(m["bytes"]) for m in summary["log_bytes_per_minute"]),
              "", "End-to-end latency per 5-minute window (seconds):", "", "| from | records | p50 | p99 |",
              "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {w['from_s'] / 60:.0f} min | {w['count']:,} | {fmt(w['p50'])} | {fmt(w['p99'])} |"
              for w in summary["latency_windows"]]
    return lines


def picture(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(5, 1, figsize=(11, 12), sharex=True)
    for ax, metric, label in zip(axes[:3], ("rss_mib", "fds", "threads"), ("resident MiB", "open fds", "threads")):
        for kind, color in (("driver JVM", "tab:blue"), ("driver Python", "tab:green"), ("Python worker", "tab:orange")):
            points = _values(summary["samples"], kind, metric)
            ax.plot([p[0] / 60 for p in points], [p[2] for p in points], ".", markersize=3, color=color, label=kind)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    for metric, color in zip(JVM_HEAP_METRICS, ("tab:blue", "tab:gray", "tab:red")):
        points = _values(summary["samples"], "driver JVM", metric)
        axes[3].plot([p[0] / 60 for p in points], [p[2] for p in points], ".", markersize=3, color=color,
                     label=metric.removesuffix("_mib").replace("_", " "))
    axes[3].set_ylabel("driver JVM heap MiB")
    axes[3].legend(fontsize=8)
    latency = summary["latency_windows"]
    axes[4].step([w["from_s"] / 60 for w in latency], [w["p99"] for w in latency], where="post", label="p99")
    axes[4].step([w["from_s"] / 60 for w in latency], [w["p50"] for w in latency], where="post", label="p50")
    axes[4].set_ylabel("latency (s), per 5 min")
    axes[4].legend(fontsize=8)
    for ax in axes:
        for event in summary["events"]:
            style = "-" if "driver" in event["what"] else ":"
            ax.axvline(event["at_s"] / 60, color="gray", linestyle=style, linewidth=0.8)
    axes[-1].set_xlabel("minutes (dotted: a broker killed or restarted; solid: the driver killed and restarted)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=float, default=1000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--broker-every", type=float, default=300, help="seconds between broker kills")
    parser.add_argument("--broker-down", type=float, default=20, help="seconds a killed broker stays down")
    parser.add_argument("--sample-every", type=float, default=10)
    parser.add_argument("--results-name", default="soak")
    args = parser.parse_args()
    summary = run(args)
    write_results("soak", args.results_name, summary, markdown(summary))
    picture(summary, results_folder("soak") / f"{args.results_name}.png")
    if not summary["exactly_once"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
