"""What a streaming query costs before its first batch: format("backlog") against a trivial
Python data source and Spark's JVM ``rate`` source.

Why: ``snapshot_bootstrap.py`` and ``read_throughput.py`` time queries from ``start()``, so
a fixed start-up cost caps their ratios. This separates it: each query is
``Trigger.AvailableNow`` into ``noop`` on a fresh checkpoint; "start -> first trigger" is
from ``start()`` to the first progress event's trigger timestamp, "total" to termination.

* ``backlog``: this source on an 8-partition topic of 800 records;
* ``trivial_python``: a Python ``DataSourceStreamReader`` that returns constant offsets
  and one row: PySpark's own cost of a Python streaming source;
* ``rate``: Spark's JVM rate source: Spark without Python.

Also this source's own share: a fresh interpreter with Spark's worker path (``pyspark.zip``
first) imports the runner module, then ``backlog_source.datasource`` and
``backlog_source.stream_reader`` (what unpickling the source and asking it for its stream reader
cost that process), timed from inside, ``--rounds`` times.

Spark's default settings, one warm-up query of each, then ``--rounds`` interleaved rounds;
median and spread (min-max).

Usage::

    .venv/bin/python -m benchmarks.query_startup [--rounds 5]

Writes ``benchmarks/results/query_startup/query_startup.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from backlog_source.demo.topics import create_topic, produce
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.pyspark_layout import RUNNER_MODULE, installed_spark_home, spark_worker_path
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.runs import backlog_stream, first_trigger_and_total_s
from benchmarks.harness.stats import median_and_spread, with_spread
from benchmarks.harness.trivial_source import register_trivial_source

KINDS = ("backlog", "trivial_python", "rate")
_TIME_IMPORT = f"""
import time
import {RUNNER_MODULE}
started = time.perf_counter()
import backlog_source.datasource
import backlog_source.stream_reader
print(time.perf_counter() - started)
"""


def source_import_seconds() -> float:
    """Seconds a fresh interpreter on Spark's Python worker path (``$SPARK_HOME/python/lib``
    zips first, as Spark starts the driver's streaming source runner) spends importing this
    source's modules after the runner's own."""
    spark_home = Path(os.environ["SPARK_HOME"]) if os.environ.get("SPARK_HOME") else installed_spark_home()
    path = [*spark_worker_path(spark_home), str(Path(__file__).resolve().parents[1])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    out = subprocess.run([sys.executable, "-c", _TIME_IMPORT], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def timed(spark, kind: str, bootstrap: str) -> dict:
    if kind == "backlog":
        df = backlog_stream(spark, bootstrap, "startup")
    elif kind == "trivial_python":
        df = spark.readStream.format("trivial_python").load()
    else:
        df = spark.readStream.format("rate").option("rowsPerSecond", 10).load()
    first_trigger, total = first_trigger_and_total_s(df)
    return {"start_to_first_trigger_s": first_trigger, "total_s": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--results-name", default="query_startup",
                        help="file name of the results (pyspark_bytecode.py runs this twice)")
    args = parser.parse_args()

    with kafka_and_spark(warm_up_query=False) as bench:
        create_topic(bench.bootstrap, "startup", 8)
        produce(bench.bootstrap, "startup", ((i % 8, None, b"x") for i in range(800)))
        register_trivial_source(bench.spark)
        for kind in KINDS:
            timed(bench.spark, kind, bench.bootstrap)  # warm-up
        runs: dict[str, list[dict]] = {kind: [] for kind in KINDS}
        imports: list[float] = []
        for _ in range(args.rounds):
            for kind in KINDS:
                runs[kind].append(timed(bench.spark, kind, bench.bootstrap))
            imports.append(source_import_seconds())

    summary = {kind: {key: median_and_spread([r[key] for r in rs]) for key in ("start_to_first_trigger_s", "total_s")}
               for kind, rs in runs.items()}
    command = " ".join([".venv/bin/python -m benchmarks.query_startup", *sys.argv[1:]])

    spark_home = os.environ.get("SPARK_HOME", "(the installed pyspark package)")
    source_import = median_and_spread(imports)
    write_results("query_startup", args.results_name, {"command": command, "machine": machine(), "spark_home": spark_home, "runs": runs,
                                      "summary": summary, "source_import_s": imports,
                                      "source_import": source_import}, [
        "# Query start-up", "", f"Command: `{command}`", "",
        f"`Trigger.AvailableNow` into `noop`, Spark's defaults, a warm-up query of each, median (min-max) of "
        f"{args.rounds} interleaved rounds, seconds. SPARK_HOME: {spark_home}.", "",
        "| source | start() -> first trigger | start() -> terminated |", "| --- | ---: | ---: |",
        *(f"| {kind} | {with_spread(summary[kind]['start_to_first_trigger_s'])} | {with_spread(summary[kind]['total_s'])} |"
          for kind in KINDS),
        "", f"Importing this source's modules in a fresh interpreter on Spark's worker path, after the runner "
            f"module (what unpickling the source adds to the driver's runner process): {with_spread(source_import, '.3f')} s.",
    ])


if __name__ == "__main__":
    main()
