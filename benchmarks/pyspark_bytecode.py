"""How much of a Python streaming query's start-up is PySpark compiling itself.

Why: ``query_startup.py`` measured ~1.1 s from ``start()`` to the first trigger for a
trivial Python data source (0.14 s for the JVM ``rate`` source), and timestamps written by
the source showed where: the driver's ``python_streaming_source_runner`` process starts
~0.1 s after ``start()`` but unpickles the data source only ~1.0 s later. Spark puts
``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's ``PYTHONPATH``, and
that zip holds sources only: Python cannot cache bytecode for a zip, so every fresh worker
compiles the PySpark modules it imports, every time. The streaming source runner is a
fresh process per query (and per restart of a query).

This benchmark shows the share without changing anything installed:

1. the import of the runner module in a fresh process, from the zip as Spark ships it,
   from a copy of the zip that also holds bytecode (unchecked hash-based ``.pyc`` next to
   each ``.py``, which zipimport reads), and from site-packages (cached bytecode);
2. ``query_startup.py`` twice, in separate Spark sessions: with the installed PySpark's
   ``SPARK_HOME``, then with ``SPARK_HOME`` pointing at a mirror of it (symlinks) whose only
   difference is that zip with bytecode.

It is a finding about PySpark, not a setting of this source: the README states it under
"Known limits" and the benchmarks that time queries keep Spark as it is installed.

Usage::

    .venv/bin/python -m benchmarks.pyspark_bytecode [--rounds 5] [--imports 5]

Writes ``benchmarks/results/pyspark_bytecode/pyspark_bytecode.json`` and ``.md`` (and the two
``query_startup_*`` result files it reads).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness.pyspark_layout import RUNNER_MODULE, installed_spark_home, spark_worker_path
from benchmarks.harness.results import machine, results_folder, write_results
from benchmarks.harness.stats import fmt, median_and_spread, with_spread
from tests.support.spark_home import mirror_with_bytecode


def import_seconds(python_path: str | None, times: int) -> dict:
    """Wall time of a fresh interpreter importing the runner module; median and spread."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if python_path:
        env["PYTHONPATH"] = python_path
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {RUNNER_MODULE}"], env=env, check=True)
        samples.append(time.perf_counter() - started)
    return median_and_spread(samples)


def query_startup(rounds: int, name: str, spark_home: Path | None) -> dict:
    env = dict(os.environ)
    if spark_home is not None:
        env["SPARK_HOME"] = str(spark_home)
    subprocess.run([sys.executable, "-m", "benchmarks.query_startup", "--rounds", str(rounds), "--results-name", name],
                   env=env, check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads((results_folder("query_startup") / f"{name}.json").read_text())["summary"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of query_startup.py per SPARK_HOME")
    parser.add_argument("--imports", type=int, default=5, help="fresh-process imports per variant")
    args = parser.parse_args()

    home = installed_spark_home()
    with tempfile.TemporaryDirectory(prefix="pyspark-bytecode-") as scratch:
        mirror = mirror_with_bytecode(home, Path(scratch))
        imports = {
            "pyspark.zip as shipped": import_seconds(os.pathsep.join(spark_worker_path(home)), args.imports),
            "pyspark.zip with bytecode": import_seconds(os.pathsep.join(spark_worker_path(mirror)), args.imports),
            "site-packages": import_seconds(None, args.imports),
        }
        startup = {
            "shipped": query_startup(args.rounds, "query_startup_shipped_zip", None),
            "bytecode": query_startup(args.rounds, "query_startup_bytecode_zip", mirror),
        }

    command = " ".join([".venv/bin/python -m benchmarks.pyspark_bytecode", *sys.argv[1:]])

    kinds = list(startup["shipped"])
    write_results("pyspark_bytecode", "pyspark_bytecode", {"command": command, "machine": machine(), "imports_s": imports,
                                       "start_to_first_trigger_s": startup}, [
        "# PySpark's start-up: compiling pyspark.zip in every fresh Python worker", "",
        f"Command: `{command}`", "",
        f"Fresh interpreter importing `{RUNNER_MODULE}` (the driver-side process of every Python streaming "
        f"query), median (min-max) of {args.imports}, seconds:", "",
        "| imported from | seconds |", "| --- | ---: |",
        *(f"| {name} | {with_spread(figure)} |" for name, figure in imports.items()), "",
        f"`query_startup.py --rounds {args.rounds}` (AvailableNow into noop, Spark's defaults) with the installed "
        "SPARK_HOME and with a mirror of it whose pyspark.zip holds bytecode, start() -> first trigger, seconds:", "",
        "| source | pyspark.zip as shipped | with bytecode | saved |", "| --- | ---: | ---: | ---: |",
        *(f"| {kind} | {with_spread(startup['shipped'][kind]['start_to_first_trigger_s'])} | "
          f"{with_spread(startup['bytecode'][kind]['start_to_first_trigger_s'])} | "
          f"{fmt(startup['shipped'][kind]['start_to_first_trigger_s']['median'] - startup['bytecode'][kind]['start_to_first_trigger_s']['median'])} |"
          for kind in kinds),
    ])


if __name__ == "__main__":
    main()
