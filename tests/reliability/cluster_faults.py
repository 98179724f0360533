"""A Spark standalone cluster on loopback and the executor faults run on it, shared by
``test_cluster.py`` (which asserts on the outcome) and ``benchmarks/executor_faults.py``
(which times it).

The cluster: a master and two workers of one core each, from the pyspark package of the
installed wheel's environment; the second worker on another loopback address (127.0.0.2),
because Spark never runs a speculative copy on the host of the attempt it copies. Executors
run the wheel's interpreter.

The scenario (:func:`run_executor_faults`): ``crash_job.py --crash-at none --hold-reads``
(the driver, on the wheel's interpreter, ``start_backlog_aware`` into Parquet) drains a backlog
with live records arriving and speculation on for the whole run. The faults land inside a
running read task by condition, not by timing: the job's source holds a read task that a test
arms (``crash_job.py``'s ``hold_if_armed``: the task's Python worker writes a marker and waits
for a release), so from this process (a) once a backlog batch has committed, a read task of a
later backlog batch is held on 127.0.0.2 until a speculative copy of it is held on 127.0.0.1
too, and that executor's JVM is SIGKILLed; (b) once a batch has committed after that, a read
task is held on 127.0.0.1 and the forked Python workers of that executor, the held one among
them, are SIGKILLed. Each hold is released right after its kill. Nothing else is done: the
query must go on, switch to low latency and stop caught up on its own.
"""

from __future__ import annotations

import json
import os
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


def without_spark_home() -> dict:
    """This process's environment for the cluster's processes, without the suite's
    ``SPARK_HOME`` (tests/support/spark_home.py): the cluster runs Spark as the wheel's
    environment installed it, which may be another PySpark version."""
    return {name: value for name, value in os.environ.items() if name != "SPARK_HOME"}


@contextmanager
def standalone_cluster(folder: Path, python: Path):
    """Yields the ``spark://`` URL of a master on 127.0.0.1 and two one-core workers (127.0.0.1
    and :data:`SECOND_HOST`), each registered; stops them afterwards. Their logs:
    ``master.log``, ``worker-1.log``, ``worker-2.log`` in ``folder``. Executors run ``python``.
    Raises TimeoutError when a worker does not register within 120 s."""
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    launcher = str(spark_class(python))
    base = {**without_spark_home(), "SPARK_MASTER_HOST": "127.0.0.1", "PYSPARK_PYTHON": str(python)}
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
        return self.until(lambda: next((e for e in self.entries() if predicate(e)), None), timeout_s, what)

    def until(self, look, timeout_s: float, what: str):
        """``look()`` once it is truthy (polled every 20 ms). Raises RuntimeError when the job has
        exited first, TimeoutError after ``timeout_s``."""

        def checked():
            found = look()
            if not found and self.job.poll() is not None:
                raise RuntimeError(f"the job exited with {self.job.returncode} before {what}")
            return found

        return wait_for(checked, timeout_s, what, interval_s=0.02)


@dataclass
class Kill:
    """One injected fault: what was killed (``pids`` on ``host``), when (wall clock), the held
    read task it hit (``held``: the ``waiting`` markers of its attempts, ``crash_job.py``'s
    :func:`hold_if_armed`; ``batch``: its micro-batch) and the first batch committed after it
    (``next_commit_s``: kill -> that commit)."""

    fault: str
    at: float
    pids: list[int]
    host: str
    held: list[dict]
    batch: int | None
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


