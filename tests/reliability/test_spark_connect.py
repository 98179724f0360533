"""Spark Connect: the source, the listener, start_backlog_aware and install(allow_restart=True)
(both by restart, since a Connect client has no JVM objects to change in place) through a
local Connect server from the pyspark package (``connect_server``, shared with
test_connect_stop.py: tests/reliability/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backlog_source.metrics import names
from tests.integration.helpers import log_end_offsets, make_topic

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).with_name("connect_client.py")


def test_source_listener_start_backlog_aware_and_install_work_through_spark_connect(broker, topic_name, tmp_path,
                                                                                   connect_server, receiver):
    make_topic(broker, topic_name, 2, per_partition=3_000)
    switched, installed = f"{topic_name}-switched", f"{topic_name}-installed"
    make_topic(broker, switched, 2, per_partition=5_000)  # 10k records at 2k per batch: a backlog
    make_topic(broker, installed, 2, per_partition=5_000)
    # The client's metrics (install turns them on when the environment asks) go to an
    # in-process OTLP receiver: the backlog metrics are exported from a Connect client too.
    metrics_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_METRICS_EXPORTER": "otlp",
                   "OTEL_TRACES_EXPORTER": "none", "OTEL_METRIC_EXPORT_INTERVAL": "1000"}
    result = subprocess.run([sys.executable, str(CLIENT), connect_server, broker.bootstrap_servers, topic_name,
                             switched, installed, str(tmp_path)], capture_output=True, text=True, timeout=600,
                            cwd=CLIENT.parents[2], env={**os.environ, **metrics_env})
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert result.returncode == 0 and lines, result.stderr[-4000:]
    report = json.loads(lines[0].removeprefix("REPORT "))
    assert report["session"].startswith("pyspark.sql.connect")
    expected = sum(log_end_offsets(broker, topic_name).values())
    assert report["rows"] == report["distinct"] == expected
    flags = report["listener_flags"]  # the whole backlog in one AvailableNow batch: no backlog left after it
    assert flags and flags[-1][1] is False and all(has_trace for _, _, has_trace in flags)
    # start_backlog_aware under Connect: high-throughput first, then one restart-method switch.
    assert "switch_method='in-place' is impossible under Spark Connect" in (report["in_place_refusal"] or "")
    assert report["switch_method"] == "restart" and report["initial_mode"] == "high-throughput"
    assert report["transitions"] == [["high-throughput", "low-latency", "restart"]]
    assert report["switched_rows"] == report["switched_distinct"] == sum(log_end_offsets(broker, switched).values())
    # install(allow_restart=True) under Connect: the plain start() switched by restart into a
    # new run (the running one), the rate query never adopted, every record written once.
    assert report["installed"] is not None, "install() never adopted the backlog query"
    assert report["installed"]["mode"] == "low-latency" and report["installed"]["method"] == "restart", report
    assert report["installed"]["new_run"] and report["installed"]["running"], report
    assert not report["installed"]["other_adopted"], report
    # 10,000 records of ~30 B under backlog.maxBytesPerTrigger=64k: several batches bounded by bytes.
    assert report["installed"]["bounded_by"].count("bytes") >= 2, report["installed"]
    assert report["installed_rows"] == report["installed_distinct"] == sum(log_end_offsets(broker, installed).values())
    # Its metrics reached the receiver: the backlog per partition, and the switch.
    assert report["metrics_flushed"], report
    mine = [p for p in receiver.points if p["attributes"].get(names.QUERY_ID) == report["installed_query_id"]]
    assert {p["name"] for p in mine} >= {names.PENDING_RECORDS.name, names.PROCESSING_BACKLOG.name,
                                         names.MODE_SWITCHES.name}, sorted({p["name"] for p in mine})
    assert max(p["value"] for p in mine if p["name"] == names.MODE_SWITCHES.name) >= 1
