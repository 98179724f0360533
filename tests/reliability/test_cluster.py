"""Cluster mode: a Spark standalone master and worker on loopback (from the pyspark
package), executors in their own JVM and Python workers importing the installed package.
The mode-switch scenario passes; events and traces still arrive."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from backlog_source.demo.apache_kafka import free_port
from backlog_source.demo.otlp_receiver import OtlpReceiver
from tests.integration.helpers import committed_parquet_files, log_end_offsets, make_topic, wait_for
from tests.reliability.test_crashes import JOB, job_log
from tests.wheel.wheel_env import ENV, ensure_installed

pytestmark = pytest.mark.integration



def spark_class(python: Path) -> Path:
    """``bin/spark-class`` of the pyspark installed for ``python``: the master and worker must
    run the driver's Spark version (the wheel's environment picks its own pyspark)."""
    home = subprocess.run([str(python), "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return Path(home) / "bin" / "spark-class"


@pytest.fixture(scope="session")
def wheel_python():
    """The interpreter of a fresh environment with the built wheel installed (not editable),
    as a user's driver and executors would have it (``make test`` builds it first)."""
    return ensure_installed()


@pytest.fixture
def standalone_cluster(tmp_path, wheel_python):
    """``spark://`` URL of a master and one worker (2 cores, 2 GiB), stopped afterwards.
    Executors run the installed wheel's interpreter."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1",
           "PYSPARK_PYTHON": str(wheel_python), "SPARK_WORKER_DIR": str(tmp_path / "work")}
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("master", "worker")}
    launcher = str(spark_class(wheel_python))
    master = subprocess.Popen([launcher, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())],
                              env=env, stdout=logs["master"], stderr=subprocess.STDOUT)
    worker = subprocess.Popen([launcher, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                               "--cores", "2", "--memory", "2g", "--webui-port", str(free_port()),
                               "--work-dir", str(tmp_path / "work")],
                              env=env, stdout=logs["worker"], stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "Successfully registered with master" in (tmp_path / "worker.log").read_text(), 90,
                 "the worker to register with the master")
        yield url
    finally:
        for process in (worker, master):
            process.terminate()
        for process in (worker, master):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs.values():
            log.close()


def test_mode_switch_scenario_on_a_standalone_cluster(broker, topic_name, tmp_path, standalone_cluster, wheel_python):
    make_topic(broker, topic_name, 3, per_partition=60_000)
    with OtlpReceiver() as receiver:
        env = {**os.environ, "JOB_MASTER": standalone_cluster, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
               "OTEL_SERVICE_NAME": "cluster-job", "OTEL_BSP_SCHEDULE_DELAY": "200"}
        env.pop("PYTHONPATH", None)
        started = time.time()
        # The driver program runs on the installed wheel too, from outside the source tree.
        result = subprocess.run([str(wheel_python), str(JOB), broker.bootstrap_servers, topic_name, str(tmp_path),
                                 "--crash-at", "none"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, result.stderr[-4000:]
        spans = receiver.wait_for(
            lambda s: {"backlog.phase", "backlog.read", "backlog.mode_switch"} <= {x["name"] for x in s}, timeout=30)

    [done] = [e for e in job_log(tmp_path) if e["what"] == "caught up and stopped"]
    assert done["master"] == standalone_cluster
    # Driver and executors imported the installed wheel, not the source tree.
    assert Path(done["driver_module"]).is_relative_to(ENV) and Path(done["executor_module"]).is_relative_to(ENV)
    assert len(done["block_managers"]) >= 2  # the driver and at least one executor JVM
    assert [(t["from_mode"], t["to_mode"]) for t in done["transitions"]] == [("high-throughput", "low-latency")]
    assert done["mode"] == "low-latency"

    pairs = []
    import pyarrow.parquet as pq

    table = pq.ParquetDataset(committed_parquet_files(tmp_path / "parquet")).read(columns=["partition", "offset"])
    pairs = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    assert len(pairs) == len(set(pairs)) == sum(log_end_offsets(broker, topic_name).values())

    mine = [s for s in spans if s["start_ns"] >= started * 1e9 - 5e9]
    buckets = [s for s in mine if s["name"] == "backlog.bucket"]
    assert any(b["attributes"]["backlog.finished_by"] == "event" for b in buckets)  # executors' events arrived
    reads = [s for s in mine if s["name"] == "backlog.read"]
    assert reads and all(r["resource"]["service.name"] == "cluster-job" for r in reads)
    assert {r["parent_span_id"] for r in reads} <= {b["span_id"] for b in buckets}
    assert len({s["trace_id"] for s in mine if s["name"] != "backlog.mode_switch"}) == 1
    print(json.dumps({"executors": done["block_managers"]}))
