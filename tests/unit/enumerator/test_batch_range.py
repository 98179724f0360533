"""The range a batch read reads, resolved against a fake cluster."""

import logging

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
    ({"endingOffsets": '{"a": {"0": 30, "1": 99}}'},
     "option 'endingOffsets' asks for records beyond the log end, which do not exist: a-1 records 50..98 (log end "
     "50). Use -1 for latest, or set failOnDataLoss=false to read up to the log end"),
    ({"startingOffsets": '{"a": {"0": 40, "1": 0}}', "endingOffsets": '{"a": {"0": 30, "1": -1}}'},
     "the batch read starts after it ends for a-0 (start 40, end 30)"),
    # KafkaSourceRDD.compute: a start past the log end, read to the latest offset, starts after it ends.
    ({"startingOffsets": '{"a": {"0": 10, "1": 60}}', "failOnDataLoss": "false"},
     "the batch read starts after it ends for a-1 (start 60, end 50)"),
])
def test_ranges_that_do_not_fit_the_partitions_are_clear_errors(options, fragment):
    with pytest.raises(ConfigError) as raised:
        reads(cluster(), **options)
    assert fragment in str(raised.value)


def test_a_start_below_the_earliest_offset_is_data_loss_unless_allowed():
    with pytest.raises(DataLossError):
        reads(cluster(), startingOffsets='{"a": {"0": 5, "1": 0}}')
    assert reads(cluster(), startingOffsets='{"a": {"0": 5, "1": 0}}', failOnDataLoss="false").start[A0] == 10


def test_nothing_to_read_when_no_topic_matches_the_pattern():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "z.*"}, read="batch")
    assert batch_reads(settings, cluster()).end == {}


def warnings_of(caplog) -> str:
    return " ".join(r.getMessage() for r in caplog.records if r.name == "backlog_source.core.data_loss")


@pytest.mark.parametrize("options", [{}, {"failOnDataLoss": "false"}])
def test_a_subscribed_topic_that_does_not_exist_fails_the_read_naming_it(options):
    # Spark's SubscribeStrategy describes the topics; Kafka answers UnknownTopicOrPartition.
    with pytest.raises(ConfigError, match="option 'subscribe' names topic\\(s\\) that do not exist: b, c"):
        batch_reads(parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a,c,b", **options}, read="batch"),
                    cluster())


def test_an_assigned_topic_that_does_not_exist_fails_the_read_under_either_fail_on_data_loss():
    for fail in ("true", "false"):
        with pytest.raises(ConfigError, match="option 'assign' names topic\\(s\\) that do not exist: b"):
            batch_reads(parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [0], "b": [0]}',
                                       "failOnDataLoss": fail}, read="batch"), cluster())


def test_an_assigned_partition_that_does_not_exist_is_skipped_with_a_warning_only_when_data_loss_is_allowed(caplog):
    # AssignStrategy keeps the partitions the topic has: Spark reads a-1 and drops a-7.
    options = {"kafka.bootstrap.servers": "h:1", "assign": '{"a": [1, 7]}'}
    with pytest.raises(ConfigError, match="option 'assign' names partition\\(s\\) that do not exist: a-7 \\(a has 2\\)"
                                          ". Set failOnDataLoss=false"):
        batch_reads(parse_options(options, read="batch"), cluster())
    with caplog.at_level(logging.WARNING):
        got = batch_reads(parse_options({**options, "failOnDataLoss": "false"}, read="batch"), cluster())
    assert (got.start, got.end) == ({A1: 0}, {A1: 50})
    assert "a-7" in warnings_of(caplog)


