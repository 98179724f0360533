"""The split reader against a scripted fake consumer: ends by position, never by empty polls."""

import pytest
from confluent_kafka import KafkaError, Message

from backlog_core.errors import DataLossError, KafkaUnavailableError
from backlog_core.settings import parse_options
from reader import kafka_reader
from reader.kafka_reader import read_split
from reader.split import KafkaSplit
from tests.fakes import Err, FakeClock, FakeConsumer, Msg, eof


SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafkaConsumer.pollTimeoutMs": "5000"}).reader_config


def offsets_read(batches):
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_range_ends_at_a_record_past_the_end_and_drops_it():
    consumer = FakeConsumer([[Msg(0), Msg(1)], [Msg(2), Msg(3), Msg(4)]])
    batches = list(read_split(KafkaSplit("t", 0, 0, 4), SETTINGS, consumer_factory=consumer))
    assert offsets_read(batches) == [0, 1, 2, 3]
    assert consumer.closed
    assert consumer.config["auto.offset.reset"] == "error" and consumer.config["enable.partition.eof"] is True


def test_compaction_gap_at_the_end_finishes_on_end_of_partition():
    # Offsets 3 and 4 were compacted away (or are transaction markers): no record at end - 1.
    consumer = FakeConsumer([[Msg(0), Msg(2)], [], [eof(5)]])
    batches = list(read_split(KafkaSplit("t", 0, 0, 5), SETTINGS, consumer_factory=consumer))
    assert offsets_read(batches) == [0, 2]


def test_empty_polls_alone_never_end_a_range():
    clock = FakeClock()
    consumer = FakeConsumer([[Msg(0)]], clock=clock)
    with pytest.raises(KafkaUnavailableError, match=r"no progress reading t-0 \[0, 3\) at offset 1 for 5000 ms"):
        list(read_split(KafkaSplit("t", 0, 0, 3), SETTINGS, consumer_factory=consumer, clock=clock))
    assert consumer.closed


def test_empty_range_needs_no_consumer():
    def refuse(config):
        raise AssertionError("no consumer should be created")

    assert list(read_split(KafkaSplit("t", 0, 7, 7), SETTINGS, consumer_factory=refuse)) == []


def test_out_of_range_is_data_loss_naming_the_offsets():
    consumer = FakeConsumer([[Msg(-1001, error=Err(KafkaError._AUTO_OFFSET_RESET))]], watermarks=(20, 40))
    with pytest.raises(DataLossError, match=r"offset 5 of t-0 is out of range \(earliest 20, log end 40\); records 5..19"):
        list(read_split(KafkaSplit("t", 0, 5, 30), SETTINGS, consumer_factory=consumer))


def test_out_of_range_skips_to_earliest_when_loss_is_allowed():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "false"}).reader_config
    consumer = FakeConsumer(
        [[Msg(-1001, error=Err(KafkaError._AUTO_OFFSET_RESET))], [Msg(20), Msg(21)], [eof(22)]], watermarks=(20, 22)
    )
    batches = list(read_split(KafkaSplit("t", 0, 5, 22), settings, consumer_factory=consumer))
    assert offsets_read(batches) == [20, 21]
    assert consumer.assigned[-1] == [("t", 0, 20)]


def test_fatal_error_fails_the_read():
    consumer = FakeConsumer([[Msg(-1001, error=Err(KafkaError._FATAL, fatal=True))]])
    with pytest.raises(KafkaUnavailableError, match="failed at offset 0"):
        list(read_split(KafkaSplit("t", 0, 0, 3), SETTINGS, consumer_factory=consumer))


def test_columns_follow_sparks_kafka_source():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "includeHeaders": "true"}).reader_config
    consumer = FakeConsumer(
        [[Msg(0, key=None, ts=(1, 1_700_000_000_123), headers=[("h", b"x")]), Msg(1, value=None, ts=(2, 5), headers=None), Msg(2, ts=(0, -1))], [eof(3)]]
    )
    (batch,) = list(read_split(KafkaSplit("t", 4, 0, 3), settings, consumer_factory=consumer))
    rows = batch.to_pylist()
    assert [r["timestampType"] for r in rows] == [0, 1, -1]  # CreateTime, LogAppendTime, none
    assert rows[0]["timestamp"].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    assert rows[0]["key"] is None and rows[1]["value"] is None
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}] and rows[1]["headers"] == []
    assert {r["topic"] for r in rows} == {"t"} and {r["partition"] for r in rows} == {4}
    assert batch.schema == kafka_reader.to_record_batch.__globals__["_SCHEMAS"][True]


def test_a_partition_deleted_mid_read_is_data_loss_or_skipped():
    unknown = [[Msg(-1001, error=Err(KafkaError.UNKNOWN_TOPIC_OR_PART))]]

    def gone(script):
        consumer = FakeConsumer(script)
        consumer.topics_present = {}
        return consumer

    with pytest.raises(DataLossError, match=r"t-0 no longer exists; records 2..9 of the batch range \[0, 10\)"):
        list(read_split(KafkaSplit("t", 0, 0, 10), SETTINGS, consumer_factory=gone([[Msg(0), Msg(1)]] + unknown)))
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "false"}).reader_config
    batches = list(read_split(KafkaSplit("t", 0, 0, 10), settings, consumer_factory=gone([[Msg(0), Msg(1)]] + unknown)))
    assert offsets_read(batches) == [0, 1]


def test_an_unknown_topic_error_that_metadata_does_not_confirm_is_transient():
    glitch = [[Msg(-1001, error=Err(KafkaError.UNKNOWN_TOPIC_OR_PART))]]
    batches = list(read_split(KafkaSplit("t", 0, 0, 3), SETTINGS, consumer_factory=FakeConsumer([[Msg(0)]] + glitch + [[Msg(1), Msg(2)]])))
    assert offsets_read(batches) == [0, 1, 2]


def test_a_deleted_partition_is_noticed_even_without_an_error_from_the_client():
    clock = FakeClock()
    consumer = FakeConsumer([[Msg(0)]], clock=clock)
    consumer.topics_present = {}  # metadata no longer lists the topic
    with pytest.raises(DataLossError, match="t-0 no longer exists"):
        list(read_split(KafkaSplit("t", 0, 0, 5), SETTINGS, consumer_factory=consumer, clock=clock))
