"""Snapshots of a real topic on Apache Kafka: the state equals a replay of the log."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from backlog_source.core.errors import SnapshotError
from backlog_source.core.snapshot_manifest import load_manifest
from backlog_source.snapshot import take_snapshot
from tests.integration.helpers import log_end_offsets, make_topic, produce, published_events
from tests.support.snapshots import read_partition

pytestmark = pytest.mark.integration


def updates(seed: int, count: int, keys: int, partitions: int):
    """(partition, key, value) updates; about one in eight is a delete (null value). A key
    always goes to the same partition, as Kafka's partitioner would send it."""
    rng = random.Random(seed)
    for n in range(count):
        key = rng.randrange(keys)
        value = None if rng.random() < 0.125 else f"v{n}".encode()
        yield key % partitions, f"k{key}".encode(), value


def replay(records) -> dict[tuple[int, bytes], bytes]:
    """(partition, key) -> latest value, replaying the whole log."""
    state: dict[tuple[int, bytes], bytes] = {}
    for partition, key, value in records:
        if value is None:
            state.pop((partition, key), None)
        else:
            state[(partition, key)] = value
    return state


def snapshot_state(path: str) -> tuple[dict[bytes, bytes], object]:
    fs, root, manifest = load_manifest(path)
    state = {}
    for partition in manifest.partitions:
        for row in read_partition(fs, root, manifest, partition).to_pylist():
            assert (partition, row["key"]) not in state and row["partition"] == partition
            state[(partition, row["key"])] = row["value"]
    return state, manifest


def test_snapshot_holds_the_latest_value_per_key_and_the_log_offset(broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 3)
    produced = list(updates(1, 20_000, 2_000, 3))
    produce(broker.bootstrap_servers, topic_name, produced)
    manifest = take_snapshot({"kafka.bootstrap.servers": broker.bootstrap_servers}, topic_name, str(tmp_path / "s"))
    state, loaded = snapshot_state(str(tmp_path / "s"))
    assert state == replay(produced)
    assert loaded == manifest
    assert {p: s.log_offset for p, s in manifest.partitions.items()} == log_end_offsets(broker, topic_name)
    assert sum(s.rows for s in manifest.partitions.values()) == len(state)


def test_cli_publishes_a_new_snapshot_and_a_failed_one_leaves_the_old_in_place(broker, topic_name, tmp_path,
                                                                               monkeypatch):
    make_topic(broker, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, list(updates(2, 2_000, 300, 2)))
    path = str(tmp_path / "s")
    result = subprocess.run([sys.executable, "-m", "backlog_source.cli", "snapshot", "--bootstrap-servers",
                             broker.bootstrap_servers, "--topic", topic_name, "--path", path],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "published at" in result.stdout
    before, first = snapshot_state(path)

    # A second snapshot that fails after writing some data files publishes nothing.
    produce(broker.bootstrap_servers, topic_name, list(updates(3, 500, 300, 2)))
    import pyarrow.parquet as pq

    real_write, calls = pq.write_table, []

    def failing_write(table, where, **kwargs):
        calls.append(where)
        if len(calls) == 2:
            raise OSError("disk full")
        return real_write(table, where, **kwargs)

    monkeypatch.setattr(pq, "write_table", failing_write)
    with pytest.raises(OSError, match="disk full"):
        take_snapshot({"kafka.bootstrap.servers": broker.bootstrap_servers}, topic_name, path)
    after, still = snapshot_state(path)
    assert still == first and after == before


def test_a_topic_that_does_not_exist_is_a_clear_error(broker, tmp_path):
    with pytest.raises(SnapshotError, match="topic 'no-such-topic-x' does not exist"):
        take_snapshot({"kafka.bootstrap.servers": broker.bootstrap_servers}, "no-such-topic-x", str(tmp_path))


# ------------------------------------------------------------------ reading: snapshot.path


def read_all(spark, broker, table: str, tmp_path, **options):
    from tests.integration.helpers import reader

    df = reader(spark, broker, startingOffsets="earliest", **options)
    query = (df.writeStream.format("memory").queryName(table).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / table)).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    rows = spark.table(table).select("partition", "offset", "key", "value").collect()
    return rows, query


