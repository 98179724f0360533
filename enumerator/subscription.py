"""Which buckets a query reads (Flink's ``KafkaSubscriber``): ``subscribe``,
``subscribePattern`` or ``assign``, and the identity (KIP-516 topic id) of each topic read.

Which process: the driver's planner worker. One DescribeTopicPartitions request per call
(all three kinds, as Spark's admin-based offset reader describes the topics of each), and
for a pattern one metadata request before it for the topic names.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from backlog_source.core.buckets import Bucket, TopicIdentity
from backlog_source.core.errors import ConfigError
from backlog_source.core.settings import SourceSettings
from backlog_source.enumerator.kafka_admin import OffsetsClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Covered:
    """What the subscription covers now: each topic read, by identity, and its buckets."""

    topics: dict[str, TopicIdentity]
    buckets: frozenset[Bucket]
    #: Topics ``subscribe`` or ``assign`` names that do not exist (never for a pattern).
    missing: tuple[str, ...] = ()

    @property
    def topic_ids(self) -> dict[str, str]:
        return {name: identity.topic_id for name, identity in self.topics.items()}


class Subscription:
    """The buckets the subscription covers now. Not thread-safe (Spark calls serially).

    ``wait_for_topics``: True for a stream, which logs a subscribed topic that does not exist
    yet and reads it once it appears; False for a batch read, which leaves the missing topics
    to its caller (:attr:`Covered.missing`) and logs nothing."""

    def __init__(self, settings: SourceSettings, client: OffsetsClient, *, wait_for_topics: bool = True) -> None:
        self._settings = settings
        self._client = client
        self._wait_for_topics = wait_for_topics
        self._pattern = re.compile(settings.subscribe_pattern) if settings.subscribe_pattern else None
        self._warned: set[tuple[str, ...]] = set()
        # The buckets of the last listing, by each topic's partition count: built again only
        # when a count changes (ten thousand Buckets a batch otherwise).
        self._buckets: tuple[dict[str, int], frozenset[Bucket]] = ({}, frozenset())

    def buckets(self) -> set[Bucket]:
        """Every bucket the query reads now (see :meth:`covered`)."""
        return set(self.covered().buckets)

    def covered(self) -> Covered:
        """Every topic and bucket the query reads now.

        ``subscribe``: subscribed topics that do not exist yet are in :attr:`Covered.missing`;
        a stream logs them once and reads them once they appear. ``subscribePattern``: every topic whose name the pattern
        matches *anywhere* (Python's ``re.search``, as Spark's ``findFirstIn``; anchor it
        with ``^...$`` for whole names, as Kafka's own consumer matches), never one of Kafka's
        internal topics (by the broker's flag: a user topic named ``__...`` is selected, as
        Spark selects it) nor the control topic. ``assign``: the assigned partitions
        of topics that exist."""
        settings = self._settings
        missing: tuple[str, ...] = ()
        if settings.assign is not None:
            assigned = {b.topic for b in settings.assign}
            topics = self._client.describe_topics(assigned)
            buckets = {b for b in settings.assign if b.topic in topics and b.partition < topics[b.topic].partitions}
            return Covered(topics, frozenset(buckets), tuple(sorted(assigned - set(topics))))
        if settings.subscribe is not None:
            topics = self._client.describe_topics(settings.subscribe)
            missing = tuple(sorted(set(settings.subscribe) - set(topics)))
            if missing and self._wait_for_topics and missing not in self._warned:
                self._warned.add(missing)
                log.warning("subscribed topic(s) %s do not exist yet; the query reads them once they appear",
                            ", ".join(missing))
        elif self._pattern is not None:
            matched = [t for t in self._client.topic_names()
                       if self._pattern.search(t) and t != settings.backlog_events_topic]
            topics = {name: identity for name, identity in self._client.describe_topics(matched).items()
                      if not identity.internal}
        else:  # SourceSettings refuses this at load; a hand-built one is refused here
            raise ConfigError("none of 'subscribe', 'subscribePattern' or 'assign' is set: exactly one must be")
        counts = {topic: identity.partitions for topic, identity in topics.items()}
        if counts != self._buckets[0]:
            self._buckets = (counts, frozenset(Bucket(topic, p) for topic, n in counts.items() for p in range(n)))
        return Covered(topics, self._buckets[1], missing)

    def check_assigned_exist(self) -> None:
        """For ``assign``: raise :class:`ConfigError` naming partitions that do not exist."""
        if self._settings.assign is None:
            return
        counts = self._client.partition_counts({b.topic for b in self._settings.assign})
        missing = sorted(b for b in self._settings.assign if b.partition >= counts.get(b.topic, 0))
        if missing:
            raise ConfigError(f"option 'assign' names partition(s) that do not exist: {', '.join(map(str, missing))}")
