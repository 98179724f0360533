"""A Spark Connect client for the Connect test: prints one JSON line of what it saw.

    python tests/reliability/connect_client.py CONNECT_URL BOOTSTRAP TOPIC SWITCHED_TOPIC WORK_DIR
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
    url, bootstrap, topic, switched_topic, work = sys.argv[1:6]

    from backlog_source import BacklogDataSource, BacklogModeListener, start_backlog_aware

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

        def receive(self, message):
            if hasattr(message, "processing_backlog"):
                self.flags.append([message.batch_id, message.processing_backlog, message.traceparent is not None])

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
    report["listener_flags"] = recorder.flags

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
    print("REPORT " + json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main()
