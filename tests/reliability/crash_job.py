"""A driver program for the crash tests: a backlog-aware query into Parquet that SIGKILLs its
own process group (this Python driver and its Spark JVM) at a named point.

    python -m tests.reliability.crash_job BOOTSTRAP TOPIC OUT_DIR --crash-at POINT [--backlog-max-offsets-per-trigger N]

Points: ``mid_backlog`` (while a high-throughput batch runs), ``after_boundary`` (the batch
that reached every boundary has committed, before the next plan settles it),
``during_switch`` (around the switch to low latency), ``low_latency`` (in low-latency mode,
between batches), ``after_commit`` (inside the progress callback of a committed batch),
``none`` (run until in low-latency mode, make one more low-latency batch run, and once
caught up with the log end stop and exit 0).
``JOB_MASTER`` picks the Spark master (default ``local[2]``); ``OTEL_*`` variables are passed
to executors as ``spark.executorEnv.*``. Run with ``start_new_session=True`` so the kill does not reach the caller.
``--backlog-max-offsets-per-trigger`` sizes the backlog batches (150,000 records by default).
``--conf KEY=VALUE`` (repeatable) adds a Spark setting, ``--option KEY=VALUE`` (repeatable) a
source option; ``--deadline-s`` bounds the run (300 s by default, exit 4). The ``started``
note carries the application id (``app_id``).

``--hold-reads DIR`` (test-only, for a test that kills an executor's processes while a read
task of the source runs): the job registers a subclass of the source defined here
(:func:`held_source`; nothing of the package changes) whose executors' ``read`` first obeys
the holds in ``DIR`` (:func:`hold_if_armed`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

from pyspark.sql.streaming import StreamingQueryListener

POINTS = ("mid_backlog", "after_boundary", "during_switch", "low_latency", "after_commit", "none")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("out")
    parser.add_argument("--crash-at", choices=POINTS, required=True)
    parser.add_argument("--backlog-max-offsets-per-trigger", type=int, default=150_000)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--deadline-s", type=float, default=300)
    parser.add_argument("--hold-reads", metavar="DIR")
    parser.add_argument("--expect-block-managers", type=int, default=0,
                        help="when caught up, wait (up to 120 s) for this many block managers (driver "
                             "included) before noting them: a replacement executor registers in its own time")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource, start_backlog_aware

    log_file = open(os.path.join(args.out, "job.log"), "a")

    def note(what: str, **details) -> None:
        log_file.write(json.dumps({"at": time.time(), "crash_at": args.crash_at, "what": what, **details}) + "\n")
        log_file.flush()

    def crash(reason: str) -> None:
        note("SIGKILL", reason=reason)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    builder = (SparkSession.builder.master(os.environ.get("JOB_MASTER", "local[2]"))
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    for name, value in os.environ.items():
        if name.startswith("OTEL_"):  # as the README says: executors get OTEL_* via executorEnv
            builder = builder.config(f"spark.executorEnv.{name}", value)
    for setting in args.conf:
        builder = builder.config(*setting.split("=", 1))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(held_source(args.hold_reads) if args.hold_reads else BacklogDataSource)
    df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", args.bootstrap)
          .option("subscribe", args.topic).option("startingOffsets", "earliest")
          .option("backlog.maxOffsetsPerTrigger", str(args.backlog_max_offsets_per_trigger))
          .option("maxOffsetsPerTrigger", "20000").options(**dict(o.split("=", 1) for o in args.option)).load())
    writer = (df.writeStream.format("parquet").option("path", os.path.join(args.out, "parquet"))
              .option("checkpointLocation", os.path.join(args.out, "checkpoint")))
    state = {"handle": None, "ll_batches": 0}

    class CrashPoints(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

        def onQueryProgress(self, event):
            progress = event.progress
            end = json.loads(progress.sources[0].endOffset)
            handle = state["handle"]
            mode = handle.mode if handle else None
            note("batch", batch=progress.batchId, rows=progress.numInputRows, backlog=end["processing_backlog"],
                 mode=mode)
            if args.crash_at == "after_boundary" and end["backlog"]["finishing"] and not end["backlog"]["pending"]:
                crash("the batch that reached every boundary committed; nothing has settled it yet")
            if args.crash_at == "during_switch" and not end["processing_backlog"] and mode == "high-throughput":
                # The controller switches as it handles this very event (in place: at once).
                threading.Timer(0.05, crash, args=("around the switch",)).start()
            if mode == "low-latency" and progress.numInputRows > 0:
                state["ll_batches"] = max(state["ll_batches"], 0) + 1
                if args.crash_at == "after_commit" and state["ll_batches"] >= 2:
                    crash("right after a batch commit")

    spark.streams.addListener(CrashPoints())
    handle = start_backlog_aware(writer, "0 seconds", "500 milliseconds")
    state["handle"] = handle
    note("started", mode=handle.mode, app_id=spark.sparkContext.applicationId)
    deadline = time.time() + args.deadline_s
    while time.time() < deadline:
        query = handle.query
        if handle.await_termination(timeout=0.05):
            note("terminated")
            sys.exit(3)
        if args.crash_at == "mid_backlog":
            last = query.lastProgress
            # Mid-batch: planned (its offsets in the write-ahead log), its tasks reading, nothing committed.
            if (last is not None and last["batchId"] >= 1 and query.status["isTriggerActive"]
                    and spark.sparkContext.statusTracker().getActiveStageIds()):
                crash("a high-throughput batch is running")
        if args.crash_at == "low_latency" and handle.mode == "low-latency" and state["ll_batches"] >= 2:
            crash("in low-latency mode")
        if args.crash_at == "none" and handle.mode == "low-latency" and state["ll_batches"] == 0:
            # One more record, so a low-latency batch runs: the plan of that batch settles
            # the one that reached the boundaries (events handled, phase and bucket spans
            # exported) before the job stops.
            poke(args)
            state["ll_batches"] = -1
        if args.crash_at == "none" and handle.mode == "low-latency" and state["ll_batches"] > 0 and caught_up(query, args):
            handle.stop()
            status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
            registered_by = time.monotonic() + 120
            while status.size() < args.expect_block_managers and time.monotonic() < registered_by:
                time.sleep(0.5)  # waiting on the condition, bounded: the test names what is missing
                status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
            import backlog_source

            # Where the driver and an executor's Python worker import the package from.
            executor_module = (spark.sparkContext.parallelize([0], 1)
                               .map(lambda _: __import__("backlog_source").__file__).collect()[0])
            note("caught up and stopped", master=spark.sparkContext.master, mode=handle.mode,
                 transitions=[t.__dict__ for t in handle.transitions],
                 driver_module=backlog_source.__file__, executor_module=executor_module,
                 block_managers=[str(k) for k in spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters
                                 .asJava(status.keySet())])
            spark.stop()
            return
    note("deadline passed")
    sys.exit(4)


def hold_if_armed(folder: str, partition) -> None:
    """Block this read task while a hold in ``folder`` is armed for it. Runs in the Python
    worker of an executor that runs a read task of the source; test-only (``--hold-reads``).

    A hold is a folder ``folder/NAME`` the test fills: ``arm`` (JSON ``{"host": H}``, ``null``
    for any host, and optionally ``"mid_backlog": true``) arms it, ``release`` releases it. The
    first read task whose executor runs on ``H`` while the hold is armed and not released
    claims it (``claim``: its stage and partition); with ``mid_backlog``, only a task of a
    micro-batch after the first (so one batch has committed) whose every range ends before its
    bucket's backlog boundary (``partition``: the task's :class:`KafkaSplit`), i.e. a task of
    a stage of every bucket, which speculation can copy (a stage of one task never is), and
    claimed by a first attempt on ``H`` or by a speculative copy (a later attempt) away from
    ``H``: Spark speculates a task whose attempt on ``H`` started slowly, so the copy can reach
    this point first (seen: the copy read and won while the first attempt's Python worker was
    still starting). It, and every other attempt of that task (a retry, a speculative copy, on
    any host) that starts before the release, writes ``waiting-PID.json`` (``pid``: this Python
    worker, ``stage``, ``partition``, ``attempt``, ``batch``: the micro-batch id, ``host``) and
    waits for ``release``. Raises RuntimeError when no release comes within 600 s."""
    from pathlib import Path

    from pyspark import TaskContext

    context = TaskContext.get()
    task = f"{context.stageId()}:{context.partitionId()}"
    for arm in sorted(Path(folder).glob("*/arm")):
        hold = arm.parent
        if (hold / "release").exists():
            continue
        claim = hold / "claim"
        if not claim.exists():
            armed = json.loads(arm.read_text())
            here, first_attempt = executor_host(), context.attemptNumber() == 0
            if armed.get("mid_backlog"):
                # Two hosts and no failure before this hold: an attempt after the first away
                # from the armed host is a speculative copy of a task started there; one on
                # it copies a task started elsewhere, which may already be past this point.
                if (here == armed["host"]) != first_attempt or not _mid_backlog(context, partition):
                    continue
            elif armed["host"] is not None and armed["host"] != here:
                continue
            mine = hold / f"claim-{os.getpid()}"
            mine.write_text(task)
            try:
                os.link(mine, claim)  # atomic, content and all: one task claims the hold
            except FileExistsError:
                pass
            finally:
                mine.unlink()
        if claim.read_text() != task:
            continue
        marker = {"pid": os.getpid(), "stage": context.stageId(), "partition": context.partitionId(),
                  "attempt": context.attemptNumber(), "batch": context.getLocalProperty("streaming.sql.batchId"),
                  "host": executor_host()}
        (hold / f"waiting-{os.getpid()}.tmp").write_text(json.dumps(marker))
        os.replace(hold / f"waiting-{os.getpid()}.tmp", hold / f"waiting-{os.getpid()}.json")
        deadline = time.monotonic() + 600
        while not (hold / "release").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the hold {hold} was never released")
            time.sleep(0.02)


def _mid_backlog(context, partition) -> bool:
    """Whether this read task is of a micro-batch after the first and reads only buckets that
    stay in backlog after it (each range ends before the bucket's boundary)."""
    batch = context.getLocalProperty("streaming.sql.batchId")
    ranges = getattr(partition, "ranges", ())
    return (batch is not None and int(batch) >= 1 and bool(ranges)
            and all(r.boundary is not None and r.end < r.boundary for r in ranges))


def executor_host() -> str | None:
    """The ``--hostname`` of the executor JVM this process descends from (its Python daemon's
    parent), from /proc; None outside an executor (``local`` mode)."""
    pid = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read().decode(errors="replace").split("\0")
            with open(f"/proc/{pid}/stat") as stat:
                pid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return None
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in command:
            return command[command.index("--hostname") + 1]
    return None


def held_source(folder: str):
    """The source with :func:`hold_if_armed` before every executor's ``read``: a subclass
    defined in this program, pickled by value into the planner and the executors."""
    from backlog_source import BacklogDataSource
    from backlog_source.stream_reader import BacklogStreamReader

    class HeldReader(BacklogStreamReader):
        def __getstate__(self) -> dict:
            return {**BacklogStreamReader.__getstate__(self), "hold_folder": folder}

        def read(self, partition):
            hold_if_armed(self.hold_folder, partition)
            return BacklogStreamReader.read(self, partition)

    class HeldSource(BacklogDataSource):
        def streamReader(self, schema):
            reader = BacklogDataSource.streamReader(self, schema)
            held = HeldReader.__new__(HeldReader)
            held.__dict__.update(reader.__dict__, hold_folder=folder)
            return held

    return HeldSource


def poke(args) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 0})
    producer.produce(args.topic, key=b"poke", value=b"poke", partition=0)
    producer.flush(30)


def caught_up(query, args) -> bool:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    last = query.lastProgress
    if last is None:
        return False
    positions = json.loads(last["sources"][0]["endOffset"])["positions"].get(args.topic, {})
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    count = len(admin.list_topics(args.topic, timeout=10).topics[args.topic].partitions)
    futures = admin.list_offsets({TopicPartition(args.topic, p): OffsetSpec.latest() for p in range(count)})
    ends = {str(tp.partition): f.result(timeout=10).offset for tp, f in futures.items()}
    return positions == ends


if __name__ == "__main__":
    main()
