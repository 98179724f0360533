"""Cluster mode: a Spark standalone master and two one-core workers on loopback (from the
pyspark package), executors in their own JVMs and Python workers importing the installed
package, Apache Kafka. One run of ``cluster_faults.py``'s scenario, speculation on
throughout: an executor JVM SIGKILLed while its read task of a backlog batch and a speculative
copy of it run, later the other executor's Python workers SIGKILLed while one of them runs a
read task. The query goes on by itself, switches to
low latency once, every record lands exactly once, every partition's backlog finishes once,
and events and traces still arrive. ``benchmarks/executor_faults.py`` times the same
scenario."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from backlog_source.demo.otlp_receiver import OtlpReceiver
from tests.integration.helpers import committed_parquet_files, log_end_offsets
from tests.reliability.cluster_faults import FIRST_HOST, SECOND_HOST, run_executor_faults, standalone_cluster
from tests.reliability.test_crashes import checkpointed_offsets
from tests.wheel.wheel_env import ENV, ensure_installed

pytestmark = pytest.mark.integration

#: Four tasks a batch (speculation needs half of them done, then copies the held one), five
#: backlog batches of 16,000 records: the faults land in the second and third, mid-drain.
PARTITIONS = 4


@pytest.fixture(scope="session")
def wheel_python():
    """The interpreter of a fresh environment with the built wheel installed (not editable),
    as a user's driver and executors would have it (``make test`` builds it first)."""
    return ensure_installed()


def test_executor_faults_and_speculation_on_a_standalone_cluster(broker, topic_name, tmp_path, wheel_python):
    with standalone_cluster(tmp_path, wheel_python) as master, OtlpReceiver() as receiver:
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "cluster-job",
                "OTEL_BSP_SCHEDULE_DELAY": "200"}
        run = run_executor_faults(broker, topic_name, tmp_path, wheel_python, master, partitions=PARTITIONS,
                                  per_partition=20_000, per_batch=16_000, env=otel)
        assert run.returncode == 0, run.stderr[-4000:]  # nobody restarted or nudged the query
        spans = receiver.wait_for(lambda s: {"backlog.phase", "backlog.mode_switch"} <= {x["name"] for x in s}
                                  and sum(x["name"] == "backlog.bucket" for x in s) >= PARTITIONS, timeout=30)

    [done] = [e for e in run.log if e["what"] == "caught up and stopped"]
    assert done["master"] == master
    # Driver and executors imported the installed wheel, not the source tree.
    assert Path(done["driver_module"]).is_relative_to(ENV) and Path(done["executor_module"]).is_relative_to(ENV)
    # The driver, the first worker's executor and the second worker's replacement executor.
    assert len(done["block_managers"]) == 3 and any(SECOND_HOST in b for b in done["block_managers"])
    assert [(t["from_mode"], t["to_mode"]) for t in done["transitions"]] == [("high-throughput", "low-latency")]
    assert done["mode"] == "low-latency"

    # Each fault hit a read task that was running (held), and a batch committed after it.
    jvm, workers = run.kills
    assert (jvm.fault, jvm.host, workers.fault, workers.host) == (
        "executor JVM", SECOND_HOST, "Python workers", FIRST_HOST)
    assert all(k.next_commit_s is not None for k in run.kills)
    backlog_batches = {e["batch"] for e in run.log if e["what"] == "batch" and e["backlog"]}
    assert jvm.batch in backlog_batches  # mid-drain
    attempts = run.events.attempts

    def ends(kill, host, **match):
        [task] = {(m["stage"], m["partition"]) for m in kill.held}
        return [a["end"] for a in attempts if (a["stage"], a["index"]) == task and a["host"] == host
                and all(a[k] == v for k, v in match.items())]

    # (a) The held task's attempt was lost with its executor; its speculative copy, held on
    # the other host until the kill, finished the task.
    assert "ExecutorLostFailure" in ends(jvm, SECOND_HOST), attempts
    assert "Success" in ends(jvm, FIRST_HOST, speculative=True), attempts
    # (b) The held task failed with its Python worker, and another attempt finished it.
    assert [e for e in ends(workers, FIRST_HOST) if e not in ("Success", "TaskKilled")], attempts
    assert "Success" in ends(workers, FIRST_HOST) + ends(workers, SECOND_HOST), attempts
    speculative = [a for a in attempts if a["speculative"]]

    table = pq.ParquetDataset(committed_parquet_files(tmp_path / "parquet")).read(columns=["partition", "offset"])
    pairs = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    expected = sum(log_end_offsets(broker, topic_name).values())
    assert len(pairs) == expected, f"{len(pairs) - expected:+} records against the topic"
    assert len(set(pairs)) == expected, f"{len(pairs) - len(set(pairs))} duplicates"

    # One backlog phase, and each partition's bucket finished once in it: one bucket span a
    # partition, and as many finishes counted in the offset log as there are buckets (a
    # retried or speculative task's second finish event is counted as a duplicate).
    final = checkpointed_offsets(tmp_path / "checkpoint")[-1]
    counts = final["backlog"]["event_counts"]
    assert counts["handled"] + counts["finished_by_position"] == PARTITIONS, counts
    buckets = [s for s in spans if s["name"] == "backlog.bucket"]
    partitions = sorted(int(b["attributes"]["messaging.destination.partition.id"]) for b in buckets)
    assert partitions == list(range(PARTITIONS))
    assert any(b["attributes"]["backlog.finished_by"] == "event" for b in buckets)  # executors' events arrived
    reads = [s for s in spans if s["name"] == "backlog.read"]
    assert reads and all(r["resource"]["service.name"] == "cluster-job" for r in reads)
    assert {r["parent_span_id"] for r in reads} <= {b["span_id"] for b in buckets}
    assert len({s["trace_id"] for s in spans if s["name"] != "backlog.mode_switch"}) == 1
    print(json.dumps({"executors": done["block_managers"], "kills": [k.__dict__ for k in run.kills],
                      "speculative": len(speculative), "event_counts": counts, "seconds": run.seconds,
                      "ends": sorted({a["end"] for a in attempts})}))
