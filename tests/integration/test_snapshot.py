"""Snapshots of a real topic on the embedded broker: the state equals a replay of the log."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from backlog_source.snapshot import SnapshotError, take_snapshot
from backlog_source.snapshot.writer import load_manifest, read_partition
from tests.integration.helpers import log_end_offsets, make_topic, produce

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
    # The broker helper appends one "__seal__" record per partition (docs/broker-gaps.md).
    assert state == replay(produced + [(p, b"__seal__", b"") for p in range(3)])
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
