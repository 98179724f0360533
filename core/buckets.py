"""How Kafka addresses what the source reads: a bucket is one topic-partition (these helpers
convert per-bucket maps to and from Spark's Kafka offset JSON shape ``{"topic": {"partition":
offset}}``), and a :class:`TopicIdentity` is a topic's id and partition count.

Shared by the enumerator (driver), the reader (executors) and the events package, so it
depends on nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from backlog_source.core.errors import OffsetFormatError


class Bucket(NamedTuple):
    """One topic-partition. Ordered by topic, then partition."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class _PartitionKeys(dict):
    """``str(partition)``, made once per partition number: :func:`to_nested` runs over every
    partition of a query at each plan (ten thousand, several times a plan)."""

    def __missing__(self, partition: int) -> str:
        key = self[partition] = str(partition)
        return key


_PARTITION_KEYS = _PartitionKeys()


def to_nested(values: Mapping[Bucket, int]) -> dict[str, dict[str, int]]:
    """``{Bucket: n}`` -> ``{"topic": {"partition": n}}``, sorted so equal maps give equal JSON."""
    nested: dict[str, dict[str, int]] = {}
    keys = _PARTITION_KEYS
    current, inner = None, nested
    # Sorting the buckets, not the (bucket, n) pairs: a pair compares its bucket first, through
    # one more level of comparison per step. A map already in bucket order (every offset map
    # the planner makes: Enumerator._compute_initial_offset) sorts in one pass.
    for bucket in sorted(values):
        topic, partition = bucket
        if topic != current:
            current, inner = topic, nested.setdefault(topic, {})
        inner[keys[partition]] = int(values[bucket])
    return nested


def from_nested(nested: Any, what: str) -> dict[Bucket, int]:
    """The inverse of :func:`to_nested`; ``what`` names the field in error messages.

    Raises :class:`OffsetFormatError` when the shape is not ``{"topic": {"partition": int}}``.
    """
    if not isinstance(nested, Mapping):
        raise OffsetFormatError(f"{what} must be an object of topics, got {type(nested).__name__}")
    result: dict[Bucket, int] = {}
    for topic, partitions in nested.items():
        if not isinstance(partitions, Mapping):
            raise OffsetFormatError(f"{what}: topic {topic!r} must map partitions to offsets")
        for partition, value in partitions.items():
            try:
                bucket = Bucket(str(topic), int(partition))
            except (TypeError, ValueError):
                raise OffsetFormatError(f"{what}: partition {partition!r} of {topic!r} is not a number") from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise OffsetFormatError(f"{what}: value for {bucket} must be an integer, got {value!r}")
            result[bucket] = value
    return result


@dataclass(frozen=True)
class TopicIdentity:
    """A topic's id (a re-created topic gets a new one), partition count, and whether Kafka
    counts it as one of its own internal topics (``__consumer_offsets``,
    ``__transaction_state``, ...: the broker's flag, not a ``__`` prefix a user topic may have
    too). A pattern never selects an internal topic, as Spark's admin listing leaves them out;
    ``subscribe`` and ``assign`` read them when named."""

    topic_id: str
    partitions: int
    internal: bool = False

    def __str__(self) -> str:
        return f"id {self.topic_id}, {self.partitions} partition(s)"
