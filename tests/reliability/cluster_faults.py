"""A Spark standalone cluster on loopback and the executor faults run on it, shared by
``test_cluster.py`` (which asserts on the outcome) and ``benchmarks/executor_faults.py``
(which times it).

The cluster: a master and two workers of one core each, from the pyspark package of the
installed wheel's environment; the second worker on another loopback address (127.0.0.2),
because Spark never runs a speculative copy on the host of the attempt it copies. Executors
run the wheel's interpreter.

The scenario (:func:`run_executor_faults`): ``crash_job.py --crash-at none`` (the driver, on
the wheel's interpreter, ``start_backlog_aware`` into Parquet) drains a backlog with live
records arriving and speculation on for the whole run; from this process, (a) once a backlog
batch has committed (the job's log), the executor JVM on 127.0.0.2 is SIGKILLed while its own
log shows a task running, and once a batch has committed after that, (b) the forked Python
workers of the surviving executor (127.0.0.1) are SIGKILLed while it runs a task; live
records go on until a speculative copy has run (the replacement executor's first tasks, a
cold Python start, are the slow ones) and the query is in low latency. Nothing else is done:
the query must go on, switch to low latency and stop caught up on its own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from backlog_source.demo.apache_kafka import free_port
from backlog_source.demo.traffic import LiveProducer
from benchmarks.harness.costs import children_by_parent, descendants
from tests.integration.helpers import make_topic, wait_for

JOB = Path(__file__).with_name("crash_job.py")
FIRST_HOST, SECOND_HOST = "127.0.0.1", "127.0.0.2"
#: Speculation that runs copies on a small job: checked every 100 ms, once half a stage's
#: tasks are done, for any task running longer than their median (at least 100 ms), by
#: duration alone (the efficiency check needs input metrics a Python source's tasks lack).
SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "1.0",
    "spark.speculation.minTaskRuntime": "100ms",
    "spark.speculation.efficiency.enabled": "false",
}


def spark_class(python: Path) -> Path:
    """``bin/spark-class`` of the pyspark installed for ``python``: the master and workers must
    run the driver's Spark version (the wheel's environment picks its own pyspark)."""
    home = subprocess.run([str(python), "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return Path(home) / "bin" / "spark-class"


@contextmanager
def standalone_cluster(folder: Path, python: Path):
    """Yields the ``spark://`` URL of a master on 127.0.0.1 and two one-core workers (127.0.0.1
    and :data:`SECOND_HOST`), each registered; stops them afterwards. Their logs:
    ``master.log``, ``worker-1.log``, ``worker-2.log`` in ``folder``. Executors run ``python``.
    Raises TimeoutError when a worker does not register within 120 s."""
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    launcher = str(spark_class(python))
    base = {**os.environ, "SPARK_MASTER_HOST": "127.0.0.1", "PYSPARK_PYTHON": str(python)}
    commands = {
        "master": (["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)], "127.0.0.1"),
        "worker-1": (["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"], "127.0.0.1"),
        "worker-2": (["org.apache.spark.deploy.worker.Worker", url, "--host", SECOND_HOST], SECOND_HOST),
    }
    processes, logs = [], []
    try:
        for name, (arguments, host) in commands.items():
            if name.startswith("worker"):
                arguments = [*arguments, "--cores", "1", "--memory", "2g", "--work-dir", str(folder / name)]
            log = open(folder / f"{name}.log", "w")
            logs.append(log)
            processes.append(subprocess.Popen(
                [launcher, *arguments, "--webui-port", str(free_port())],
                env={**base, "SPARK_LOCAL_IP": host, "SPARK_WORKER_DIR": str(folder / name)},
                stdout=log, stderr=subprocess.STDOUT))
        for name in ("worker-1", "worker-2"):
            wait_for(lambda: "Successfully registered with master" in (folder / f"{name}.log").read_text(), 120,
                     f"{name} to register with the master")
        yield url
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in reversed(processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()


def _command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return [part.decode(errors="replace") for part in cmdline.read().split(b"\0") if part]
    except OSError:
        return []


def executor_jvms(app_id: str) -> dict[str, tuple[int, str]]:
    """``host -> (pid, executor id)`` of each live executor JVM of the application ``app_id``,
    from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        command = _command_line(int(entry))
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in command and app_id in command:
            found[command[command.index("--hostname") + 1]] = (
                int(entry), command[command.index("--executor-id") + 1])
    return found


