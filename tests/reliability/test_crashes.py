"""kill -9 of the driver (Python and its JVM) at four points; every restart resumes from the
checkpoint. Every record (60,000 seeded, live ones beside them) lands in the Parquet sink
exactly once, and the backlog phase keeps its source id, boundaries and trace across all
restarts.

The points: mid-backlog (a planned batch's tasks reading, nothing committed), after the batch
that reached every boundary committed (nothing has settled it yet), around the in-place switch,
and in low latency right after a batch commit. A kill between two low-latency batches was a
fifth point; the kill right after a commit is the stricter case of it (a committed batch
whose progress the driver was still handling) and stays. Six backlog batches of 10,000: the
mid-backlog kill lands in the third, with backlog still ahead of it (the million records of
old, at 150,000 a batch, and later 240,000 at 40,000, bought no more than that and cost the
suite's time; benchmarks/catch_up_budgets.py measures kill -9 recovery on big data)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from backlog_source.demo.traffic import LiveProducer
from tests.integration.helpers import committed_parquet_files, log_end_offsets, make_topic

pytestmark = pytest.mark.integration

JOB = Path(__file__).with_name("crash_job.py")
POINTS = ("mid_backlog", "after_boundary", "during_switch", "after_commit")
PARTITIONS, PER_PARTITION, PER_BACKLOG_BATCH = 4, 15_000, 10_000


def run_job(broker, topic: str, out: Path, point: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(JOB), broker.bootstrap_servers, topic, str(out), "--crash-at", point,
         "--backlog-max-offsets-per-trigger", str(PER_BACKLOG_BATCH)],
        cwd=JOB.parents[2], capture_output=True, text=True, timeout=400, start_new_session=True,
    )


def job_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "job.log").read_text().splitlines()]


def checkpointed_offsets(checkpoint: Path) -> list[dict]:
    """The source's offset dict of every batch in the offset log, in batch order."""
    entries = sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return [json.loads(p.read_text().splitlines()[2]) for p in entries]


def test_kill_minus_nine_at_four_points_loses_and_duplicates_nothing(broker, topic_name, tmp_path):
    make_topic(broker, topic_name, PARTITIONS, per_partition=PER_PARTITION, value_size=20)
    live = LiveProducer(broker.bootstrap_servers, topic_name, PARTITIONS, rate=300).start()
    try:
        for point in POINTS:
            result = run_job(broker, topic_name, tmp_path, point)
            kills = [e for e in job_log(tmp_path) if e["what"] == "SIGKILL" and e["crash_at"] == point]
            assert result.returncode == -signal.SIGKILL and len(kills) == 1, (
                f"{point}: exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    finally:
        live.stop()
    assert live.failed == 0
    final = run_job(broker, topic_name, tmp_path, "none")
    assert final.returncode == 0, final.stderr[-3000:]

    expected = sum(log_end_offsets(broker, topic_name).values())
    table = pq.ParquetDataset(committed_parquet_files(tmp_path / "parquet")).read(columns=["partition", "offset"])
    pairs = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    assert expected >= PARTITIONS * PER_PARTITION
    assert len(pairs) == expected, f"{len(pairs) - expected:+} records against the topic"
    assert len(set(pairs)) == expected, f"{len(pairs) - len(set(pairs))} duplicates"

    # One source id throughout. The first backlog phase survived the crashes inside it (one
    # trace, boundaries that never moved); every restart after it that found lag (live
    # traffic went on while the job was down) began a phase of its own. Within any phase a
    # bucket's boundary never moved.
    offsets = checkpointed_offsets(tmp_path / "checkpoint")
    assert len({o["source_id"] for o in offsets}) == 1
    phases: dict[str, dict[str, int]] = {}
    for offset in offsets:
        backlog = offset["backlog"]
        tracked = {**backlog["finishing"].get(topic_name, {}), **backlog["pending"].get(topic_name, {})}
        if not tracked:
            continue
        boundaries = phases.setdefault(offset["trace"]["traceparent"], {})
        for partition, boundary in tracked.items():
            assert boundaries.setdefault(partition, boundary) == boundary, (partition, offset["trace"])
    first_phase = next(iter(phases.values()))
    assert len(first_phase) == PARTITIONS and all(b >= PER_PARTITION for b in first_phase.values())
    assert len(phases) >= 2  # restarts in low latency found lag: new phases
    assert not offsets[-1]["processing_backlog"]
