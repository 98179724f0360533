"""Snapshot pieces without Kafka: latest-per-key in Arrow, the manifest, atomic publishing."""

import json

import pyarrow as pa
import pytest

from backlog_source.core.errors import SnapshotError
from backlog_source.core.schema import arrow_schema
from backlog_source.core.snapshot_manifest import MANIFEST_NAME, Manifest, PartitionSnapshot, load_manifest
from backlog_source.snapshot import _publish, latest_per_key, read_partition


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


def test_manifest_round_trip_and_fit():
    m = manifest()
    assert Manifest.decode(m.encode(), "x") == m
    m.check_fits("t", {0, 1})
    with pytest.raises(SnapshotError, match="the snapshot is of topic 't', not 'u'"):
        m.check_fits("u", {0})
    with pytest.raises(SnapshotError, match=r"names partition\(s\) \[0\] that the topic does not have"):
        manifest().check_fits("t", {1})


@pytest.mark.parametrize("payload, message", [
    (b"not json", "is not JSON"),
    (b"[]", "must be a JSON object"),
    (json.dumps({"version": 2}).encode(), "snapshot manifest version 2 is not understood; this release reads version"),
    (json.dumps({"version": 1, "topic": "t"}).encode(), "is malformed: missing or invalid"),
    (json.dumps({"version": 1, "topic": "t", "snapshot_id": "a", "created_ms": 1,
                 "partitions": {"0": {"log_offset": -1, "rows": 0, "files": []}}}).encode(), "must be >= 0"),
])
def test_bad_manifests_say_what_is_wrong(payload, message):
    with pytest.raises(SnapshotError, match=message):
        Manifest.decode(payload, "s3://b/snap/_manifest.json")


def test_no_manifest_and_a_missing_file_are_clear_errors(tmp_path):
    with pytest.raises(SnapshotError, match=f"no snapshot at {tmp_path}: _manifest.json does not exist"):
        load_manifest(str(tmp_path))
    (tmp_path / MANIFEST_NAME).write_bytes(manifest().encode())
    fs, root, loaded = load_manifest(str(tmp_path))
    with pytest.raises(SnapshotError, match="lists data/abc/partition=0/part-0.parquet for partition 0, but the file is missing"):
        read_partition(fs, root, loaded, 0)


def test_publishing_replaces_the_manifest_in_one_step_and_leaves_no_temporary(tmp_path):
    import pyarrow.fs as pafs

    fs = pafs.LocalFileSystem()
    _publish(fs, str(tmp_path), manifest())
    second = Manifest("t", "def", 2, {})
    _publish(fs, str(tmp_path), second)
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST_NAME]
    assert load_manifest(str(tmp_path))[2] == second


# ----------------------------------------------------------------- enumerator with a snapshot

from backlog_source.core.buckets import Bucket  # noqa: E402
from backlog_source.core.errors import DataLossError  # noqa: E402
from backlog_source.core.settings import parse_options  # noqa: E402
from backlog_source.enumerator.enumerator import Enumerator, ReadBudget  # noqa: E402
from tests.fakes import FakeClock, FakeControlTopic, FakeOffsetsClient  # noqa: E402

A0, A1 = Bucket("a", 0), Bucket("a", 1)
FILES = ("data/s/partition=0/part-0.parquet",)


def enumerator(partitions, topics, fail_on_data_loss="true"):
    """a snapshot of topic 'a' with ``partitions`` {partition: (log_offset, rows)}."""
    snap = Manifest("a", "s", 1, {p: PartitionSnapshot(o, rows, FILES) for p, (o, rows) in partitions.items()})
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest",
                              "backlog.minPollIntervalMs": "0",
                              "snapshot.path": "/snap", "failOnDataLoss": fail_on_data_loss})
    return Enumerator(settings, FakeOffsetsClient(topics=topics), FakeControlTopic(), clock=FakeClock(),
                      snapshot_loader=lambda path: (None, path, snap))


def test_snapshot_buckets_start_at_their_log_offset_and_snapshot_only_ones_are_backlog():
    e = enumerator({0: (100, 40), 1: (50, 10)}, {"a": [(0, 120), (0, 50)]})
    start = e.initial_offset()
    assert start.positions == {A0: 100, A1: 50}
    assert start.backlog == {A0: 120, A1: 50}  # a-1: nothing after its snapshot; its snapshot is its backlog
    assert start.snapshot.pending == {A0: FILES, A1: FILES} and start.snapshot.root == "/snap"


def test_the_first_batch_reads_the_snapshot_even_with_nothing_new_in_the_log():
    e = enumerator({0: (100, 40)}, {"a": [(0, 100)]})
    start = e.initial_offset()
    end = e.latest_offset(start, ReadBudget())
    assert end != start and end.snapshot.pending == {} and end.positions == start.positions
    # The batch that reads the snapshot carries the bucket to its boundary (the snapshot's
    # log offset); before it, the position alone did not count as having reached it.
    assert start.backlog == {A0: 100} and end.finishing == {A0: 100} and not end.processing_backlog


def test_a_log_offset_below_the_earliest_is_data_loss_unless_allowed():
    with pytest.raises(DataLossError, match=r"continues a-0 at offset 10, but its earliest available offset is 30"):
        enumerator({0: (10, 5)}, {"a": [(30, 90)]}).initial_offset()
    assert enumerator({0: (10, 5)}, {"a": [(30, 90)]}, "false").initial_offset().positions == {A0: 30}


def test_a_log_offset_beyond_the_log_end_and_unknown_partitions_are_errors():
    with pytest.raises(SnapshotError, match="at offset 500, beyond its log end 90"):
        enumerator({0: (500, 5)}, {"a": [(0, 90)]}).initial_offset()
    with pytest.raises(SnapshotError, match=r"names partition\(s\) \[3\] that the topic does not have"):
        enumerator({3: (5, 5)}, {"a": [(0, 90)]}).initial_offset()