def running_tasks(stderr: Path) -> set[str]:
    """The task ids an executor runs now, from its log (``stderr`` in its work folder): each
    ``Running task`` line not yet followed by the task's finish, kill or failure."""
    running: set[str] = set()
    text = stderr.read_text(errors="replace") if stderr.exists() else ""
    for line in text.splitlines():
        match = re.search(r"\(TID (\d+)\)", line)
        if match is None:
            continue
        if "Running task" in line:
            running.add(match.group(1))
        elif "Finished task" in line or "killed task" in line or "Exception in task" in line:
            running.discard(match.group(1))
    return running


def python_workers(jvm: int) -> list[int]:
    """The Python workers of the executor JVM ``jvm``: the processes its ``pyspark.daemon``
    forked (their command line is the daemon's), or ``pyspark.worker`` children when it runs
    no daemon."""
    children = children_by_parent()
    workers = []
    for pid in children.get(jvm, []):
        command = " ".join(_command_line(pid))
        if "pyspark.daemon" in command:
            workers += [w for w in descendants(pid) if "pyspark.daemon" in " ".join(_command_line(w))]
        elif "pyspark.worker" in command:
            workers.append(pid)
    return workers


class JobLog:
    """The ``job.log`` entries ``crash_job.py`` writes, read again at each look."""

    def __init__(self, out: Path, job: subprocess.Popen) -> None:
        self.path, self.job = out / "job.log", job

    def entries(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.endswith("}")]

    def wait(self, predicate, timeout_s: float, what: str) -> dict:
        """The first entry satisfying ``predicate`` once there is one. Raises RuntimeError when the
        job has exited first, TimeoutError after ``timeout_s``."""

        def look():
            found = next((e for e in self.entries() if predicate(e)), None)
            if found is None and self.job.poll() is not None:
                raise RuntimeError(f"the job exited with {self.job.returncode} before {what}")
            return found

        return wait_for(look, timeout_s, what)


@dataclass
class Kill:
    """One injected fault: what was killed (``pids`` on ``host``), when (wall clock), and the
    first batch committed after it (``next_commit_s``: kill -> that commit)."""

    fault: str
    at: float
    pids: list[int]
    host: str
    next_batch: int | None = None
    next_commit_s: float | None = None


@dataclass
class FaultRun:
    """What :func:`run_executor_faults` saw: the job's exit code and output, its log, the kills,
    and the Spark event log (:func:`spark_events`)."""

    returncode: int
    stderr: str
    log: list[dict]
    kills: list[Kill]
    events: SparkEvents
    seconds: float


