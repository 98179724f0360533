"""A driver program for the newest-JDK check: a backlog-aware query that must switch in
place, run on whatever JVM ``JAVA_HOME`` names.

    python tests/reliability/jdk_job.py BOOTSTRAP TOPIC OUT_DIR

Prints one line ``RESULT: {json}``: the JVM's version, how the switch was made, the
interval the running trigger executor holds afterwards (read from the JVM), and the rows
the sink holds.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    bootstrap, topic, out = sys.argv[1:4]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource, start_backlog_aware
    from backlog_source.mode_switch import switchers

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(BacklogDataSource)
    df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("backlog.maxOffsetsPerTrigger", "1000").load())
    writer = (df.writeStream.format("parquet").option("path", os.path.join(out, "parquet"))
              .option("checkpointLocation", os.path.join(out, "checkpoint")))
    handle = start_backlog_aware(writer, "0 seconds", "700 milliseconds", switch_method="in-place")
    try:
        deadline = time.monotonic() + 240
        while not (handle.transitions and handle.transitions[0].effective_seconds is not None):
            if handle.await_termination(timeout=0.2) or time.monotonic() > deadline:
                raise SystemExit(f"no switch took effect: transitions {handle.transitions}")
        executor = switchers._java_query(handle.query).triggerExecutor()
        field = executor.getClass().getDeclaredField(switchers.INTERVAL_FIELD)
        field.setAccessible(True)
        result = {
            "java_version": str(spark.sparkContext._jvm.System.getProperty("java.version")),
            "switch_method": handle.switch_method,
            "transition": [str(handle.transitions[0].from_mode), str(handle.transitions[0].to_mode)],
            "interval_ms": int(field.getLong(executor)),
        }
    finally:
        handle.stop()
    result["rows"] = spark.read.parquet(os.path.join(out, "parquet")).count()
    spark.stop()
    print("RESULT: " + json.dumps(result))


if __name__ == "__main__":
    main()
