"""The range a batch read reads, resolved against a fake cluster."""

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import ConfigError, DataLossError
from backlog_source.core.settings import parse_options
from backlog_source.enumerator.batch_range import batch_reads
from tests.fakes import FakeOffsetsClient

A0, A1 = Bucket("a", 0), Bucket("a", 1)


def reads(client, **options):
    return batch_reads(parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", **options}, read="batch"),
                       client)


def cluster():
    client = FakeOffsetsClient(topics={"a": [(10, 100), (0, 50)]})
    client.timestamps = {A0: [(1_000, 10), (2_000, 60)], A1: [(1_500, 0)]}
    return client


def test_by_default_a_batch_read_reads_from_the_earliest_to_the_latest_offsets_without_boundaries():
    got = reads(cluster())
    assert (got.start, got.end) == ({A0: 10, A1: 0}, {A0: 100, A1: 50})
    assert got.boundaries == {} and got.source_id == ""


def test_specific_offsets_with_sentinels_as_spark_allows_them():
    got = reads(cluster(), startingOffsets='{"a": {"0": 20, "1": -2}}', endingOffsets='{"a": {"0": 30, "1": -1}}')
    assert (got.start, got.end) == ({A0: 20, A1: 0}, {A0: 30, A1: 50})


def test_ending_timestamps_end_at_the_first_offset_at_or_after_them_or_at_the_latest():
    got = reads(cluster(), endingTimestamp="1800")
    assert got.end == {A0: 60, A1: 50}  # a-1 has no record at or after 1800: its latest offset
    got = reads(cluster(), endingOffsetsByTimestamp='{"a": {"0": 500, "1": 1500}}')
    assert got.end == {A0: 10, A1: 0}


@pytest.mark.parametrize("options, fragment", [
    ({"endingOffsets": '{"a": {"0": 30}}'}, "option 'endingOffsets' must give every subscribed partition a value"),
    ({"endingOffsets": '{"a": {"0": 30, "1": 99}}'}, "beyond the log end: a-1 (asked 99, log end 50)"),
    ({"startingOffsets": '{"a": {"0": 40, "1": 0}}', "endingOffsets": '{"a": {"0": 30, "1": -1}}'},
     "the batch read starts after it ends for a-0 (start 40, end 30)"),
])
def test_ranges_that_do_not_fit_the_partitions_are_clear_errors(options, fragment):
    with pytest.raises(ConfigError) as raised:
        reads(cluster(), **options)
    assert fragment in str(raised.value)


def test_a_start_below_the_earliest_offset_is_data_loss_unless_allowed():
    with pytest.raises(DataLossError):
        reads(cluster(), startingOffsets='{"a": {"0": 5, "1": 0}}')
    assert reads(cluster(), startingOffsets='{"a": {"0": 5, "1": 0}}', failOnDataLoss="false").start[A0] == 10


def test_nothing_to_read_when_no_topic_matches():
    assert reads(FakeOffsetsClient(topics={}), ).end == {}
