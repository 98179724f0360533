"""Where a new query starts: Spark's option precedence, specific offsets checked against the
log, timestamps, and the snapshot bootstrap."""

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import ConfigError, DataLossError, SnapshotError
from backlog_source.core.settings import parse_options
from backlog_source.core.snapshot_manifest import Manifest, PartitionSnapshot
from backlog_source.enumerator.query_start import StartingOffsets
from tests.fakes import FakeOffsetsClient

A0, A1 = Bucket("a", 0), Bucket("a", 1)


def client():
    """Topic ``a``: partition 0 holds [10, 100), partition 1 holds [0, 50)."""
    return FakeOffsetsClient({"a": [(10, 100), (0, 50)]},
                             timestamps={A0: [(1_000, 20), (2_000, 60)], A1: [(1_500, 5)]})


def resolve(load=None, **options):
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", **options})
    starting = StartingOffsets(settings, client(), load) if load else StartingOffsets(settings, client())
    return starting.resolve({A0, A1})


def test_latest_is_the_default_and_earliest_is_the_log_start():
    assert resolve().positions == {A0: 100, A1: 50}
    assert resolve(startingOffsets="earliest").positions == {A0: 10, A1: 0}


def test_specific_offsets_with_minus_two_for_earliest_and_minus_one_for_latest():
    assert resolve(startingOffsets='{"a": {"0": 42, "1": -2}}').positions == {A0: 42, A1: 0}
    assert resolve(startingOffsets='{"a": {"0": -1, "1": 7}}').positions == {A0: 100, A1: 7}


def test_specific_offsets_must_cover_exactly_the_subscribed_partitions():
    with pytest.raises(ConfigError, match="option 'startingOffsets' must give every subscribed partition a value; "
                                          "missing: a-1 \\(use -2 for earliest, -1 for latest\\)"):
        resolve(startingOffsets='{"a": {"0": 42}}')
    with pytest.raises(ConfigError, match="names partition\\(s\\) the subscription does not include: b-0"):
        resolve(startingOffsets='{"a": {"0": 42, "1": 1}, "b": {"0": 0}}')


def test_an_offset_beyond_the_log_end_is_a_clear_error():
    with pytest.raises(ConfigError, match="asks for offset 101 of a-0, beyond its log end 100; use -1 for latest"):
        resolve(startingOffsets='{"a": {"0": 101, "1": 0}}')


def test_an_offset_below_the_earliest_is_data_loss_or_the_earliest_under_fail_on_data_loss_false():
    with pytest.raises(DataLossError, match="records 3..9 are gone. Set failOnDataLoss=false to start at the earliest"):
        resolve(startingOffsets='{"a": {"0": 3, "1": 0}}')
    assert resolve(startingOffsets='{"a": {"0": 3, "1": 0}}', failOnDataLoss="false").positions == {A0: 10, A1: 0}


def test_timestamps_take_precedence_over_offsets_as_in_spark():
    # startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
    both = {"startingTimestamp": "1200", "startingOffsetsByTimestamp": '{"a": {"0": 1, "1": 1}}',
            "startingOffsets": "earliest"}
    assert resolve(**both).positions == {A0: 60, A1: 5}
    by_partition = {"startingOffsetsByTimestamp": '{"a": {"0": 900, "1": 1500}}', "startingOffsets": "earliest"}
    assert resolve(**by_partition).positions == {A0: 20, A1: 5}


def test_a_timestamp_with_no_record_after_it_fails_or_starts_at_latest_by_strategy():
    with pytest.raises(ConfigError, match="no record at or after the given timestamp in a-0 \\(timestamp 5000\\), "
                                          "a-1 \\(timestamp 5000\\). Set startingOffsetsByTimestampStrategy=latest"):
        resolve(startingTimestamp="5000")
    assert resolve(startingTimestamp="5000", startingOffsetsByTimestampStrategy="latest").positions == {A0: 100, A1: 50}


def snapshot(*partitions):
    manifest = Manifest("a", "snap-1", 1, {p: PartitionSnapshot(offset, rows, (f"p{p}.parquet",))
                                            for p, offset, rows in partitions})
    return lambda path: (None, path, manifest)


def test_a_snapshot_sets_its_partitions_start_and_the_others_follow_the_starting_options():
    started = resolve(snapshot((0, 100, 7)), **{"snapshot.path": "/s", "startingOffsets": "earliest"})
    assert started.positions == {A0: 100, A1: 0}
    assert started.snapshot.pending == {A0: ("p0.parquet",)} and started.snapshot.snapshot_id == "snap-1"
    assert started.snapshot_only == {A0}  # its rows are its whole backlog: nothing in the log after it


def test_a_snapshot_that_does_not_fit_the_log_is_refused():
    with pytest.raises(SnapshotError, match="continues a-0 at offset 101, beyond its log end 100"):
        resolve(snapshot((0, 101, 1)), **{"snapshot.path": "/s"})
    with pytest.raises(DataLossError, match="the snapshot continues a-0 at offset 5, but its earliest available offset "
                                            "is 10: records 5..9 are gone. Take a newer snapshot"):
        resolve(snapshot((0, 5, 1)), **{"snapshot.path": "/s"})