def state_of(rows) -> dict[tuple[int, bytes], bytes]:
    return replay((r["partition"], bytes(r["key"]), None if r["value"] is None else bytes(r["value"]))
                  for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])))


def test_snapshot_then_tail_gives_the_state_of_replaying_the_whole_log(spark, broker, topic_name, tmp_path):
    import threading

    make_topic(broker, topic_name, 3)
    produce(broker.bootstrap_servers, topic_name, list(updates(10, 6_000, 600, 3)))
    path = str(tmp_path / "snap")
    # Updates and deletes while the snapshot is taken and after it, to partitions 0 and 1
    # only: partition 2's whole backlog is its snapshot.
    during = threading.Thread(target=produce, args=(broker.bootstrap_servers, topic_name,
                                                    [u for u in updates(11, 3_000, 600, 3) if u[0] != 2]))
    during.start()
    manifest = take_snapshot({"kafka.bootstrap.servers": broker.bootstrap_servers}, topic_name, path)
    during.join()
    produce(broker.bootstrap_servers, topic_name, [u for u in updates(12, 3_000, 600, 3) if u[0] != 2])

    rows, query = read_all(spark, broker, "snap_tail", tmp_path, subscribe=topic_name, **{"snapshot.path": path})
    truth, _ = read_all(spark, broker, "whole_log", tmp_path, subscribe=topic_name, **{"backlog.enabled": "false"})
    assert state_of(rows) == state_of(truth)
    pairs = [(r["partition"], r["offset"]) for r in rows]
    assert len(pairs) == len(set(pairs))  # nothing twice
    snapshot_rows = sum(s.rows for s in manifest.partitions.values())
    tail = sum(1 for r in rows if r["offset"] >= manifest.partitions[r["partition"]].log_offset)
    assert len(rows) == snapshot_rows + tail < len(truth)  # the snapshot replaced most of the log

    import json

    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end["processing_backlog"] is False and end["snapshot"]["pending"] == {}
    # One batch read the snapshot and the tail, reaching every boundary; partition 2's is its
    # snapshot's log offset (nothing after it), and its snapshot reader reported it.
    assert len(query.recentProgress) == 1
    assert end["backlog"]["finishing"][topic_name]["2"] == manifest.partitions[2].log_offset
    events = published_events(broker, "_backlog_events", end["source_id"])
    assert sorted(e.partition for e in events) == [0, 1, 2]  # two log readers and the snapshot-only reader


@pytest.mark.parametrize("problem, message", [
    ("none", "no snapshot at .*_manifest.json does not exist"),
    ("other-topic", "holds a snapshot of topic 'other-topic', which this query does not read"),
    ("missing-file", "is missing under"),
])
def test_snapshot_problems_fail_the_query_naming_them(spark, broker, topic_name, tmp_path, problem, message):
    import json
    import re

    make_topic(broker, topic_name, 1)
    produce(broker.bootstrap_servers, topic_name, list(updates(13, 100, 10, 1)))
    path = tmp_path / "snap"
    if problem != "none":
        take_snapshot({"kafka.bootstrap.servers": broker.bootstrap_servers}, topic_name, str(path))
    if problem == "other-topic":
        data = json.loads((path / "_manifest.json").read_text())
        data["topic"] = "other-topic"
        (path / "_manifest.json").write_text(json.dumps(data))
    if problem == "missing-file":
        for parquet in path.rglob("*.parquet"):
            parquet.unlink()
    from tests.integration.helpers import reader

    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", **{"snapshot.path": str(path)})
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    with pytest.raises(Exception) as failure:
        query.awaitTermination(120)
        raise AssertionError("the query did not fail")
    assert re.search(message, str(failure.value)), str(failure.value)[:1500]
