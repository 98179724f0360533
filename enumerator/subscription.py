"""Which buckets a query reads (Flink's ``KafkaSubscriber``): ``subscribe``,
``subscribePattern`` or ``assign``.

Which process: the driver's planner worker. One metadata request per call (none for
``assign``, whose buckets are fixed).
"""

from __future__ import annotations

import logging
import re

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import ConfigError
from backlog_source.core.settings import SourceSettings
from backlog_source.enumerator.kafka_offsets import OffsetsClient

log = logging.getLogger(__name__)


class Subscription:
    """The buckets the subscription covers now. Not thread-safe (Spark calls serially)."""

    def __init__(self, settings: SourceSettings, client: OffsetsClient) -> None:
        self._settings = settings
        self._client = client
        self._pattern = re.compile(settings.subscribe_pattern) if settings.subscribe_pattern else None
        self._warned: set[tuple[str, ...]] = set()

    def buckets(self) -> set[Bucket]:
        """Every bucket the query reads now. Subscribed topics that do not exist yet are
        logged once and read once they appear, as in Spark. The control topic never matches
        a pattern."""
        settings = self._settings
        if settings.assign is not None:
            return set(settings.assign)
        counts = self._client.partition_counts(settings.subscribe)  # every topic for a pattern
        if settings.subscribe is not None:
            topics = [t for t in settings.subscribe if t in counts]
            missing = tuple(sorted(set(settings.subscribe) - set(counts)))
            if missing and missing not in self._warned:
                self._warned.add(missing)
                log.warning("subscribed topic(s) %s do not exist yet; the query reads them once they appear",
                            ", ".join(missing))
        else:
            assert self._pattern is not None
            topics = [t for t in counts if self._pattern.fullmatch(t) and t != settings.backlog_events_topic]
        return {Bucket(topic, p) for topic in topics for p in range(counts[topic])}

    def check_assigned_exist(self) -> None:
        """For ``assign``: raise :class:`ConfigError` naming partitions that do not exist."""
        if self._settings.assign is None:
            return
        counts = self._client.partition_counts({b.topic for b in self._settings.assign})
        missing = sorted(b for b in self._settings.assign if b.partition >= counts.get(b.topic, 0))
        if missing:
            raise ConfigError(f"option 'assign' names partition(s) that do not exist: {', '.join(map(str, missing))}")
