"""Whose cost a run is: peak memory of the JVM and its Python processes, CPU seconds per kind
of process, Spark's task metrics, and py-spy profiles of Spark's Python workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

# ------------------------------------------------------------------ memory


class MemorySampler:
    """Peak JVM heap in use and peak resident memory of the JVM's Python child processes,
    sampled every ``interval_s`` from a thread while a run lasts: all of them together
    (``python_peak_mib``), and the largest single one (``largest_worker_mib``) with how much
    any one grew over its size when the run began (``largest_worker_growth_mib``)."""

    def __init__(self, spark, interval_s: float = 0.5) -> None:
        jvm = spark.sparkContext._jvm
        self._memory = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
        self._jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.heap_peak_mib = 0.0
        self.python_peak_mib = 0.0
        self.largest_worker_mib = 0.0
        self.largest_worker_growth_mib = 0.0
        self._python_start = descendants_rss_mib(self._jvm_pid)
        #: The Python processes' memory when the run started (idle workers of earlier queries stay).
        self.python_start_mib = sum(self._python_start.values())
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                heap = self._memory.getHeapMemoryUsage().getUsed() / 2**20
                self.heap_peak_mib = max(self.heap_peak_mib, heap)
            except Exception:  # the gateway is busy shutting down; a sample less
                pass
            now = descendants_rss_mib(self._jvm_pid)
            self.python_peak_mib = max(self.python_peak_mib, sum(now.values()))
            if now:
                self.largest_worker_mib = max(self.largest_worker_mib, max(now.values()))
                self.largest_worker_growth_mib = max(self.largest_worker_growth_mib, max(
                    rss - self._python_start.get(pid, 0.0) for pid, rss in now.items()))
            self._stop.wait(self._interval_s)


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (parent := _parent_of(int(entry))) is not None:
            children.setdefault(parent, []).append(int(entry))
    return children


def descendants(root: int) -> list[int]:
    """The pids of every process below ``root``."""
    children, found = children_by_parent(), []
    pending = list(children.get(root, []))
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def descendants_rss_mib(root: int) -> dict[int, float]:
    """Resident memory (MiB) of each process below ``root`` (its Python workers), from /proc;
    a process that ended meanwhile is left out."""
    found = {}
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/status") as status:
                rss = next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), None)
        except OSError:
            continue
        if rss is not None:
            found[pid] = rss / 1024
    return found


# ------------------------------------------------------------------ CPU per process, Spark's task metrics

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_kind(command: str) -> str:
    """What a process on this machine is to a benchmark, from its command line."""
    if "kafka.Kafka" in command:
        return "broker"
    if "org.apache.spark" in command:
        return "spark_jvm"
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        return "python_workers"
    if "pyspark" in command:
        return "python_driver_side"  # the streaming source's runner, load()'s worker, planners
    return "other"


#: Whose the CPU of an ended child is, by its parent's kind: Spark's JVM waits for the
#: driver-side Python processes it starts (a streaming source's runner lives as long as its
#: query), a worker daemon for its forked workers, this process for its bare loops.
_ENDED_CHILD_KIND = {"spark_jvm": "python_driver_side", "python_workers": "python_workers", "benchmark": "bare_loops"}
_KTHREADD = 2


def cpu_seconds_by_process() -> dict[int, tuple[float, float, str]]:
    """``pid -> (own CPU seconds, CPU seconds of its ended children, kind)`` of every process
    now, from /proc (user + system; the children's part grows when a child is reaped). A
    process that has exited but is not reaped yet (a zombie: no command line) is its
    parent's ended child; kernel threads (children of kthreadd) are ``kernel``."""
    stats: dict[int, tuple[list[str], str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline") as cmdline:
                command = cmdline.read().replace("\0", " ").strip()
        except OSError:
            continue  # ended meanwhile
        stats[int(entry)] = (fields, command)
    kinds = {pid: "benchmark" if pid == os.getpid() else process_kind(command) for pid, (_, command) in stats.items()}
    found = {}
    for pid, (fields, _) in stats.items():
        state, parent = fields[0], int(fields[1])
        kind = kinds[pid]
        if state == "Z":
            kind = _ENDED_CHILD_KIND.get(kinds.get(parent, "other"), "other")
        elif parent == _KTHREADD or pid == _KTHREADD:
            kind = "kernel"
        found[pid] = ((int(fields[11]) + int(fields[12])) / _CLOCK_TICKS,
                      (int(fields[13]) + int(fields[14])) / _CLOCK_TICKS, kind)
    return found


class CpuAccount:
    """CPU seconds each kind of process used between ``__enter__`` and ``__exit__``: who paid
    for a run (the broker, Spark's JVM, the Python workers, the kernel, bare loops). A process
    that starts and ends inside the window is counted through its parent once reaped."""

    def __enter__(self) -> "CpuAccount":
        self._before = cpu_seconds_by_process()
        self.seconds: dict[str, float] = {}
        return self

    def __exit__(self, *exc) -> None:
        for pid, (own, children, kind) in cpu_seconds_by_process().items():
            own_before, children_before, _ = self._before.get(pid, (0.0, 0.0, kind))
            self._add(kind, own - own_before)
            self._add(_ENDED_CHILD_KIND.get(kind, kind), children - children_before)

    def _add(self, kind: str, seconds: float) -> None:
        if seconds > 0:
            self.seconds[kind] = round(self.seconds.get(kind, 0.0) + seconds, 2)


def stage_ids(spark) -> set[int]:
    """The ids of the stages Spark's status REST API knows now."""
    return {s["stageId"] for s in _stages(spark)}


def task_metrics_since(spark, known: set[int]) -> dict[str, float]:
    """Spark's task metrics summed over the stages completed since ``known`` (from
    :func:`stage_ids`): tasks, run time and the JVM threads' CPU time (seconds), JVM GC."""
    stages = [s for s in _stages(spark) if s["stageId"] not in known and s["status"] == "COMPLETE"]
    return {"tasks": sum(s["numTasks"] for s in stages),
            "task_run_s": sum(s["executorRunTime"] for s in stages) / 1000,
            "task_jvm_cpu_s": sum(s["executorCpuTime"] for s in stages) / 1e9,
            "jvm_gc_s": sum(s["jvmGcTime"] for s in stages) / 1000}


def _stages(spark) -> list[dict]:
    import urllib.request

    context = spark.sparkContext
    with urllib.request.urlopen(f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/stages") as answer:
        return json.load(answer)


# ------------------------------------------------------------------ py-spy profiles of the Python workers


def profile_python_workers(seconds: float, out_prefix: Path) -> list[subprocess.Popen]:
    """Start py-spy (a dev dependency) on each of Spark's Python worker daemons, following
    their forked workers, for ``seconds``; each writes folded stacks to
    ``<out_prefix>.<pid>.txt``. Returns the py-spy processes: wait for them. Raises
    RuntimeError when no worker daemon runs yet (run a query first)."""
    found = subprocess.run(["pgrep", "-f", "pyspark.daemon"], capture_output=True, text=True).stdout.split()
    pids = {int(pid) for pid in found}
    roots = [pid for pid in pids if _parent_of(pid) not in pids]  # daemons, not their forked workers
    if not roots:
        raise RuntimeError("no pyspark.daemon process to profile: run a query first")
    py_spy = Path(sys.executable).with_name("py-spy")
    return [subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--subprocesses", "--native", "--rate", "100",
                              "--duration", str(int(seconds)), "--format", "raw", "--output", f"{out_prefix}.{pid}.txt"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in roots]


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def summarize_profile(folded: list[Path], top: int = 20) -> dict:
    """The functions with the largest share of samples in py-spy ``raw`` (folded) profiles:
    ``self`` (where the time was spent) and ``inclusive`` (below which call)."""
    own: dict[str, int] = defaultdict(int)
    below: dict[str, int] = defaultdict(int)
    total = 0
    for path in folded:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack:
                continue
            frames, samples = stack.split(";"), int(count)
            total += samples
            own[frames[-1]] += samples
            for frame in set(frames):
                below[frame] += samples

    def shares(table: dict[str, int]) -> list[tuple[str, float]]:
        return [(name, round(n / total, 4)) for name, n in sorted(table.items(), key=lambda kv: -kv[1])[:top]]

    return {"samples": total, "self": shares(own) if total else [], "inclusive": shares(below) if total else []}
