"""`backlog-source demo` end to end, as a newcomer runs it, with small sizes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from tests.integration.helpers import committed_parquet_files, wait_for

pytestmark = pytest.mark.integration


def test_demo_drains_switches_and_writes_exactly_the_produced_records(tmp_path):
    out = tmp_path / "demo-output"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKLOG_", "OTEL_"))}
    env["BACKLOG_LIVE_RATE"] = "50"  # settings also come from BACKLOG_* variables
    completed = subprocess.run(
        [sys.executable, "-m", "backlog_source.cli", "demo", "--backlog-records", "6000", "--partitions", "3",
         "--live-seconds", "3", "--backlog-max-offsets-per-trigger", "2500", "--max-offsets-per-trigger", "1000",
         "--low-latency-interval", "500 milliseconds", "--no-live-view", "--output", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "exactly once" in completed.stdout

    assert (out / "timeline.png").stat().st_size > 10_000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batches"]["high-throughput"] >= 2 and summary["batches"]["low-latency"] >= 1
    assert summary["switch_method"] == "in-place" and summary["switch_effective_seconds"] is not None
    assert summary["live_records_measured"]["low-latency"] > 0

    # The Parquet output, read independently of Spark through the sink's commit log, holds
    # exactly the produced records: 6,000 seeded + the live ones, once each (Apache Kafka:
    # no seal records).
    table = pq.ParquetDataset(committed_parquet_files(out / "parquet")).read(columns=["partition", "offset", "key"])
    pairs = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    assert len(pairs) == len(set(pairs)) == summary["records_read_range"] == summary["records_produced"]
    keys = table.column("key").to_pylist()
    assert sum(1 for k in keys if k.startswith(b"seed-")) == 6000
    live = sum(1 for k in keys if k.startswith(b"live-"))
    assert live > 0 and len(pairs) == 6000 + live

    spans = [json.loads(line) for line in (out / "spans.jsonl").read_text().splitlines()]
    assert {"backlog.phase", "backlog.bucket", "backlog.read", "backlog.mode_switch"} <= {s["name"] for s in spans}

    # The metrics the picture draws, as exported: per-partition lag and the backlog state,
    # caught up (0, and no records pending) in the last export before the query stopped.
    points = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    pending = [p for p in points if p["name"] == "backlog.source.pending_records"]
    assert {p["attributes"]["messaging.destination.partition.id"] for p in pending} == {"0", "1", "2"}
    state = [p for p in points if p["name"] == "backlog.source.processing_backlog"]
    assert state and state[-1]["value"] == 0
    last_export = max(p["at_ns"] for p in pending)
    assert sum(p["value"] for p in pending if p["at_ns"] == last_export) <= 50  # live records only
    switched = [p for p in points if p["name"] == "backlog.source.mode_switches"]
    assert any(p["attributes"]["backlog.mode"] == "low-latency" and p["value"] >= 1 for p in switched)


def start_demo(tmp_path, *args: str) -> tuple[subprocess.Popen, int]:
    """``backlog-source demo`` with ``args`` in a session of its own, as from a terminal; returns
    it and its broker's port once it printed them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BACKLOG_", "OTEL_"))}
    demo = subprocess.Popen(
        [sys.executable, "-m", "backlog_source.cli", "demo", *args, "--no-live-view", "--output", str(tmp_path / "out")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    lines = []
    for line in demo.stdout:
        lines.append(line)
        found = re.search(r"local broker at 127\.0\.0\.1:(\d+)", line)
        if found:
            return demo, int(found.group(1))
    raise AssertionError(f"the demo ended before starting its broker: {''.join(lines)[-2000:]}")


def wait_until_stopped(demo: subprocess.Popen, port: int, exit_code: int) -> None:
    """Wait for the demo to end with ``exit_code``, having said it stops everything, without a
    traceback; then for its broker to stop listening."""
    out, err = demo.communicate(timeout=120)
    assert demo.returncode == exit_code, f"stdout: {out[-2000:]}\nstderr: {err[-3000:]}"
    assert "stopping: the producer, the query" in out
    assert "Traceback" not in err, err[-3000:]

    def broker_gone() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) != 0

    wait_for(broker_gone, 30, "the demo's Kafka broker to stop")


def test_ctrl_c_stops_everything_in_order(tmp_path):
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group. It lands after
    the second of six backlog batches (60,000 records at 10,000 a batch): mid-backlog, with a
    batch running; a bigger backlog only took longer to seed."""
    demo, port = start_demo(tmp_path, "--backlog-records", "60000", "--partitions", "2",
                            "--backlog-max-offsets-per-trigger", "10000")
    for line in demo.stdout:  # wait until the query is running, mid-backlog
        if line.startswith("batch 1:"):
            break
    os.killpg(demo.pid, signal.SIGINT)
    wait_until_stopped(demo, port, 130)
    # The demo's Spark JVM (its own session, so SIGINT did not reach it) was stopped too; it
    # exits shortly after the demo's last line.
    def spark_gone() -> bool:
        leftover = subprocess.run(["pgrep", "-f", "spark.app.name=backlog-source-demo"], capture_output=True, text=True)
        return leftover.stdout == ""

    wait_for(spark_gone, 30, "the demo's Spark JVM to exit")


def test_kill_before_spark_started_stops_the_broker_it_started(tmp_path):
    """``kill PID`` (SIGTERM, also what supervisors and ``timeout`` send) while the demo seeds its
    backlog: it unwinds what it started. Left to Python's default, SIGTERM ended the demo on the
    spot and its broker, in a session of its own, ran on with its log dir. The orderly stop
    once Spark runs is Ctrl-C's (above; SIGTERM takes the same handler: tests/unit)."""
    demo, port = start_demo(tmp_path, "--backlog-records", "60000", "--partitions", "2")
    demo.send_signal(signal.SIGTERM)  # the demo's process only, as `kill` does
    wait_until_stopped(demo, port, 128 + signal.SIGTERM)
