"""Fixtures the reliability tests share: what is costly to start is started once a session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from backlog_source.demo.apache_kafka import free_port


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """A local Spark Connect server from the pyspark package (``sc://`` URL), one for the
    session: test_spark_connect.py and test_connect_stop.py each run their clients in a
    process of their own, and every client gets a Connect session of its own on it (its own
    registered data source, listeners and queries), so they share the server's start (~15 s
    of a JVM on two cores) and nothing else. Its log: ``connect-server.log`` under the
    session's temporary folder ``connect``."""
    port = free_port()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    log = open(tmp_path_factory.mktemp("connect") / "connect-server.log", "w")
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
