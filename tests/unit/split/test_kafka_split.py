"""Splits and ranges: plain values checked when made."""

import pickle

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit, SnapshotSplit


def test_a_range_refuses_negative_or_inverted_offsets():
    with pytest.raises(ValueError, match=r"range of t-0 is invalid: \[5, 4\)"):
        KafkaRange("t", 0, 5, 4)
    with pytest.raises(ValueError, match="invalid"):
        KafkaRange("t", 0, -1, 4)
    assert KafkaRange("t", 0, 4, 4).size == 0


@pytest.mark.parametrize("start, end, boundary, crosses", [
    (0, 10, 10, True), (0, 10, 5, True), (5, 10, 5, False), (0, 4, 5, False), (0, 10, None, False),
])
def test_a_range_crosses_its_boundary_when_reading_it_moves_the_position_from_below_to_at_or_past_it(
        start, end, boundary, crosses):
    assert KafkaRange("t", 0, start, end, boundary).crosses_boundary is crosses


def test_a_split_reads_each_bucket_once_and_counts_its_records():
    with pytest.raises(ValueError, match="a split reads each bucket once"):
        KafkaSplit((KafkaRange("t", 0, 0, 5), KafkaRange("t", 0, 5, 9)))
    split = KafkaSplit((KafkaRange("t", 0, 0, 5), KafkaRange.of(Bucket("t", 1), 2, 9)), "src")
    assert split.records == 12 and pickle.loads(pickle.dumps(split)) == split


def test_a_snapshot_split_finishes_the_backlog_when_the_snapshot_covers_the_boundary():
    split = SnapshotSplit("t", 0, "/s", ("part-0.parquet",), log_offset=100, boundary=100)
    assert split.finishes_backlog and split.bucket == Bucket("t", 0)
    assert not SnapshotSplit("t", 0, "/s", (), log_offset=100, boundary=101).finishes_backlog
    assert not SnapshotSplit("t", 0, "/s", (), log_offset=100).finishes_backlog
