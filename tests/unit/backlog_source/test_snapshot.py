"""Snapshot pieces without Kafka: latest-per-key in Arrow, the manifest, atomic publishing."""


import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from backlog_source.core.errors import SnapshotError
from backlog_source.core.schema import arrow_schema
from backlog_source.core.snapshot_manifest import MANIFEST_NAME, Manifest, PartitionSnapshot, load_manifest
from backlog_source import snapshot
from backlog_source.snapshot import _publish, latest_per_key, take_snapshot
from tests.fakes import FakeOffsetsClient


def records(*rows):
    """rows: (offset, key, value) of topic t, partition 0."""
    schema = arrow_schema(False)
    return pa.table({
        "key": pa.array([k for _, k, _ in rows], pa.binary()),
        "value": pa.array([v for _, _, v in rows], pa.binary()),
        "topic": pa.array(["t"] * len(rows), pa.string()),
        "partition": pa.array([0] * len(rows), pa.int32()),
        "offset": pa.array([o for o, _, _ in rows], pa.int64()),
        "timestamp": pa.array([0] * len(rows), pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array([0] * len(rows), pa.int32()),
    }, schema=schema)


def test_latest_record_per_key_wins_and_a_null_value_deletes():
    table = records((0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1"), (4, b"b", None),
                    (5, b"c", None), (6, b"c", b"3"))
    latest = latest_per_key(table)
    assert [(r["key"], r["value"], r["offset"]) for r in latest.to_pylist()] == [(b"a", b"2", 2), (b"c", b"3", 6)]
    kept = latest_per_key(table, drop_deletes=False)  # intermediate state keeps tombstones
    assert [(r["key"], r["value"]) for r in kept.to_pylist()] == [(b"a", b"2"), (b"b", None), (b"c", b"3")]
    assert latest.schema == table.schema


def test_a_record_without_a_key_is_an_error_naming_it():
    with pytest.raises(SnapshotError, match="record at offset 1 of t-0 has no key"):
        latest_per_key(records((0, b"a", b"1"), (1, None, b"x")))


def manifest(topic="t"):
    return Manifest(topic, "abc", 1_700_000_000_000, {0: PartitionSnapshot(10, 3, ("data/abc/partition=0/part-0.parquet",))})


def test_no_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(SnapshotError, match=f"no snapshot at {tmp_path}: _manifest.json does not exist"):
        load_manifest(str(tmp_path))


def test_publishing_replaces_the_manifest_in_one_step_and_leaves_no_temporary(tmp_path):
    fs = pafs.LocalFileSystem()
    _publish(fs, str(tmp_path), manifest())
    second = Manifest("t", "def", 2, {})
    _publish(fs, str(tmp_path), second)
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST_NAME]
    assert load_manifest(str(tmp_path))[2] == second


@pytest.fixture
def cluster(monkeypatch):
    """A fake cluster behind take_snapshot; a read of a non-empty range returns three records."""
    client = FakeOffsetsClient({"__audit": [(0, 3), (0, 0)], "__consumer_offsets": [(0, 9)], "other": [(0, 1)]})
    monkeypatch.setattr(snapshot.KafkaAdmin, "from_settings", classmethod(lambda cls, settings: client))
    read = records((0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"2"))
    monkeypatch.setattr(snapshot, "read_split", lambda split, config: iter(
        read.to_batches() if split.ranges[0].end > split.ranges[0].start else []))
    return client


def test_a_snapshot_describes_only_its_topic_and_takes_a_user_topic_named_like_an_internal_one(cluster, tmp_path):
    """One rule for internal topics, the broker's flag: a topic named explicitly is read
    whatever its name, as an explicit subscribe is; the cluster is never listed."""
    manifest = take_snapshot({"kafka.bootstrap.servers": "h:1"}, "__audit", str(tmp_path), clock=lambda: 1.0)
    assert cluster.calls == ["partition_counts", "earliest_offsets", "latest_offsets"]
    assert {p: (s.log_offset, s.rows) for p, s in manifest.partitions.items()} == {0: (3, 2), 1: (0, 0)}
    assert load_manifest(str(tmp_path))[2] == manifest


def test_a_snapshot_of_a_missing_topic_names_it(cluster, tmp_path):
    with pytest.raises(SnapshotError, match="topic 'gone' does not exist"):
        take_snapshot({"kafka.bootstrap.servers": "h:1"}, "gone", str(tmp_path))
    assert cluster.calls == ["partition_counts"] and list(tmp_path.iterdir()) == []
