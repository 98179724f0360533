"""Smoke check of the installed wheel, run by ``tests/wheel/wheel_env.py`` with the wheel's
own interpreter from a directory outside the source tree.

It fails (exit status != 0) unless: every module of the installed packages imports; the
``backlog-source`` command and its ``demo`` help work; and a short stream that starts from a
snapshot (``snapshot.path``, the feature a missing subpackage once broke) reads every key of
the snapshot and every record after it, on the embedded broker and a local Spark.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: What site-packages must hold from this distribution: one top-level name.
NAMESPACE = "backlog_source"
#: Names an older wheel installed at the top level (generic; PyPI has an ``events``).
FORMER_TOP_LEVEL = ("backlog_core", "events", "enumerator", "reader")


def check_installed_not_the_tree() -> None:
    import backlog_source

    location = Path(backlog_source.__file__).resolve()
    assert Path(sys.prefix).resolve() in location.parents, f"backlog_source imported from {location}, not the wheel"
    print(f"backlog_source {backlog_source.__version__} from {location.parent}")


def check_one_namespace() -> None:
    """The distribution installs ``backlog_source`` and nothing else at the top level."""
    from importlib.metadata import distribution

    files = distribution("backlog-source").files or []
    top_level = {f.parts[0] for f in files if f.suffix == ".py" and len(f.parts) > 1}
    assert top_level == {NAMESPACE}, f"top-level packages installed: {sorted(top_level)}"
    for name in FORMER_TOP_LEVEL:
        assert importlib.util.find_spec(name) is None, f"{name} is importable at the top level"
    print(f"one namespace: {NAMESPACE}")


def check_every_module_imports() -> None:
    package = importlib.import_module(NAMESPACE)
    count = 0
    for info in pkgutil.walk_packages(package.__path__, f"{NAMESPACE}."):
        importlib.import_module(info.name)
        count += 1
    for layer in ("core", "events", "enumerator", "reader"):
        assert f"{NAMESPACE}.{layer}" in sys.modules, f"{NAMESPACE}.{layer} missing from the wheel"
    print(f"imported {count} modules")


def check_command_line() -> None:
    command = shutil.which("backlog-source")
    assert command and Path(sys.prefix).resolve() in Path(command).resolve().parents, command
    for args in (["--help"], ["demo", "--help"], ["snapshot", "--help"]):
        result = subprocess.run([command, *args], capture_output=True, text=True, check=True)
        assert "usage: backlog-source" in result.stdout, result.stdout
    print("backlog-source --help, demo --help, snapshot --help: ok")


def check_a_stream_from_a_snapshot() -> None:
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource
    from backlog_source.core.snapshot_manifest import load_manifest
    from backlog_source.demo.embedded_broker import embedded_broker
    from backlog_source.demo.topics import create_topic, produce

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # The pip-only path (no Java build tools): the embedded Tansu broker from the 'demo' extra,
    # whose producers seal their partitions (seal_partitions).
    with embedded_broker() as broker, tempfile.TemporaryDirectory() as work:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "customers", 2)
        produce(bootstrap, "customers", ((i % 2, f"k{i % 50}".encode(), f"v{i}".encode()) for i in range(500)), seal=True)
        snapshot = Path(work) / "snapshot"
        subprocess.run(["backlog-source", "snapshot", "--bootstrap-servers", bootstrap, "--topic", "customers",
                        "--path", str(snapshot)], check=True)
        snapshot_rows = sum(p.rows for p in load_manifest(str(snapshot))[2].partitions.values())
        tail = produce(bootstrap, "customers", ((i % 2, f"new{i}".encode(), b"x") for i in range(20)), seal=True)

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            spark.dataSource.register(BacklogDataSource)
            df = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", "customers").option("snapshot.path", str(snapshot)).load())
            out = Path(work) / "out"
            query = (df.writeStream.format("parquet").option("path", str(out))
                     .option("checkpointLocation", str(Path(work) / "ckpt")).trigger(availableNow=True).start())
            query.awaitTermination(300)
            assert query.exception() is None, query.exception()
            rows = spark.read.parquet(str(out)).collect()
        finally:
            spark.stop()
    keys = {row.key for row in rows}
    assert {f"k{i}".encode() for i in range(50)} <= keys, sorted(keys)[:10]
    assert {f"new{i}".encode() for i in range(20)} <= keys
    # The snapshot's rows (latest per key and partition, the broker helper's seal records
    # included), then every record after it.
    assert len(rows) == snapshot_rows + tail, (len(rows), snapshot_rows, tail)
    print(f"stream from snapshot.path: {len(rows)} rows ({snapshot_rows} from the snapshot, {tail} after it)")


if __name__ == "__main__":
    check_installed_not_the_tree()
    check_one_namespace()
    check_every_module_imports()
    check_command_line()
    check_a_stream_from_a_snapshot()
    print("wheel smoke check passed")
