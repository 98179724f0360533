"""Spark Connect: the source and the listener work through a local Connect server (from the
pyspark package); start_backlog_aware says precisely why it cannot (see the README)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from tests.integration.helpers import log_end_offsets, make_topic
from tests.reliability.test_cluster import free_port

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).with_name("connect_client.py")


@pytest.fixture
def connect_server(tmp_path):
    port = free_port()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    log = open(tmp_path / "connect-server.log", "w")
    server = subprocess.Popen(
        [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", "local[2]",
         "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.ui.enabled=false", "spark-internal"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_source_and_listener_work_through_spark_connect(broker, topic_name, tmp_path, connect_server):
    make_topic(broker, topic_name, 2, per_partition=3_000)
    result = subprocess.run([sys.executable, str(CLIENT), connect_server, broker.bootstrap_servers, topic_name,
                             str(tmp_path)], capture_output=True, text=True, timeout=400, cwd=CLIENT.parents[2])
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert result.returncode == 0 and lines, result.stderr[-4000:]
    report = json.loads(lines[0].removeprefix("REPORT "))
    assert report["session"].startswith("pyspark.sql.connect")
    expected = sum(log_end_offsets(broker, topic_name).values())
    assert report["rows"] == report["distinct"] == expected
    flags = report["listener_flags"]
    assert flags[0][1] is True and flags[-1][1] is False and all(has_trace for _, _, has_trace in flags)
    assert "Spark Connect writers cannot be inspected" in report["start_backlog_aware"]
