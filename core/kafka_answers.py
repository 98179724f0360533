"""Offsets as Kafka answered them, or a failure: never a guess.

librdkafka answers some timed-out offset requests with OFFSET_INVALID (-1001) and no error
(seen for ListOffsets futures and watermark queries with the broker stopped). Taken for an
offset, -1001 reads as a log end below what was read (false data loss, or a rewind), an
earliest offset to skip to, or a position to checkpoint. Every offset request of this
project goes through :func:`check_offsets`, so an invalid answer fails like a timeout.

Which process: any (the driver's offsets client and control-topic reader, the executors'
readers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from backlog_source.core.errors import BacklogSourceError

K = TypeVar("K")
M = TypeVar("M", bound=Mapping)


class NoValidOffsets(BacklogSourceError):
    """An answer from Kafka that holds no valid offset for some partition, or no answer in
    time. Callers treat it as a failed request: retried, logged or raised as their own error."""


def check_offsets(answers: M, lowest: int = 0) -> M:
    """``answers`` (partition -> offset) unchanged, or :class:`NoValidOffsets` naming each
    partition answered below ``lowest`` (0 for offsets; -1 where Kafka's -1 means "none",
    as for offsets by timestamp)."""
    if not answers or min(answers.values()) >= lowest:  # at C speed: the common case, every plan
        return answers
    invalid = sorted(f"{key} (answered {offset})" for key, offset in answers.items() if offset < lowest)
    if invalid:
        raise NoValidOffsets(f"no valid offset for {', '.join(invalid)}")
    return answers


def watermarks(consumer: Any, partition: Any, timeout_s: float) -> tuple[int, int]:
    """``(low, high)`` of ``partition``, asked of the broker through ``consumer`` (a
    confluent-kafka Consumer). Raises what the consumer raises (``KafkaException``: timed
    out, broker down) and :class:`NoValidOffsets` for an answer below 0 or none (confluent-kafka
    documents None for a timeout)."""
    answer = consumer.get_watermark_offsets(partition, timeout=timeout_s, cached=False)
    if answer is None:
        raise NoValidOffsets(f"no answer within {timeout_s:g} s")
    low, high = answer
    if low < 0 or high < 0:
        raise NoValidOffsets(f"no valid offsets (answered {low}, {high})")
    return low, high
