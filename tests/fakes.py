"""In-memory fakes for unit tests: a Kafka offsets client and a consumer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from backlog_source.buckets import Bucket


@dataclass
class FakeOffsetsClient:
    """A cluster as ``{topic: [(earliest, latest), ...]}``, one pair per partition.

    ``timestamps`` maps a bucket to ``[(timestamp_ms, offset), ...]`` in offset order.
    ``calls`` records each method called, to check request batching.
    """

    topics: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    timestamps: dict[Bucket, list[tuple[int, int]]] = field(default_factory=dict)
    stable: dict[Bucket, int] = field(default_factory=dict)  # last stable offsets, if set
    calls: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    closed: int = 0

    def partition_counts(self) -> dict[str, int]:
        self.calls.append("partition_counts")
        return {topic: len(parts) for topic, parts in self.topics.items()}

    def _pair(self, bucket: Bucket) -> tuple[int, int]:
        return self.topics[bucket.topic][bucket.partition]

    def earliest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        self.calls.append("earliest_offsets")
        return {b: self._pair(b)[0] for b in buckets}

    def latest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        self.calls.append("latest_offsets")
        return {b: self.stable.get(b, self._pair(b)[1]) for b in buckets}

    def offsets_for_timestamps(self, timestamps: Mapping[Bucket, int]) -> dict[Bucket, int | None]:
        self.calls.append("offsets_for_timestamps")
        result = {}
        for bucket, ts in timestamps.items():
            matches = [offset for stamp, offset in self.timestamps.get(bucket, []) if stamp >= ts]
            result[bucket] = matches[0] if matches else None
        return result

    def ensure_topic(self, topic: str, partitions: int) -> None:
        if topic not in self.topics:
            self.topics[topic] = [(0, 0)] * partitions
            self.created.append(topic)

    def close(self) -> None:
        self.closed += 1

    def append(self, topic: str, partition: int, count: int) -> None:
        earliest, latest = self.topics[topic][partition]
        self.topics[topic][partition] = (earliest, latest + count)


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeControlTopic:
    """The control topic as a list of message values; ``reads`` counts read_from calls."""

    def __init__(self) -> None:
        self.values: list[bytes | None] = []
        self.reads = 0
        self.closed = False

    def read_from(self, position: int):
        from events.channel import ControlMessages

        self.reads += 1
        return ControlMessages(list(self.values[position:]), max(position, len(self.values)))

    def close(self) -> None:
        self.closed = True
