"""The soak's driver program: a backlog-aware query (``start_backlog_aware``) from a Kafka
topic into Parquet, run until told to stop, as a user's job runs.

    python -m benchmarks.harness.soak_job BOOTSTRAP TOPIC OUT_DIR

Writes every progress event as a JSON line to ``OUT_DIR/progress.jsonl`` (appended: a
restarted job continues the file) and stops cleanly (``handle.stop()``, ``spark.stop()``)
once ``OUT_DIR/stop`` exists. The soak (``benchmarks/soak.py``) starts it with
``start_new_session=True`` so that it can kill the whole job (this process, its JVM and the
JVM's Python workers) with one SIGKILL to the process group. Spark's defaults, local[2].
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    bootstrap, topic, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource, start_backlog_aware
    from benchmarks.harness.progress import ProgressLog

    spark = (SparkSession.builder.master("local[2]").appName("backlog-soak").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(BacklogDataSource)
    progress_file = open(out / "progress.jsonl", "a")

    def record(progress: dict) -> None:
        progress_file.write(json.dumps(progress) + "\n")
        progress_file.flush()

    spark.streams.addListener(ProgressLog(on_event=record, keep=False).listener)
    df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    writer = (df.writeStream.format("parquet").option("path", str(out / "parquet"))
              .option("checkpointLocation", str(out / "checkpoint")))
    handle = start_backlog_aware(writer, "0 seconds", "1 second")
    while not (out / "stop").exists():
        if handle.await_termination(timeout=1.0):
            print("the query terminated", file=sys.stderr)
            sys.exit(3)
    handle.stop()
    (out / "stopped").write_text(json.dumps({"at": time.time(), "mode": str(handle.mode),
                                             "transitions": len(handle.transitions)}))
    spark.stop()


if __name__ == "__main__":
    main()