def test_a_range_wholly_below_the_earliest_offset_is_skipped_when_data_loss_is_allowed(caplog):
    # KafkaDataConsumer.getEarliestAvailableOffsetBetween: nothing of [5, 8) is left on a-0.
    options = {"startingOffsets": '{"a": {"0": 5, "1": 0}}', "endingOffsets": '{"a": {"0": 8, "1": 20}}'}
    with pytest.raises(DataLossError, match="a-0 records 5..7 \\(earliest available offset 10\\)"):
        reads(cluster(), **options)
    with caplog.at_level(logging.WARNING):
        got = reads(cluster(), failOnDataLoss="false", **options)
    assert got.end[A0] == got.start[A0] and (got.start[A1], got.end[A1]) == (0, 20)
    assert "a-0 records 5..7 (earliest available offset 10)" in warnings_of(caplog)


def test_a_range_partly_below_the_earliest_offset_reads_the_rest_when_data_loss_is_allowed(caplog):
    with caplog.at_level(logging.WARNING):
        got = reads(cluster(), failOnDataLoss="false", startingOffsets='{"a": {"0": 5, "1": 0}}',
                    endingOffsets='{"a": {"0": 30, "1": -1}}')
    assert (got.start[A0], got.end[A0]) == (10, 30)
    assert "a-0 records 5..9 (earliest available offset 10)" in warnings_of(caplog)


def test_an_end_beyond_the_log_end_reads_to_the_log_end_when_data_loss_is_allowed(caplog):
    with caplog.at_level(logging.WARNING):
        got = reads(cluster(), failOnDataLoss="false", endingOffsets='{"a": {"0": 60, "1": 99}}')
    assert (got.start, got.end) == ({A0: 10, A1: 0}, {A0: 60, A1: 50})
    assert "a-1 records 50..98 (log end 50)" in warnings_of(caplog) and "a-0" not in warnings_of(caplog)


def test_a_range_wholly_beyond_the_log_end_is_skipped_when_data_loss_is_allowed(caplog):
    options = {"startingOffsets": '{"a": {"0": 20, "1": 60}}', "endingOffsets": '{"a": {"0": 30, "1": 70}}'}
    with pytest.raises(ConfigError, match="a-1 records 60..69 \\(log end 50\\)"):
        reads(cluster(), **options)
    with caplog.at_level(logging.WARNING):
        got = reads(cluster(), failOnDataLoss="false", **options)
    assert got.start[A1] == got.end[A1] and (got.start[A0], got.end[A0]) == (20, 30)
    assert "a-1 records 60..69 (log end 50)" in warnings_of(caplog)


def test_an_empty_range_is_not_compared_with_the_log():
    # KafkaSourceRDD.compute skips a range whose start is its end before it reads anything.
    got = reads(cluster(), startingOffsets='{"a": {"0": 5, "1": 70}}', endingOffsets='{"a": {"0": 5, "1": 70}}')
    assert all(got.start[b] == got.end[b] for b in (A0, A1))


@pytest.mark.parametrize("options", [
    {"minPartitions": "3"},  # more than the topic's 2 partitions
    {"maxRecordsPerPartition": "5", "startingOffsets": '{"a": {"0": 120, "1": -2}}',
     "endingOffsets": '{"a": {"0": -1, "1": 40}}'},  # a-1's unresolved range, -2 to 40, is larger than 5
])
def test_a_range_that_starts_after_it_ends_reads_nothing_where_spark_cuts_the_ranges(options):
    # KafkaOffsetReaderAdmin.shouldDivvyUpLargePartitions: Spark resolves the ranges to cut them,
    # and KafkaOffsetRangeCalculator.getRanges drops a range of negative size.
    got = reads(cluster(), **{"startingOffsets": '{"a": {"0": 120, "1": 0}}', **options})
    assert got.start[A0] == got.end[A0] and got.start[A1] == 0 and got.end[A1] in (40, 50)


def test_a_range_that_starts_after_it_ends_fails_where_spark_does_not_cut_the_ranges():
    # The unresolved ranges (120 to -1, -2 to -1) are not larger than 5: no cut.
    with pytest.raises(ConfigError, match="starts after it ends for a-0 \\(start 120, end 100\\)"):
        reads(cluster(), startingOffsets='{"a": {"0": 120, "1": -2}}', maxRecordsPerPartition="5", minPartitions="2")
