"""A driver program for the secrets check: a traced, backlog-aware query with secret-bearing
options, everything it prints going to this process's stdout/stderr.

    python tests/reliability/secrets_job.py BOOTSTRAP TOPIC OUT_DIR OPTIONS_JSON (drain|fail)

``drain``: the options still connect (PLAINTEXT); run until low-latency mode and caught up.
``fail``: the options cannot authenticate; print the query's exception and exit 0.
OTEL_* variables of this process reach every Spark process (local mode).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time


def main() -> None:
    bootstrap, topic, out, options_json, mode = sys.argv[1:6]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    logging.getLogger("backlog_source").setLevel(logging.DEBUG)  # our DEBUG logs included
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource, start_backlog_aware

    os.makedirs(os.path.join(out, "eventlog"), exist_ok=True)
    # Spark's event log (every progress event and plan) lands under OUT_DIR, searched too.
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", os.path.join(out, "eventlog"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("INFO")
    spark.dataSource.register(BacklogDataSource)
    df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest")
          .option("kafkaConsumer.pollTimeoutMs", "6000").option("fetchOffset.numRetries", "1")
          .options(**json.loads(options_json)).load())
    df.explain(True)  # the plans, as a user would print them
    writer = (df.writeStream.format("parquet").option("path", os.path.join(out, "parquet"))
              .option("checkpointLocation", os.path.join(out, "checkpoint")))
    # From here on every py4j call is logged with its arguments and answers (the user's own
    # .option() calls above would show their values; start_backlog_aware must read none).
    logging.getLogger("py4j").setLevel(logging.DEBUG)
    try:
        handle = start_backlog_aware(writer, "0 seconds", "500 milliseconds")
    except Exception as exc:  # a failure at start is a valid outcome of "fail" too
        print(f"QUERY FAILED AT START: {exc!r}\n{exc}")
        sys.exit(0 if mode == "fail" else 1)
    deadline = time.time() + 180
    try:
        while time.time() < deadline:
            try:
                if handle.await_termination(timeout=0.5):
                    break
            except Exception as exc:
                print(f"QUERY FAILED: {exc!r}\n{exc}")
                sys.exit(0 if mode == "fail" else 1)
            last = handle.query.lastProgress
            if mode == "drain" and handle.mode == "low-latency" and last and last["numInputRows"] == 0:
                print("LAST PROGRESS: " + json.dumps(last, default=str))
                break
    finally:
        handle.stop()
        spark.stop()
    sys.exit(0 if mode == "drain" else 1)


if __name__ == "__main__":
    main()
