"""The control topic (option ``backlog.eventsTopic``): one partition, events keyed by source id.

* :func:`publish` runs on executors: a short-lived producer, flushed before it returns;
  :func:`publish_once` is what readers call (at most once per worker and boundary).
* :class:`ControlTopicReader` runs in the driver's planner worker: it reads what is new
  since a position, up to the log end it saw when asked, and never waits for more.

Several queries may share one control topic; each ignores the others' events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from backlog_source.settings import SourceSettings, redact
from events import dedup
from events.model import BacklogFinishEvent

log = logging.getLogger(__name__)

CONTROL_PARTITION = 0


def publish_once(
    settings: SourceSettings,
    event: BacklogFinishEvent,
    publish_event: Callable[[SourceSettings, BacklogFinishEvent], bool] | None = None,
) -> None:
    """Publish ``event`` unless this worker already did for its source, bucket and boundary
    (:mod:`events.dedup`); after a failed publish a later attempt may publish again.

    Which process: a reader's Python worker. ``publish_event`` defaults to :func:`publish`.
    """
    key = (event.source_id, event.topic, event.partition, event.boundary_offset)
    if not dedup.first_time(*key):
        return
    if not (publish_event or publish)(settings, event):
        dedup.forget(*key)


def publish(settings: SourceSettings, event: BacklogFinishEvent) -> bool:
    """Publish ``event`` and wait for the broker's acknowledgement.

    Returns False (and logs why) instead of raising: a lost event never fails a read, since
    the enumerator also finishes a bucket once its committed position passed the boundary.
    """
    from confluent_kafka import Producer

    config = {
        **settings.kafka_config("events"),
        # One record per request: the event must be visible as soon as the task ends.
        "linger.ms": 0,
        "acks": "all",
        "message.timeout.ms": min(settings.poll_timeout_ms, 30_000),
    }
    delivered: list[object] = []
    try:
        producer = Producer(config)
        producer.produce(
            settings.backlog_events_topic,
            key=event.source_id.encode(),
            value=event.encode(),
            partition=CONTROL_PARTITION,
            on_delivery=lambda err, _msg: delivered.append(err),
        )
        producer.flush(config["message.timeout.ms"] / 1000 + 5)
    except Exception as exc:  # BufferError, KafkaException: never fail the read for this
        log.warning("could not publish %s: %s", _describe(event), redact(str(exc), settings))
        return False
    if not delivered or delivered[0] is not None:
        reason = redact(str(delivered[0]), settings) if delivered else "no acknowledgement in time"
        log.warning("could not publish %s: %s", _describe(event), reason)
        return False
    return True


def _describe(event: BacklogFinishEvent) -> str:
    return f"BacklogFinishEvent for {event.bucket} (boundary {event.boundary_offset})"


@dataclass(frozen=True)
class ControlMessages:
    """Messages read from the control topic: ``values`` in offset order, and the position
    after the last one."""

    values: list[bytes | None]
    next_position: int


class ControlTopicReader:
    """Reads the control topic from a given position to its current end.

    Which process: the driver's planner worker. The consumer is created on first use and is
    not picklable; :meth:`close` releases it.
    """

    def __init__(self, settings: SourceSettings) -> None:
        self._settings = settings
        self._consumer = None
        self._position: int | None = None

    def __getstate__(self) -> dict:
        return {"_settings": self._settings, "_consumer": None, "_position": None}

    def read_from(self, position: int) -> ControlMessages:
        """Every message at offsets ``[position, log end)``; the log end is asked once, so
        this returns even while other sources keep writing. Gives up quietly (returning what
        it has) after ``kafkaConsumer.pollTimeoutMs``; the next call continues."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        topic = self._settings.backlog_events_topic
        partition = TopicPartition(topic, CONTROL_PARTITION)
        timeout_s = self._settings.poll_timeout_ms / 1000
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self._settings.kafka_config("events"),
                    "group.id": self._settings.consumer_group_id(),
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": True,
                    # A control topic trimmed by retention: start at what is left.
                    "auto.offset.reset": "earliest",
                }
            )
        try:
            low, high = self._consumer.get_watermark_offsets(partition, timeout=timeout_s, cached=False)
        except Exception as exc:
            log.warning("could not read the control topic %r: %s", topic, redact(str(exc), self._settings))
            return ControlMessages([], position)
        position = max(position, low)
        if position >= high:
            return ControlMessages([], position)
        if self._position != position:
            self._consumer.assign([TopicPartition(topic, CONTROL_PARTITION, position)])
        values: list[bytes | None] = []
        deadline = time.monotonic() + timeout_s
        while position < high and time.monotonic() < deadline:
            for message in self._consumer.consume(1000, 0.2):
                error = message.error()
                if error is None:
                    if message.offset() >= position:
                        values.append(message.value())
                        position = message.offset() + 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    position = max(position, message.offset())
                else:
                    log.warning("reading the control topic %r: %s", topic, redact(error.str(), self._settings))
        self._position = position
        return ControlMessages(values, position)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
            self._position = None
