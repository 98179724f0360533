"""Record sizes measured where a catch-up batch starts, with a scripted consumer."""

import logging

from confluent_kafka import KafkaError, KafkaException

from backlog_source.core.buckets import Bucket
from backlog_source.core.kafka_config import KafkaClientConfig
from backlog_source.enumerator.record_sizes import (
    MAX_SAMPLED,
    SAMPLE_BYTES,
    SAMPLE_FETCH_BYTES,
    SAMPLE_RECORDS,
    SAMPLE_WAIT_S,
    KafkaRecordSizes,
    pooled_by_topic,
    record_bytes,
    reported_sizes,
)
from backlog_source.events.sizes_report import TopicSizes
from tests.fakes import FakeClock, FakeConsumer, Msg, eof

SECRET = "s3cret"
KAFKA = KafkaClientConfig(bootstrap_servers="h:1", secrets={"sasl.password": SECRET})
T0, T1 = Bucket("t", 0), Bucket("t", 1)


def sizes(consumer):
    """A sampler whose clock the consumer advances when it has nothing to deliver."""
    consumer.clock = consumer.clock or FakeClock()
    return KafkaRecordSizes(KAFKA, consumer_factory=consumer, clock=consumer.clock)


def test_a_record_counts_its_key_value_and_headers():
    assert record_bytes(Msg(0, key=b"kk", value=b"v" * 10, headers=[("h", b"123"), ("n", None)])) == 2 + 10 + 4 + 1


def test_bytes_per_offset_divide_the_sampled_bytes_by_the_offsets_they_span_gaps_included():
    consumer = FakeConsumer([[Msg(10, key=b"kk", value=b"v" * 98), Msg(11, key=b"kk", value=b"v" * 98),
                              Msg(13, key=b"kk", value=b"v" * 98), eof(14, partition=1)]])
    measured = sizes(consumer).bytes_per_offset({T0: 10, T1: 14}, {T0: 100, T1: 0})
    assert measured == {T0: 75.0}  # 300 bytes over offsets 10..13; T1 has nothing to read
    assert consumer.assigned == [[("t", 0, 10)], []]
    assert consumer.config["max.partition.fetch.bytes"] == SAMPLE_FETCH_BYTES and consumer.config["enable.auto.commit"] is False


def test_a_partition_is_read_across_fetches_until_it_has_given_its_share_or_ends():
    big = b"v" * (SAMPLE_BYTES // 2)  # two partitions sampled: each gives half of SAMPLE_BYTES
    consumer = FakeConsumer([
        [Msg(0, key=None, value=b"v" * 100, partition=0), Msg(0, key=None, value=b"v" * 10, partition=1)],
        [Msg(1, key=None, value=big, partition=0), Msg(1, key=None, value=b"v" * 30, partition=1)],
        [Msg(2, key=None, value=big, partition=0), eof(2, partition=1)],  # partition 0 was done already
    ])
    measured = sizes(consumer).bytes_per_offset({T0: 0, T1: 0}, {T0: 100, T1: 2})
    pooled = (100 + len(big) + 10 + 30) / 4
    assert measured == {T0: pooled, T1: pooled}
    assert len(consumer.asked) == 3 and consumer.assigned[-1] == []


def test_a_partition_stops_at_sample_records_whatever_their_size():
    messages = [Msg(o, key=None, value=b"v" * 10) for o in range(SAMPLE_RECORDS + 5)]
    consumer = FakeConsumer([messages[:1_000], messages[1_000:]])
    assert sizes(consumer).bytes_per_offset({T0: 0}, {T0: 10_000}) == {T0: 10.0}
    assert len(consumer.asked) == 2  # done after SAMPLE_RECORDS: no third call


def test_a_partition_that_never_ends_its_sample_is_cut_by_the_deadline():
    consumer = FakeConsumer([[Msg(0, key=None, value=b"v" * 10)]])  # then nothing, while the clock runs
    assert sizes(consumer).bytes_per_offset({T0: 0}, {T0: 10_000}) == {T0: 10.0}
    assert sum(consumer.waits[1:]) >= SAMPLE_WAIT_S


def test_every_bucket_of_a_topic_gets_the_bytes_of_all_its_samples_over_their_offsets():
    lags = {Bucket("t", p): 1_000 - p for p in range(MAX_SAMPLED + 3)}
    messages = [Msg(0, key=None, value=b"v" * (10 * (p + 1)), partition=p) for p in range(MAX_SAMPLED)]
    measured = sizes(FakeConsumer([messages])).bytes_per_offset({b: 0 for b in lags}, lags)
    pooled = sum(10 * (p + 1) for p in range(MAX_SAMPLED)) / MAX_SAMPLED  # one offset per sample
    assert measured == {b: pooled for b in lags}  # sampled or not (past MAX_SAMPLED)


def test_topics_are_pooled_apart_and_an_unsampled_topic_gets_all_samples_together():
    measured = {Bucket("small", 0): (100, 10), Bucket("small", 1): (300, 10),
                Bucket("large", 0): (50_000, 2), Bucket("large", 1): (10_000, 2)}
    buckets = [*measured, Bucket("other", 0)]
    assert pooled_by_topic(measured, buckets) == {
        Bucket("small", 0): 20.0, Bucket("small", 1): 20.0, Bucket("large", 0): 15_000.0, Bucket("large", 1): 15_000.0,
        Bucket("other", 0): 60_400 / 24}


def test_pooling_bounds_a_mix_better_than_each_partition_alone():
    """The overshoot this rule exists for: partitions of one mix (nine in ten records 200 B, one
    in ten 40 KB) each sampled over 60 records, and each planned to read a 16 MB share."""
    import random

    rng = random.Random(3)
    share, mean = 16_000_000, 0.9 * 200 + 0.1 * 40_000

    def sample():
        return sum(40_000 if rng.random() < 0.1 else 200 for _ in range(60)), 60

    def batch(estimates):  # bytes read: each partition's planned records at the true mean size
        return sum(share / e * mean for e in estimates)

    alone, pooled = [], []
    for _ in range(200):
        samples = [sample() for _ in range(8)]
        alone.append(batch([size / n for size, n in samples]))
        pooled.append(batch([sum(s for s, _ in samples) / sum(n for _, n in samples)] * 8))
    budget = 8 * share
    assert sorted(alone)[180] > 1.3 * budget  # one batch in ten: 30 % over, or worse
    assert sorted(pooled)[180] < 1.25 * budget
    assert sum(pooled) < sum(alone)


def test_a_failed_measurement_returns_nothing_with_a_warning_and_never_a_secret(caplog):
    consumer = FakeConsumer([KafkaException(KafkaError(KafkaError._TRANSPORT, f"login {SECRET} refused"))])
    with caplog.at_level(logging.WARNING):
        assert sizes(consumer).bytes_per_offset({T0: 0}, {T0: 5}) == {}
    assert "could not measure record sizes" in caplog.text and SECRET not in caplog.text and consumer.closed


def test_a_report_is_planned_with_when_it_covers_enough_records_or_bytes_and_only_for_lagging_buckets():
    reported = {"big": TopicSizes(SAMPLE_BYTES, 100), "many": TopicSizes(SAMPLE_RECORDS * 50, SAMPLE_RECORDS),
                "few": TopicSizes(500, 5), "none": TopicSizes(0, 0)}
    lags = {Bucket(t, p): n for t in ("big", "many", "few", "none", "other") for p, n in ((0, 10), (1, 0))}
    assert reported_sizes(reported, lags) == {Bucket("big", 0): SAMPLE_BYTES / 100, Bucket("many", 0): 50.0}
