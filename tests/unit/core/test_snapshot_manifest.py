"""The snapshot manifest's encoding: every released version is read forever."""

import json
from pathlib import Path

import pytest

from backlog_source.core.errors import SnapshotError
from backlog_source.core.snapshot_manifest import Manifest, PartitionSnapshot

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "manifests"


def test_every_released_manifest_version_is_read_and_the_current_one_written_byte_for_byte():
    expected = Manifest("orders", "7f0c2a", 1763800000000, {
        0: PartitionSnapshot(1234, 1000, ("data/7f0c2a/partition=0/part-0.parquet",)),
        1: PartitionSnapshot(0, 0, ()),
    })
    stored = (FIXTURES / "v1.json").read_bytes()
    assert Manifest.decode(stored, "v1.json") == expected
    assert expected.encode() == stored  # version 1 is also the one written
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == ["v1.json"]  # a new version adds its fixture


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
