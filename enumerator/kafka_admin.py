"""The enumerator's narrow view of Kafka: metadata and offsets, nothing else.

:class:`OffsetsClient` is the protocol the enumerator depends on; :class:`KafkaOffsetsClient`
implements it with confluent-kafka's ``AdminClient`` and is the only module of the
enumerator that imports confluent_kafka. Unit tests use an in-memory fake instead.

Which process: the driver's planner worker. The AdminClient is created lazily on first use
and is never pickled.

Every offsets call is one batched ``ListOffsets`` request for all buckets (per broker), not
one request per partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, TypeVar

from backlog_source.buckets import Bucket
from backlog_source.errors import ControlTopicError, KafkaUnavailableError
from backlog_source.settings import IsolationLevel, SourceSettings, redact

log = logging.getLogger(__name__)
T = TypeVar("T")


class OffsetsClient(Protocol):
    """What the enumerator asks of Kafka. All methods may raise :class:`KafkaUnavailableError`."""

    def partition_counts(self) -> dict[str, int]:
        """Every non-internal topic the cluster has, with its partition count."""

    def earliest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        """The first available offset of each bucket."""

    def latest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        """The log end offset of each bucket: the high watermark, or the last stable offset
        under ``isolation.level=read_committed``."""

    def offsets_for_timestamps(self, timestamps: Mapping[Bucket, int]) -> dict[Bucket, int | None]:
        """The first offset whose timestamp is >= the given one, or None when there is none."""

    def ensure_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` if it is missing. Raises :class:`ControlTopicError` if it cannot."""

    def close(self) -> None:
        """Release the client; it may be used again afterwards (it is recreated)."""


class KafkaOffsetsClient:
    """:class:`OffsetsClient` over confluent-kafka's AdminClient, with retries.

    Each call is tried ``fetchOffset.numRetries + 1`` times, ``fetchOffset.retryIntervalMs``
    apart, each try bounded by ``kafkaConsumer.pollTimeoutMs``, as Spark's Kafka source does.
    """

    def __init__(self, settings: SourceSettings) -> None:
        self._settings = settings
        self._admin = None

    def __getstate__(self) -> dict:
        # A live AdminClient cannot be pickled; a copy reconnects on first use.
        return {"_settings": self._settings, "_admin": None}

    @property
    def _timeout_s(self) -> float:
        return self._settings.poll_timeout_ms / 1000

    def _client(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._settings.kafka_config("admin"))
        return self._admin

    def close(self) -> None:
        # AdminClient has no close(); dropping the last reference ends its threads.
        self._admin = None

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        attempts = self._settings.fetch_offset_num_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except Exception as exc:  # confluent raises KafkaException and plain errors alike
                message = redact(str(exc), self._settings)
                if attempt == attempts:
                    raise KafkaUnavailableError(
                        f"{what} failed after {attempts} attempt(s) "
                        f"(fetchOffset.numRetries={self._settings.fetch_offset_num_retries}, "
                        f"kafkaConsumer.pollTimeoutMs={self._settings.poll_timeout_ms}): {message}"
                    ) from None
                log.warning("%s failed (attempt %d of %d), retrying: %s", what, attempt, attempts, message)
                time.sleep(self._settings.fetch_offset_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def partition_counts(self) -> dict[str, int]:
        def fetch() -> dict[str, int]:
            metadata = self._client().list_topics(timeout=self._timeout_s)
            return {
                name: len(topic.partitions)
                for name, topic in metadata.topics.items()
                if topic.error is None and not name.startswith("__")
            }

        return self._retrying("listing topics", fetch)

    def earliest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets("fetching earliest offsets", {b: OffsetSpec.earliest() for b in buckets})

    def latest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets("fetching latest offsets", {b: OffsetSpec.latest() for b in buckets})

    def offsets_for_timestamps(self, timestamps: Mapping[Bucket, int]) -> dict[Bucket, int | None]:
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets(
            "fetching offsets for timestamps", {b: OffsetSpec.for_timestamp(ts) for b, ts in timestamps.items()}
        )
        # Kafka answers -1 when no record has a timestamp >= the one asked for.
        return {bucket: (offset if offset >= 0 else None) for bucket, offset in found.items()}

    def _list_offsets(self, what: str, specs: Mapping[Bucket, object]) -> dict[Bucket, int]:
        if not specs:
            return {}
        from confluent_kafka import IsolationLevel as KafkaIsolation
        from confluent_kafka import TopicPartition

        isolation = (
            KafkaIsolation.READ_COMMITTED
            if self._settings.isolation_level is IsolationLevel.READ_COMMITTED
            else KafkaIsolation.READ_UNCOMMITTED
        )

        def fetch() -> dict[Bucket, int]:
            admin = self._client()  # keep referenced until the futures resolve
            futures = admin.list_offsets(
                {TopicPartition(b.topic, b.partition): spec for b, spec in specs.items()},
                isolation_level=isolation,
                request_timeout=self._timeout_s,
            )
            return {
                Bucket(tp.topic, tp.partition): future.result(timeout=self._timeout_s).offset
                for tp, future in futures.items()
            }

        return self._retrying(what, fetch)

    def ensure_topic(self, topic: str, partitions: int) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        if topic in self.partition_counts():
            return
        admin = self._client()
        future = admin.create_topics([NewTopic(topic, partitions)], request_timeout=self._timeout_s)[topic]
        try:
            future.result(timeout=self._timeout_s)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return  # another query created it first
            raise ControlTopicError(
                f"cannot create the control topic {topic!r} named by option 'backlog.eventsTopic': "
                f"{redact(str(exc), self._settings)}. Create it (1 partition) or grant this client "
                "CREATE and READ/WRITE on it, or point 'backlog.eventsTopic' at a topic that exists"
            ) from None
