"""A driver program for the secrets check: traced, backlog-aware queries with secret-bearing
options, one after the other in one Spark session, everything they print going to this
process's stdout/stderr.

    python tests/reliability/secrets_job.py BOOTSTRAP TOPIC OUT_DIR RUNS_JSON

``RUNS_JSON`` is a list of ``{"name": ..., "options": {...}, "mode": "drain" | "fail"}``, each
with an optional ``"bootstrap"`` (another listener of the same cluster) in place of BOOTSTRAP;
each run's stdout starts with a line ``RUN <name>`` (:func:`run_outputs` of the tests splits
there), its checkpoint and Parquet output go under ``OUT_DIR/<name>``, Spark's event log under
``OUT_DIR/eventlog``. ``drain``: the options still connect (PLAINTEXT); run until low-latency
mode and caught up, and print the last progress. ``fail``: the options cannot authenticate;
print the query's exception. Exits 0 when every run ended as its mode says, 1 otherwise.
OTEL_* variables of this process reach every Spark process (local mode). One session for all
runs: a Spark start is most of a run's cost.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time


def main() -> None:
    bootstrap, topic, out, runs_json = sys.argv[1:5]
    runs = json.loads(runs_json)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    logging.getLogger("backlog_source").setLevel(logging.DEBUG)  # our DEBUG logs included
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource

    os.makedirs(os.path.join(out, "eventlog"), exist_ok=True)
    # Spark's event log (every progress event and plan) lands under OUT_DIR, searched too.
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", os.path.join(out, "eventlog"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("INFO")
    spark.dataSource.register(BacklogDataSource)
    writers = []
    for run in runs:
        df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", run.get("bootstrap", bootstrap))
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("kafkaConsumer.pollTimeoutMs", "6000").option("fetchOffset.numRetries", "1")
              .options(**run["options"]).load())
        df.explain(True)  # the plans, as a user would print them
        folder = os.path.join(out, run["name"])
        writers.append(df.writeStream.format("parquet").option("path", os.path.join(folder, "parquet"))
                       .option("checkpointLocation", os.path.join(folder, "checkpoint")))
    # From here on every py4j call is logged with its arguments and answers (the user's own
    # .option() calls above would show their values; start_backlog_aware must read none).
    logging.getLogger("py4j").setLevel(logging.DEBUG)
    try:
        ended_as_expected = []
        for writer, run in zip(writers, runs):
            print(f"RUN {run['name']}", flush=True)
            ended_as_expected.append(run_once(writer, run["mode"]) == run["mode"])
    finally:
        spark.stop()
    sys.exit(0 if all(ended_as_expected) else 1)


def run_once(writer, mode: str) -> str:
    """Start ``writer`` backlog-aware; ``"drain"`` if it reached low latency caught up,
    ``"fail"`` if it failed, ``"neither"`` otherwise."""
    from backlog_source import start_backlog_aware

    try:
        handle = start_backlog_aware(writer, "0 seconds", "500 milliseconds")
    except Exception as exc:  # a failure at start is a valid outcome of "fail" too
        print(f"QUERY FAILED AT START: {exc!r}\n{exc}")
        return "fail"
    deadline = time.time() + 180
    try:
        while time.time() < deadline:
            try:
                if handle.await_termination(timeout=0.5):
                    return "neither"
            except Exception as exc:
                print(f"QUERY FAILED: {exc!r}\n{exc}")
                return "fail"
            last = handle.query.lastProgress
            if mode == "drain" and handle.mode == "low-latency" and last and last["numInputRows"] == 0:
                print("LAST PROGRESS: " + json.dumps(last, default=str))
                return "drain"
        return "neither"
    finally:
        handle.stop()


if __name__ == "__main__":
    main()
