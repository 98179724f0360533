"""Offsets as Kafka answered them, or a failure: never a guess."""

import pytest
from confluent_kafka import KafkaError, KafkaException

from backlog_source.core.kafka_answers import NoValidOffsets, check_offsets, watermarks
from tests.fakes import FakeConsumer


def test_valid_answers_pass_through_unchanged():
    answers = {"t-0": 0, "t-1": 42}
    assert check_offsets(answers) is answers


def test_an_invalid_answer_fails_naming_each_partition_and_what_it_answered():
    with pytest.raises(NoValidOffsets, match=r"no valid offset for t-0 \(answered -1001\), t-2 \(answered -1\)"):
        check_offsets({"t-0": -1001, "t-1": 5, "t-2": -1})


def test_minus_one_is_an_answer_where_kafka_means_none_by_it():
    # Offsets by timestamp: -1 means "no record at or after it"; -1001 is still invalid.
    assert check_offsets({"t-0": -1}, lowest=-1) == {"t-0": -1}
    with pytest.raises(NoValidOffsets):
        check_offsets({"t-0": -1001}, lowest=-1)


def test_watermarks_ask_the_broker_not_the_cache():
    consumer = FakeConsumer([], watermarks=(3, 10))
    assert watermarks(consumer, "t-0", 2.5) == (3, 10)
    assert consumer.watermark_asks == [("t-0", 2.5, False)]


@pytest.mark.parametrize("answer", [(-1001, -1001), (0, -1001), (-1, 5)])
def test_watermarks_below_zero_are_a_failed_request(answer):
    with pytest.raises(NoValidOffsets, match=r"no valid offsets \(answered"):
        watermarks(FakeConsumer([], watermarks=answer), "t-0", 1)


def test_no_watermark_answer_in_time_is_a_failed_request():
    """confluent-kafka documents None for a timeout: a failed request, not a TypeError."""
    with pytest.raises(NoValidOffsets, match=r"no answer within 1 s"):
        watermarks(FakeConsumer([], watermarks=None), "t-0", 1)


def test_a_failed_watermark_request_raises_what_the_consumer_raised():
    timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT))
    with pytest.raises(KafkaException):
        watermarks(FakeConsumer([], watermarks=timed_out), "t-0", 1)
