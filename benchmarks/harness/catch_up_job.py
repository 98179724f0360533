"""The catch-up benchmark's driver program, for the kill -9 measurement: one query from a
Kafka topic on an existing checkpoint, run until told to stop, as a user's job runs.

    python -m benchmarks.harness.catch_up_job SPEC.json

``SPEC.json`` names the broker, topic, source (``backlog`` or ``kafka``; or ``trivial_python``,
the one-row Python source of :mod:`benchmarks.harness.trivial_source`: a restart's floor),
its options, the trigger, the sink (``parquet``, ``noop``, or ``arrow``: a ``foreachBatch``
calling ``toArrow()``), the checkpoint and output folders, Spark's Kafka
connector jars, and ``work``: a folder this job writes to. There it appends every progress
event as a JSON line to ``progress.jsonl`` (a restarted job continues the file), writes
``started.json`` just before ``start()`` (wall-clock seconds: ``began``, when :func:`main`
began; ``session_ready``, the session built and the source registered; ``loaded``, after
``load()``; ``start_called``), and stops cleanly once the file ``stop`` exists. The benchmark
starts it with ``start_new_session=True`` so that one SIGKILL to the process group kills the
job whole (this process, its JVM and the JVM's Python workers). Spark's defaults.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def to_arrow(batch_df, batch_id) -> None:
    batch_df.select("key", "value", "partition", "offset").toArrow()


def main() -> None:
    began = time.time()
    spec = json.loads(Path(sys.argv[1]).read_text())
    work = Path(spec["work"])
    from benchmarks.harness.broker_and_spark import spark_session
    from benchmarks.harness.progress import ProgressLog

    spark = spark_session(jars=spec["jars"] or None)
    session_ready = time.time()
    progress_file = open(work / "progress.jsonl", "a")

    def record(progress: dict) -> None:
        progress_file.write(json.dumps(progress) + "\n")
        progress_file.flush()

    spark.streams.addListener(ProgressLog(on_event=record, keep=False).listener)
    if spec["source"] == "trivial_python":
        from benchmarks.harness.trivial_source import register_trivial_source

        register_trivial_source(spark)
        df = spark.readStream.format("trivial_python").load()
    else:
        df = (spark.readStream.format(spec["source"]).option("kafka.bootstrap.servers", spec["bootstrap"])
              .option("subscribe", spec["topic"]).option("startingOffsets", "earliest").options(**spec["options"])
              .load())
    loaded = time.time()
    writer = df.writeStream.option("checkpointLocation", spec["checkpoint"]).trigger(processingTime=spec["trigger"])
    if spec["sink"] == "noop":
        writer = writer.format("noop")
    elif spec["sink"] == "parquet":
        writer = writer.format("parquet").option("path", spec["output"])
    else:
        writer = writer.foreachBatch(to_arrow)
    (work / "started.json").write_text(json.dumps({"began": began, "session_ready": session_ready, "loaded": loaded,
                                                   "start_called": time.time()}))
    query = writer.start()
    while not (work / "stop").exists():
        if query.awaitTermination(1.0):
            print(f"the query terminated: {query.exception()}", file=sys.stderr)
            sys.exit(3)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