def run_executor_faults(broker, topic: str, out: Path, python: Path, master: str, *, partitions: int = 8,
                        per_partition: int = 20_000, per_batch: int = 32_000, live_rate: int = 200,
                        copy_before_jvm_kill: bool = True, env: dict | None = None,
                        timeout_s: float = 600) -> FaultRun:
    """The scenario of the module docstring on a fresh ``topic`` of ``partitions`` x
    ``per_partition`` records (20 B values), ``per_batch`` records per backlog batch, ``live_rate``
    live records/s until the job reaches low latency. ``copy_before_jvm_kill``: the executor JVM
    is killed once a speculative copy of its held task is held too (the copy then wins);
    otherwise as soon as its task is held (Spark runs the task again). The job's output
    (``job.log``, ``parquet/``, ``checkpoint/``, ``events/``, ``holds/``) goes to ``out``.
    Raises RuntimeError or TimeoutError when a fault could not be injected at its moment (the
    job ended or never got there); the job's own failure is in the returned exit code."""
    make_topic(broker, topic, partitions, per_partition=per_partition)
    for folder in ("events", "holds"):
        (out / folder).mkdir()
    # (a)'s hold is armed before the job starts and claims a read task of a batch after the
    # first that leaves every bucket in backlog: armed once a batch had committed, it could miss
    # the drain on a loaded machine (the job's log lags its batches) and claim a caught-up
    # batch's single task, which Spark never speculates.
    _arm(out / "holds" / "jvm", SECOND_HOST, mid_backlog=True)
    conf = {**SPECULATION, "spark.eventLog.enabled": "true", "spark.eventLog.compress": "false",
            "spark.eventLog.dir": (out / "events").as_uri()}
    command = [str(python), str(JOB), broker.bootstrap_servers, topic, str(out), "--crash-at", "none",
               "--backlog-max-offsets-per-trigger", str(per_batch), "--deadline-s", str(timeout_s),
               "--hold-reads", str(out / "holds"), "--expect-block-managers", "3"]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += ["--option", f"minPartitions={partitions}"]  # a task a partition: speculation needs several
    # SPARK_LOCAL_IP: the driver on loopback too (else Spark binds it to the host's interface).
    job_env = {**without_spark_home(), "JOB_MASTER": master, "SPARK_LOCAL_IP": FIRST_HOST, **(env or {})}
    job_env.pop("PYTHONPATH", None)  # the driver imports the installed wheel, from outside the source tree
    live = LiveProducer(broker.bootstrap_servers, topic, partitions, rate=live_rate).start()
    started = time.time()
    stderr = open(out / "job.stderr", "w")
    job = subprocess.Popen(command, cwd=out, env=job_env, stdout=subprocess.DEVNULL, stderr=stderr,
                           start_new_session=True)
    log, kills = JobLog(out, job), []
    try:
        app_id = log.wait(lambda e: e["what"] == "started", 240, "the query to start")["app_id"]
        # (a) The second host's executor JVM, while it runs a read task of a backlog batch (and,
        # with copy_before_jvm_kill, while a speculative copy of that task runs on the first host).
        hosts = {SECOND_HOST, FIRST_HOST} if copy_before_jvm_kill else {SECOND_HOST}
        held = _held(out / "holds" / "jvm", hosts, log)
        jvm = executor_jvms(app_id)[SECOND_HOST][0]
        _check_held_by(held, SECOND_HOST, descendants(jvm), "the executor JVM")
        kills.append(_kill("executor JVM", [jvm], SECOND_HOST, held, out / "holds" / "jvm"))
        _await_next_commit(kills[-1], log)
        # (b) The forked Python workers of the surviving executor, while one of them runs a read task.
        _arm(out / "holds" / "workers", FIRST_HOST)
        held = _held(out / "holds" / "workers", {FIRST_HOST}, log)
        workers = python_workers(executor_jvms(app_id)[FIRST_HOST][0])
        _check_held_by(held, FIRST_HOST, workers, "the executor's Python workers")
        kills.append(_kill("Python workers", workers, FIRST_HOST, held, out / "holds" / "workers"))
        _await_next_commit(kills[-1], log)
        # Live records keep batches coming until the backlog is drained and the query has switched.
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


def held_attempts(hold: Path) -> list[dict]:
    """The ``waiting`` markers of the attempts the hold ``hold`` holds (or held), oldest first."""
    markers = [json.loads(p.read_text()) for p in hold.glob("waiting-*.json")]
    return sorted(markers, key=lambda m: m["attempt"])


def _arm(hold: Path, host: str, *, mid_backlog: bool = False) -> None:
    """Arm ``hold`` for the next read task on ``host`` (``mid_backlog``: the next one of a batch
    after the first that leaves every bucket in backlog; ``crash_job.py``'s ``hold_if_armed``)."""
    hold.mkdir()
    (hold / "arm").write_text(json.dumps({"host": host, "mid_backlog": mid_backlog}))


def _held(hold: Path, hosts: set[str], log: JobLog) -> list[dict]:
    """Wait until attempts of the task ``hold`` claimed are held on each of ``hosts`` (a second
    host: a speculative copy). Returns their markers; on a timeout, the error says which task
    was claimed, which attempts were held and which batches had committed."""
    what = "a read task held on the armed host" + (" and a speculative copy of it" if len(hosts) > 1 else "")
    try:
        return log.until(lambda: (m := held_attempts(hold)) and {a["host"] for a in m} >= hosts and m, 180, what)
    except TimeoutError as exc:
        claim = (hold / "claim").read_text() if (hold / "claim").exists() else "none"
        batches = [(e["batch"], e["backlog"], e["mode"]) for e in log.entries() if e["what"] == "batch"]
        raise TimeoutError(f"{exc}; armed: {(hold / 'arm').read_text()}; claimed (stage:partition): {claim}; "
                           f"held: {held_attempts(hold)}; committed (batch, backlog, mode): {batches}") from None


def _check_held_by(held: list[dict], host: str, pids, what: str) -> None:
    original = next(m for m in held if m["host"] == host)
    if original["pid"] not in pids:
        raise RuntimeError(f"the read task held on {host} (pid {original['pid']}) is not one of {what} ({pids})")


def _kill(fault: str, pids: list[int], host: str, held: list[dict], hold: Path) -> Kill:
    """SIGKILL ``pids``, then release ``hold`` (the other attempts of the held task go on)."""
    at = time.time()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    (hold / "release").touch()
    batch = held[0]["batch"]
    return Kill(fault, at, pids, host, held, None if batch is None else int(batch))


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
