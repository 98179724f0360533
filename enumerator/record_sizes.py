"""How many bytes an offset of each bucket holds where a catch-up batch starts: the
measurement the byte budget (``backlog.maxBytesPerTrigger``) plans with. After a catch-up
batch, what its readers reported (:func:`reported_sizes`); otherwise (the first catch-up
batch, a lost report) a sample, as follows.

Which process: the driver's planner worker, for a catch-up batch that has a byte or time
budget and topics no size report covers. One consumer for the run, created on first use,
never pickled. It reads from each sampled bucket's position (fetches of
:data:`SAMPLE_FETCH_BYTES`, up to its share of :data:`SAMPLE_BYTES` or :data:`SAMPLE_RECORDS`
records) and counts the bytes Spark's rows will hold per record: key, value, and (with
``includeHeaders``) header keys and values. Bytes are divided by the offsets the sample
spans, gaps included (transaction markers, compaction), because budgets cut ranges of
offsets, and pooled over each topic's sampled partitions (:func:`pooled_by_topic`).

A measurement that fails is never fatal: it returns what it has (maybe nothing), and the
planner falls back to a safe guess.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from confluent_kafka import Consumer, Message, TopicPartition

from backlog_source.core.buckets import Bucket
from backlog_source.core.kafka_config import ClientRole, KafkaClientConfig
from backlog_source.events.sizes_report import TopicSizes

log = logging.getLogger(__name__)

#: At most this many buckets are sampled per batch, the ones with the most lag first; each
#: bucket is planned with its topic's figure (a wide topic in backlog costs one bounded fetch).
MAX_SAMPLED = 32
#: Per-partition fetch size of a sample, and the least a sampled partition gives: large enough
#: to hold several of the large records of a mix with a tail of them, or the sample misses
#: them and the byte budget overshoots.
SAMPLE_FETCH_BYTES = 256 << 10
#: What all of a batch's samples read together, at most: each sampled partition is read until
#: it has given its share of this (never less than one fetch, :data:`SAMPLE_FETCH_BYTES`),
#: :data:`SAMPLE_RECORDS` records, or its end. A mean dominated by a 10 % tail of large
#: records needs thousands of records to be within a few per cent.
SAMPLE_BYTES = 8 << 20
#: Records per partition that are enough whatever their size (small records: cheap to count).
SAMPLE_RECORDS = 2_000
#: The longest a sample waits for its fetches.
SAMPLE_WAIT_S = 2.0


def record_bytes(message: Message, include_headers: bool = True) -> int:
    """What one record holds in Spark's row: key, value, and with ``includeHeaders`` header
    keys and values (``reader/arrow.py``, ``data_bytes``, counts a batch the same way)."""
    size = len(message.key() or b"") + len(message.value() or b"")
    for key, value in (message.headers() or ()) if include_headers else ():
        size += len(key) + len(value or b"")
    return size


class RecordSizes(Protocol):
    """What the enumerator asks: bytes per offset at the given positions."""

    def bytes_per_offset(self, positions: Mapping[Bucket, int], lags: Mapping[Bucket, int]) -> dict[Bucket, float]:
        """Bytes per offset measured at ``positions`` for the buckets of ``lags`` (records
        available from there): each bucket its topic's figure, from all the topic's sampled
        partitions together (:func:`pooled_by_topic`); empty when nothing could be measured."""

    def close(self) -> None:
        """Release the consumer; it is created again on next use."""


def pooled_by_topic(measured: Mapping[Bucket, tuple[int, int]], buckets: list[Bucket]) -> dict[Bucket, float]:
    """Bytes per offset of each of ``buckets``: its topic's sampled bytes over the offsets they
    span, all sampled partitions of the topic together (``measured``: bucket -> (bytes,
    offsets)); a topic with nothing sampled gets the figure of all samples together.

    Why pooled: one partition's fetch holds a few dozen records, too few for a mix with a tail
    of large ones, and a partition whose sample came out light is planned too many records.
    Planned partition by partition, those errors add up instead of cancelling, and a batch
    overshoots its byte budget. Partitions of one topic share
    its producers and so its mix of sizes."""
    by_topic: dict[str, list[int]] = {}
    for bucket, (size, offsets) in measured.items():
        totals = by_topic.setdefault(bucket.topic, [0, 0])
        totals[0] += size
        totals[1] += offsets
    everything = sum(t[0] for t in by_topic.values()) / sum(t[1] for t in by_topic.values())
    per_topic = {topic: size / offsets for topic, (size, offsets) in by_topic.items()}
    return {b: per_topic.get(b.topic, everything) for b in buckets}


def reported_sizes(reported: Mapping[str, TopicSizes], lags: Mapping[Bucket, int]) -> dict[Bucket, float]:
    """Bytes per offset of the lagging buckets of ``lags`` whose topic the last batch's readers
    reported (``events/sizes_report.py``) over at least :data:`SAMPLE_RECORDS` offsets or
    :data:`SAMPLE_BYTES` bytes: each bucket its topic's figure. A report covers everything the
    batch read, so where there is one the sample (a few MiB) is not taken; a smaller report
    (a batch of a few records) is no better than the sample."""
    enough = {topic: s.bytes / s.offsets for topic, s in reported.items()
              if s.offsets > 0 and (s.offsets >= SAMPLE_RECORDS or s.bytes >= SAMPLE_BYTES)}
    return {b: enough[b.topic] for b, n in lags.items() if n > 0 and b.topic in enough}


class KafkaRecordSizes:
    """:class:`RecordSizes` with a confluent-kafka consumer (see the module docstring)."""

    def __init__(self, kafka: KafkaClientConfig, *, include_headers: bool = False,
                 consumer_factory: Callable[[dict], Consumer] = Consumer,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``include_headers``: the option ``includeHeaders`` (headers count only when the rows
        hold them). ``consumer_factory`` and ``clock`` are replaced by unit tests only."""
        self._kafka = kafka
        self._include_headers = include_headers
        self._factory = consumer_factory
        self._clock = clock
        self._consumer: Consumer | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_consumer": None}

    def bytes_per_offset(self, positions: Mapping[Bucket, int], lags: Mapping[Bucket, int]) -> dict[Bucket, float]:
        lagging = sorted((b for b, n in lags.items() if n > 0), key=lambda b: (-lags[b], b))
        sampled = lagging[:MAX_SAMPLED]
        if not sampled:
            return {}
        try:
            measured = self._sample({b: positions[b] for b in sampled})
        except Exception as exc:  # process boundary: best effort; a failure falls back
            log.warning("could not measure record sizes for the byte budget (%s); planning with a safe guess",
                        self._kafka.redact(str(exc) or type(exc).__name__))
            self.close()
            return {}
        if not measured:
            return {}
        return pooled_by_topic(measured, lagging)

    def _sample(self, positions: Mapping[Bucket, int]) -> dict[Bucket, tuple[int, int]]:
        """Per bucket, the bytes of the records read from its position and the offsets they
        span: until it has given ``max(SAMPLE_FETCH_BYTES, SAMPLE_BYTES / buckets)`` bytes,
        :data:`SAMPLE_RECORDS` records or reached its end, within :data:`SAMPLE_WAIT_S`."""
        consumer = self._client()
        consumer.assign([TopicPartition(b.topic, b.partition, o) for b, o in positions.items()])
        enough_bytes = max(SAMPLE_FETCH_BYTES, SAMPLE_BYTES // len(positions))
        sizes: dict[Bucket, int] = {}
        counts: dict[Bucket, int] = {}
        last: dict[Bucket, int] = {}
        done: set[Bucket] = set()
        deadline = self._clock() + SAMPLE_WAIT_S
        try:
            while len(done) < len(positions) and self._clock() < deadline:
                for message in consumer.consume(1_000, 0.05):
                    bucket = Bucket(message.topic(), message.partition())
                    if bucket not in positions or bucket in done:
                        continue
                    if message.error() is not None:
                        done.add(bucket)  # end of partition, out of range: what arrived is the sample
                        continue
                    sizes[bucket] = sizes.get(bucket, 0) + record_bytes(message, self._include_headers)
                    counts[bucket] = counts.get(bucket, 0) + 1
                    last[bucket] = message.offset()
                    if sizes[bucket] >= enough_bytes or counts[bucket] >= SAMPLE_RECORDS:
                        done.add(bucket)
        finally:
            consumer.unassign()
        return {b: (size, last[b] - positions[b] + 1) for b, size in sizes.items()}

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self._factory(self._kafka.librdkafka(
                ClientRole.SIZE_SAMPLER, **{"max.partition.fetch.bytes": SAMPLE_FETCH_BYTES}))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # process boundary: cleanup; already closed or the broker gone
                pass
            self._consumer = None
