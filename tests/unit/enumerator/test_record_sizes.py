"""Record sizes measured where a catch-up batch starts, with a scripted consumer."""

import logging

from confluent_kafka import KafkaError, KafkaException

from backlog_source.core.buckets import Bucket
from backlog_source.core.kafka_config import KafkaClientConfig
from backlog_source.enumerator.record_sizes import MAX_SAMPLED, SAMPLE_FETCH_BYTES, KafkaRecordSizes, record_bytes
from tests.fakes import FakeClock, FakeConsumer, Msg, eof

SECRET = "s3cret"
KAFKA = KafkaClientConfig(bootstrap_servers="h:1", secrets={"sasl.password": SECRET})
T0, T1 = Bucket("t", 0), Bucket("t", 1)


def sizes(consumer):
    return KafkaRecordSizes(KAFKA, consumer_factory=consumer, clock=FakeClock())


def test_a_record_counts_its_key_value_and_headers():
    assert record_bytes(Msg(0, key=b"kk", value=b"v" * 10, headers=[("h", b"123"), ("n", None)])) == 2 + 10 + 4 + 1


def test_bytes_per_offset_divide_the_sampled_bytes_by_the_offsets_they_span_gaps_included():
    consumer = FakeConsumer([[Msg(10, key=b"kk", value=b"v" * 98), Msg(11, key=b"kk", value=b"v" * 98),
                              Msg(13, key=b"kk", value=b"v" * 98), eof(14, partition=1)]])
    measured = sizes(consumer).bytes_per_offset({T0: 10, T1: 14}, {T0: 100, T1: 0})
    assert measured == {T0: 75.0}  # 300 bytes over offsets 10..13; T1 has nothing to read
    assert consumer.assigned == [[("t", 0, 10)], []]
    assert consumer.config["max.partition.fetch.bytes"] == SAMPLE_FETCH_BYTES and consumer.config["enable.auto.commit"] is False


def test_buckets_past_the_sampled_ones_get_the_median_of_those_measured():
    lags = {Bucket("t", p): 1_000 - p for p in range(MAX_SAMPLED + 3)}
    messages = [Msg(0, key=None, value=b"v" * (10 * (p + 1)), partition=p) for p in range(MAX_SAMPLED)]
    measured = sizes(FakeConsumer([messages])).bytes_per_offset({b: 0 for b in lags}, lags)
    assert set(measured) == set(lags)
    assert measured[Bucket("t", MAX_SAMPLED + 1)] == (10 * (MAX_SAMPLED // 2) + 10 * (MAX_SAMPLED // 2 + 1)) / 2


def test_a_failed_measurement_returns_nothing_with_a_warning_and_never_a_secret(caplog):
    consumer = FakeConsumer([KafkaException(KafkaError(KafkaError._TRANSPORT, f"login {SECRET} refused"))])
    with caplog.at_level(logging.WARNING):
        assert sizes(consumer).bytes_per_offset({T0: 0}, {T0: 5}) == {}
    assert "could not measure record sizes" in caplog.text and SECRET not in caplog.text and consumer.closed
