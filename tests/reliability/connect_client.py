"""A Spark Connect client for the Connect test: prints one JSON line of what worked.

    python tests/reliability/connect_client.py CONNECT_URL BOOTSTRAP TOPIC WORK_DIR
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    url, bootstrap, topic, work = sys.argv[1:5]
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource, BacklogModeListener, ConfigError, start_backlog_aware

    deadline = time.time() + 120
    while True:  # the server takes a while to listen
        try:
            spark = SparkSession.builder.remote(url).getOrCreate()
            spark.range(1).collect()
            break
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(2)
    report: dict = {"session": type(spark).__module__}
    spark.dataSource.register(BacklogDataSource)  # runs in the server's Python workers
    df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())

    class Recorder:
        def __init__(self):
            self.flags = []

        def on_progress(self, query_id, run_id, batch_id, processing_backlog, traceparent=None):
            self.flags.append([batch_id, processing_backlog, traceparent is not None])

        def on_idle(self, query_id, run_id):
            pass

        def on_terminated(self, query_id, run_id, exception):
            pass

    recorder = Recorder()
    spark.streams.addListener(BacklogModeListener(recorder))
    query = (df.writeStream.format("memory").queryName("connect_out").trigger(availableNow=True)
             .option("checkpointLocation", f"{work}/ckpt").start())
    query.awaitTermination(180)
    report["rows"] = spark.table("connect_out").count()
    report["distinct"] = spark.table("connect_out").select("partition", "offset").distinct().count()
    time.sleep(2)  # listener events reach the client asynchronously
    report["listener_flags"] = recorder.flags
    try:
        start_backlog_aware(df.writeStream.format("noop").option("checkpointLocation", f"{work}/ckpt2"))
        report["start_backlog_aware"] = "started"
    except ConfigError as exc:
        report["start_backlog_aware"] = str(exc)
    print("REPORT " + json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main()
