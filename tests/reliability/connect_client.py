"""A Spark Connect client for the Connect test: prints one JSON line of what it saw.

    python tests/reliability/connect_client.py CONNECT_URL BOOTSTRAP TOPIC SWITCHED_TOPIC INSTALLED_TOPIC WORK_DIR
"""

from __future__ import annotations

import json
import sys
import time


def connect_session(url: str, timeout_s: float = 120):
    """A Spark Connect session to ``url``, once the server answers (it takes a while to
    listen after it starts); raises what the last attempt raised after ``timeout_s``."""
    from pyspark.sql import SparkSession

    deadline = time.time() + timeout_s
    while True:
        try:
            spark = SparkSession.builder.remote(url).getOrCreate()
            spark.range(1).collect()
            return spark
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(2)


def main() -> None:
    url, bootstrap, topic, switched_topic, installed_topic, work = sys.argv[1:7]

    from backlog_source import BacklogDataSource, BacklogModeListener, disable_metrics, install, start_backlog_aware

    spark = connect_session(url)
    report: dict = {"session": type(spark).__module__}
    spark.dataSource.register(BacklogDataSource)  # runs in the server's Python workers

    def source(name, **options):
        reader = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", name).option("startingOffsets", "earliest"))
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    # 1. The source and a client-side listener.
    class Recorder:
        def __init__(self):
            self.flags = []
            self.plans = []  # [query id, what bounded the batch, planned bytes]

        def receive(self, message):
            if hasattr(message, "processing_backlog"):
                self.flags.append([message.batch_id, message.processing_backlog, message.traceparent is not None])
                plan = message.ends[0].plan if message.ends else None
                if plan is not None:
                    self.plans.append([message.query_id, plan.bounded_by.value, plan.bytes])

    recorder = Recorder()
    spark.streams.addListener(BacklogModeListener(recorder))
    query = (source(topic).writeStream.format("memory").queryName("connect_out").trigger(availableNow=True)
             .option("checkpointLocation", f"{work}/ckpt").start())
    query.awaitTermination(180)
    report["rows"] = spark.table("connect_out").count()
    report["distinct"] = spark.table("connect_out").select("partition", "offset").distinct().count()
    deadline = time.time() + 30
    while not recorder.flags and time.time() < deadline:  # listener events reach the client asynchronously
        time.sleep(0.1)
    report["listener_flags"] = list(recorder.flags)  # a copy: later queries report to the recorder too

    # 2. start_backlog_aware, which switches by restart under Connect.
    out = f"{work}/switched"
    writer = (source(switched_topic, **{"backlog.maxOffsetsPerTrigger": "2000"}).writeStream.format("parquet")
              .option("path", out).option("checkpointLocation", f"{work}/ckpt2"))
    from backlog_source.core.errors import ConfigError

    try:  # in place needs JVM objects a Connect client does not have: refused before anything starts
        start_backlog_aware(writer, "0 seconds", "500 milliseconds", switch_method="in-place").stop()
        report["in_place_refusal"] = None
    except ConfigError as exc:
        report["in_place_refusal"] = str(exc)
    handle = start_backlog_aware(writer, "0 seconds", "500 milliseconds")
    report["switch_method"] = handle.switch_method
    report["initial_mode"] = handle.mode
    deadline = time.time() + 180
    while handle.mode != "low-latency" and time.time() < deadline:
        handle.await_termination(0.2)
    handle.stop()
    report["transitions"] = [[t.from_mode, t.to_mode, t.method] for t in handle.transitions]
    written = spark.read.parquet(out)
    report["switched_rows"] = written.count()
    report["switched_distinct"] = written.select("partition", "offset").distinct().count()

    # 3. install(allow_restart=True): a plain start() of a backlog query switches by restart;
    #    a query that reads no format("backlog") is never touched.
    installation = install(spark, "0 seconds", "500 milliseconds", allow_restart=True)
    out3 = f"{work}/installed"
    #    Its catch-up batches are bounded by bytes (backlog.maxBytesPerTrigger works here too).
    plain = (source(installed_topic, **{"backlog.maxBytesPerTrigger": "64k"}).writeStream.format("parquet")
             .option("path", out3).option("checkpointLocation", f"{work}/ckpt3").trigger(processingTime="0 seconds")
             .start())
    other = (spark.readStream.format("rate").load().writeStream.format("noop")
             .option("checkpointLocation", f"{work}/ckpt4").trigger(processingTime="1 second").start())
    deadline = time.time() + 180
    adopted = None
    while time.time() < deadline:
        adopted = installation.adopted.get(plain.id)
        if adopted is not None and adopted.mode.value == "low-latency":
            break
        time.sleep(0.2)
    report["installed"] = None if adopted is None else {
        "mode": adopted.mode.value, "method": adopted.method.value, "new_run": adopted.run_id != plain.runId,
        "running": spark.streams.get(plain.id) is not None and spark.streams.get(plain.id).runId == adopted.run_id,
        "other_adopted": other.id in installation.adopted, "skipped": installation.skipped,
        "bounded_by": [bounded for query_id, bounded, _ in recorder.plans if query_id == str(plain.id)]}
    # What a dashboard scraping now would see, before the query is stopped (a stopped query's
    # series end): one export at once, rather than waiting for the periodic one.
    from backlog_source.mode_switch.session_metrics import session_metrics

    exported = session_metrics(spark)
    report["metrics_flushed"] = exported is not None and bool(exported.export.flush())
    spark.streams.get(plain.id).stop()
    other.stop()
    installation.uninstall()
    disable_metrics(spark)  # a last export of the session's metrics (the test's OTLP receiver counts them)
    report["installed_query_id"] = str(plain.id)
    written3 = spark.read.parquet(out3)
    report["installed_rows"] = written3.count()
    report["installed_distinct"] = written3.select("partition", "offset").distinct().count()
    print("REPORT " + json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main()
