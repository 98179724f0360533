"""The snapshot manifest's encoding: every released version is read forever."""

from pathlib import Path

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
