"""The control topic as the enumerator sees it: created once, explicitly; checked before
every read; re-established when someone deleted or re-created it.

Which process: the driver's planner worker. BacklogFinishEvents only say *how* a bucket
left backlog (the driver's plan and the committed positions decide *when*), so a lost
control topic loses attribution, never correctness: the source re-creates it (one
partition) and goes on, with a warning naming ``backlog.eventsTopic``. Publishers never
create it (``allow.auto.create.topics=false``), so it never comes back with the broker's
default partition count behind the driver's back.
"""

from __future__ import annotations

import logging

from backlog_source.core.buckets import Bucket
from backlog_source.core.settings import SourceSettings
from backlog_source.core.text_enum import TextEnum
from backlog_source.enumerator.kafka_offsets import OffsetsClient, TopicIdentity
from backlog_source.events.channel import CONTROL_PARTITION, ControlMessages, ControlTopicReader

log = logging.getLogger(__name__)


class TopicChange(TextEnum):
    """What happened to the control topic since this run last looked."""

    UNCHANGED = "unchanged"
    RECREATED_HERE = "re-created here"  # it was deleted, and this run created it again: empty
    RECREATED = "re-created"  # someone else deleted and re-created it: read it from its start


class ControlTopic:
    """Opens, checks and reads the control topic named by ``backlog.eventsTopic``."""

    def __init__(self, settings: SourceSettings, client: OffsetsClient, reader: ControlTopicReader | None = None) -> None:
        self._topic = settings.backlog_events_topic
        self._client = client
        self._reader = reader or ControlTopicReader(settings.kafka, self._topic, settings.api_timeout_ms)
        self._identity: TopicIdentity | None = None

    def open(self) -> int:
        """Create the topic if it is missing (raises
        :class:`~backlog_source.core.errors.ControlTopicError` naming the option if it cannot) and
        return its log end: events written before are not this query's."""
        self._client.ensure_topic(self._topic, 1)
        self._identity = self._client.topic_identity(self._topic)
        if self._identity is not None:
            self._warn_if_partitioned(self._identity)
        return self._latest()

    def log_end(self) -> int:
        """The control topic's log end, after :meth:`_check` (re-created: 0)."""
        self._check()
        return self._latest()

    def _latest(self) -> int:
        bucket = Bucket(self._topic, CONTROL_PARTITION)
        return self._client.latest_offsets([bucket])[bucket]

    def read_from(self, position: int) -> ControlMessages:
        """The messages since ``position``, after checking the topic is still the one this
        run read: a missing topic is re-created and yields nothing; a re-created one is read
        from its start."""
        change = self._check()
        if change is TopicChange.RECREATED_HERE:
            return ControlMessages([], 0)
        return self._reader.read_from(0 if change is TopicChange.RECREATED else position)

    def _check(self) -> TopicChange:
        """Compare the topic with the one this run opened (re-creating it when it is missing)."""
        identity = self._client.topic_identity(self._topic)
        if identity is None:
            log.warning(
                "the control topic %r (option 'backlog.eventsTopic') was deleted while the query ran: re-creating it "
                "with 1 partition; BacklogFinishEvents published meanwhile are lost, buckets finish by position",
                self._topic,
            )
            self._client.ensure_topic(self._topic, 1)
            self._identity = self._client.topic_identity(self._topic)
            return TopicChange.RECREATED_HERE
        change = TopicChange.UNCHANGED
        if self._identity is not None and identity != self._identity:
            log.warning(
                "the control topic %r (option 'backlog.eventsTopic') was re-created while the query ran (%s, was %s): "
                "reading the new topic from its start", self._topic, identity, self._identity,
            )
            change = TopicChange.RECREATED
        if identity != self._identity:
            self._warn_if_partitioned(identity)
        self._identity = identity
        return change

    def _warn_if_partitioned(self, identity: TopicIdentity) -> None:
        if identity.partitions != 1:
            log.warning("the control topic %r has %d partitions; backlog-source uses partition %d only",
                        self._topic, identity.partitions, CONTROL_PARTITION)