def run_executor_faults(broker, topic: str, out: Path, folder: Path, python: Path, master: str, *, partitions: int = 8,
                        per_partition: int = 20_000, per_batch: int = 32_000, live_rate: int = 200,
                        env: dict | None = None, timeout_s: float = 600) -> FaultRun:
    """The scenario of the module docstring on a fresh ``topic`` of ``partitions`` x
    ``per_partition`` records (20 B values), ``per_batch`` records per backlog batch, ``live_rate``
    live records/s until the job reaches low latency. The job's output (``job.log``,
    ``parquet/``, ``checkpoint/``, ``events/``) goes to ``out``. Raises RuntimeError or
    TimeoutError when a fault could not be injected at its moment (the job ended or never got
    there); the job's own failure is in the returned exit code. ``folder``: the cluster's
    (:func:`standalone_cluster`), whose executors' logs show when a task runs."""
    make_topic(broker, topic, partitions, per_partition=per_partition)
    (out / "events").mkdir()
    conf = {**SPECULATION, "spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
            "spark.eventLog.dir": (out / "events").as_uri()}
    command = [str(python), str(JOB), broker.bootstrap_servers, topic, str(out), "--crash-at", "none",
               "--backlog-max-offsets-per-trigger", str(per_batch), "--deadline-s", str(timeout_s)]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += ["--option", f"minPartitions={partitions}"]  # a task a partition: speculation needs several
    job_env = {**os.environ, "JOB_MASTER": master, **(env or {})}
    job_env.pop("PYTHONPATH", None)  # the driver imports the installed wheel, from outside the source tree
    live = LiveProducer(broker.bootstrap_servers, topic, partitions, rate=live_rate).start()
    started = time.time()
    stderr = open(out / "job.stderr", "w")
    job = subprocess.Popen(command, cwd=out, env=job_env, stdout=subprocess.DEVNULL, stderr=stderr,
                           start_new_session=True)
    log, kills = JobLog(out, job), []
    try:
        app_id = log.wait(lambda e: e["what"] == "started", 240, "the query to start")["app_id"]
        # (a) The second host's executor JVM, while it runs a backlog batch's task.
        log.wait(lambda e: e["what"] == "batch" and e["batch"] >= 1 and e["backlog"], 240, "a backlog batch to commit")
        kills.append(_strike("executor JVM", folder, app_id, SECOND_HOST, lambda jvm: [jvm]))
        _await_next_commit(kills[-1], log)
        # (b) The forked Python workers of the surviving executor, while it runs a task of a later batch.
        kills.append(_strike("Python workers", folder, app_id, FIRST_HOST, python_workers))
        _await_next_commit(kills[-1], log)
        # The replacement executor's first tasks (a cold Python start) run longer than the
        # median: copies of them run on the other host. Live records keep batches coming.
        wait_for(lambda: any(a["speculative"] for a in spark_events(out / "events").attempts), 240,
                 "a speculative task attempt")
        log.wait(lambda e: e["what"] == "batch" and e["mode"] == "low-latency", 300, "low latency")
        live.stop()
        job.wait(timeout=timeout_s)
    finally:
        live.stop()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        stderr.close()
    if live.failed:
        raise RuntimeError(f"{live.failed} live records were not acknowledged: {live.first_error}")
    return FaultRun(job.returncode, (out / "job.stderr").read_text(), log.entries(), kills,
                    spark_events(out / "events"), time.time() - started)


def _strike(fault: str, folder: Path, app_id: str, host: str, victims) -> Kill:
    """SIGKILL ``victims(jvm)`` (pids) of ``host``'s executor the first time its log shows a task
    running (the workers' folders under ``folder``: :func:`standalone_cluster`'s). Raises
    TimeoutError after 120 s without one."""
    workers = {FIRST_HOST: "worker-1", SECOND_HOST: "worker-2"}

    def busy():
        jvm, executor = executor_jvms(app_id).get(host, (None, None))
        if jvm is None or not running_tasks(folder / workers[host] / app_id / executor / "stderr"):
            return None
        return victims(jvm) or None

    pids = wait_for(busy, 120, f"a task on {host} to kill the {fault} in", interval_s=0.02)
    return _kill(fault, pids, host)


def _kill(fault: str, pids: list[int], host: str) -> Kill:
    at = time.time()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return Kill(fault, at, pids, host)


def _await_next_commit(kill: Kill, log: JobLog) -> None:
    committed = log.wait(lambda e: e["what"] == "batch" and e["at"] > kill.at, 300,
                         f"a batch to commit after the {kill.fault} kill")
    kill.next_batch, kill.next_commit_s = committed["batch"], committed["at"] - kill.at


@dataclass
class SparkEvents:
    """What the Spark event log says: every ended task attempt (stage, partition index, attempt,
    executor, host, speculative or not, finish time in s, and how it ended: ``Success``,
    ``TaskKilled``, ``ExecutorLostFailure``, ``ExceptionFailure``, ...) and when each executor
    was added (``executor id -> s``)."""

    attempts: list[dict] = field(default_factory=list)
    executors_added: dict[str, float] = field(default_factory=dict)


def spark_events(events: Path) -> SparkEvents:
    """The event log(s) under ``events`` as far as written (a line still being written is left out)."""
    found = SparkEvents()
    for path in sorted(p for p in events.rglob("events_*") if p.is_file()):
        for line in path.read_text().splitlines():
            if '"SparkListenerTaskEnd"' not in line and '"SparkListenerExecutorAdded"' not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event["Event"] == "SparkListenerExecutorAdded":
                found.executors_added[event["Executor ID"]] = event["Timestamp"] / 1000
                continue
            info = event["Task Info"]
            found.attempts.append({"stage": event["Stage ID"], "index": info["Index"], "attempt": info["Attempt"],
                                   "executor": info["Executor ID"], "host": info["Host"],
                                   "speculative": info["Speculative"], "finished": info["Finish Time"] / 1000,
                                   "end": event["Task End Reason"]["Reason"]})
    return found
