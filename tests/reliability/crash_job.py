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
note carries the application id (``app_id``)."""

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
    spark.dataSource.register(BacklogDataSource)
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
