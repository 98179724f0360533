"""The control topic (option ``backlog.eventsTopic``): one partition, events keyed by source
id; its writers and its reader, in one place.

* :func:`publish` runs on executors: a producer kept by the worker (:data:`PRODUCER_POOL`),
  flushed before it returns;
  :func:`publish_once` is what readers call for a BacklogFinishEvent (at most once per
  worker and boundary); a task of a catch-up batch publishes a RecordSizesReport
  (``events/sizes_report.py``) with :func:`publish` itself.
* :class:`ControlTopicReader` runs in the driver's planner worker: it reads what is new
  since a position, up to the log end it saw when asked, and never waits for more.
* :class:`ControlTopic` is the control topic as the enumerator sees it (the driver's planner
  worker): created once, explicitly; checked before every read; re-established when someone
  deleted or re-created it. BacklogFinishEvents only say *how* a bucket left backlog (the
  driver's plan and the committed positions decide *when*) and RecordSizesReports only refine
  an estimate, so a lost control topic loses attribution and precision, never correctness:
  the source re-creates it (one partition) and goes on, with a warning naming
  ``backlog.eventsTopic``. Publishers never create it
  (``allow.auto.create.topics=false``), so it never comes back with the broker's default
  partition count behind the driver's back. For the same reason a principal that Kafka's
  ACLs refuse the topic (DESCRIBE, CREATE of a missing one, READ, WRITE) runs the query
  without it: one warning names the topic, the refused ACL and what granting them adds
  (:func:`running_without`), and the splits tell readers not to publish
  (``KafkaSplit.publish_events``). ``backlog.eventsTopic=none`` asks for the same, silently.

Several queries may share one control topic; each ignores the others' events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from backlog_source.core.buckets import Bucket, TopicIdentity
from backlog_source.core.client_pool import EVICT_EVERY_S, ClientPool, settings_key
from backlog_source.core.errors import BacklogSourceError, ControlTopicError
from backlog_source.core.kafka_answers import watermarks
from backlog_source.core.kafka_config import ClientRole, KafkaClientConfig
from backlog_source.core.kafka_refusals import AUTHORIZATION_CODES, AccessRefusedError, Refusal, principal
from backlog_source.core.settings import EVENTS_TOPIC_OFF, ReaderConfig, SourceSettings
from backlog_source.core.text_enum import TextEnum
from backlog_source.events import dedup
from backlog_source.events.finish_event import BacklogFinishEvent

log = logging.getLogger(__name__)
T = TypeVar("T")

CONTROL_PARTITION = 0
#: At most this many control messages per consume() call, each call waiting at most this long.
_CONSUME_BATCH, _CONSUME_WAIT_S = 1000, 0.2


def control_topic_refused(topic: str, kafka: KafkaClientConfig, operation: str | None,
                          detail: str) -> ControlTopicError:
    """The error for an ACL that refuses this client the control topic ``topic``: the cause
    first, then every ACL the control topic needs (``detail``: librdkafka's words, redacted
    here). Publishers and the driver's reader log it as a warning when a refusal meets them
    after the driver found the topic usable (an ACL removed while the query runs)."""
    who = principal(kafka)
    return ControlTopicError(
        f"{_refusal(topic, kafka, operation, detail)}. {_acls(topic, who)}; or set 'backlog.eventsTopic' to a topic "
        f"{who} may use"
    )


def _refusal(topic: str, kafka: KafkaClientConfig, operation: str | None, detail: str) -> str:
    return (f"authorization refused for topic {topic!r}, the control topic (option 'backlog.eventsTopic'): Kafka at "
            f"{kafka.bootstrap_servers} does not allow {principal(kafka)} {operation or 'access'} on it "
            f"({kafka.redact(detail)})")


def _acls(topic: str, who: str) -> str:
    return (f"Grant {who} DESCRIBE, READ and WRITE on topic {topic!r}, and CREATE on it unless it is created "
            "beforehand (1 partition)")


def running_without(topic: str, kafka: KafkaClientConfig, operation: str | None, detail: str) -> str:
    """The one warning of a run whose principal may not use the control topic ``topic``: the
    refusal (which operation, ``detail`` redacted), what the query does without the topic,
    what granting its ACLs would add, and how to say that no control topic is wanted."""
    return (
        f"{_refusal(topic, kafka, operation, detail)}. The query runs without its control topic, as with "
        f"'backlog.eventsTopic={EVENTS_TOPIC_OFF}': the driver decides the boundaries, the backlog flag, the budgets, "
        "the spans, the metrics and the switch as before, but no executor confirms a partition's finish with a "
        "BacklogFinishEvent (it is taken from the committed position: backlog.finished_by=position), and each "
        "catch-up batch is planned from a sample of records the driver reads where the batch starts instead of "
        f"the record sizes the previous batch's readers measured. {_acls(topic, principal(kafka))}, to have both; "
        f"or set 'backlog.eventsTopic' to {EVENTS_TOPIC_OFF!r} to run without them and without this warning"
    )


def publish_once(
    config: ReaderConfig,
    event: BacklogFinishEvent,
    publish_event: Callable[[ReaderConfig, BacklogFinishEvent], bool] | None = None,
) -> None:
    """Publish ``event`` unless this worker already did for its source, bucket and boundary
    (:mod:`backlog_source.events.dedup`); after a failed publish a later attempt may publish again.

    Which process: a reader's Python worker. ``publish_event`` defaults to :func:`publish`.
    """
    key = (event.source_id, event.topic, event.partition, event.boundary_offset)
    if not dedup.first_time(*key):
        return
    if not (publish_event or publish)(config, event):
        dedup.forget(*key)


class ControlEvent(Protocol):
    """What readers publish: a BacklogFinishEvent or a RecordSizesReport. Each says how long
    its publish may wait for the broker (``publish_timeout_ms``)."""

    source_id: str
    publish_timeout_ms: int

    def encode(self) -> bytes: ...

    def describe(self) -> str: ...


class ProducerPool(ClientPool):
    """A worker's idle control-event producers (:class:`~backlog_source.core.client_pool.ClientPool`),
    one per kind of settings (each kind of event has its own ``message.timeout.ms``).

    A publish borrows one and gives it back only when its event was acknowledged and
    nothing is left in the producer's queue; a producer whose publish failed is discarded.
    Closing purges what is left first, so it never waits for a broker that is gone
    (``Producer.close()`` flushes)."""

    kind = "producer"

    def _reset(self, producer) -> None:
        if len(producer):
            raise RuntimeError("messages left in the queue")

    def _close(self, producer) -> None:
        producer.purge()
        close = getattr(producer, "close", None)  # confluent-kafka before 2.11 has none:
        if close is not None:  # dropping the last reference then destroys the producer
            close()


#: This worker's control-event producers (module state lives as long as the Python worker):
#: a catch-up task publishes a size report, and a fresh producer per publish costs a connection
#: (and the TLS and SASL handshakes of a secured cluster) per task.
PRODUCER_POOL = ProducerPool(Producer, capacity=2, evict_every_s=EVICT_EVERY_S)


def publish(config: ReaderConfig, event: ControlEvent, pool: ClientPool = PRODUCER_POOL) -> bool:
    """Publish ``event`` and wait for the broker's acknowledgement, up to the event's
    ``publish_timeout_ms`` or ``kafkaConsumer.pollTimeoutMs`` if lower, with a producer of
    ``pool`` (this worker's by default).

    Returns False (and logs why) instead of raising: a lost event never fails a read, since
    the enumerator also finishes a bucket once its committed position passed the boundary,
    and plans by a sample where a size report is missing.
    """
    if config.events_topic is None:
        return False
    timeout_ms = min(config.poll_timeout_ms, event.publish_timeout_ms)
    settings = config.kafka.librdkafka(ClientRole.EVENT_PRODUCER, **{"message.timeout.ms": timeout_ms})
    key = settings_key(settings)
    delivered: list[object] = []
    producer = None
    try:
        producer = pool.borrow(settings, key)
        producer.produce(
            config.events_topic,
            key=event.source_id.encode(),
            value=event.encode(),
            partition=CONTROL_PARTITION,
            on_delivery=lambda err, _msg: delivered.append(err),
        )
        producer.flush(timeout_ms / 1000 + 5)
    except Exception as exc:  # process boundary: best effort, never fails the read
        if producer is not None:
            pool.discard(producer)
        log.warning("could not publish %s: %s", event.describe(), config.kafka.redact(str(exc)))
        return False
    if not delivered or delivered[0] is not None:
        pool.discard(producer)
        if delivered and delivered[0].code() in AUTHORIZATION_CODES:
            reason = str(control_topic_refused(config.events_topic, config.kafka, "WRITE", delivered[0].str()))
        else:
            reason = config.kafka.redact(str(delivered[0])) if delivered else "no acknowledgement in time"
        log.warning("could not publish %s: %s", event.describe(), reason)
        return False
    pool.give_back(key, producer)
    return True


@dataclass(frozen=True)
class ControlMessages:
    """Messages read from the control topic: ``values`` in offset order, and the position
    after the last one."""

    values: list[bytes | None]
    next_position: int


class ControlTopicReader:
    """Reads the control topic from a given position to its current end.

    Which process: the driver's planner worker, after a batch that carried a bucket to its
    boundary or read under a catch-up budget (at most once per batch), so a consumer per
    read costs little (a few ms on loopback). It is never
    kept between reads: a librdkafka consumer (2.16.1) assigned to a topic that is then
    deleted crashes its whole process with SIGSEGV against the embedded broker, paused or
    not, and the planner worker is the query. Picklable (holds no client).
    """

    def __init__(self, kafka: KafkaClientConfig, topic: str, timeout_ms: int, *,
                 consumer_factory: Callable[[dict], Consumer] = Consumer,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``consumer_factory`` and ``clock`` are replaced by unit tests only."""
        self._kafka = kafka
        self._topic = topic
        self._timeout_ms = timeout_ms
        self._consumer_factory = consumer_factory
        self._clock = clock

    def read_from(self, position: int) -> ControlMessages:
        """Every message from ``position`` up to the log end (asked once, so this returns
        even while other sources keep writing; a message written after that is read by the
        next call), plus any that came in the same ``consume()`` call as the last of them:
        the returned position is always just past what was returned. A
        position beyond the log end (the topic was re-created) reads from its earliest
        offset. Gives up quietly (returning what it has) after the timeout; the next call
        continues from the returned position."""
        consumer = self._consumer_factory(self._kafka.librdkafka(ClientRole.CONTROL_READER))
        try:
            return self._read(consumer, position)
        finally:
            consumer.close()

    def _read(self, consumer: Consumer, position: int) -> ControlMessages:
        topic = self._topic
        partition = TopicPartition(topic, CONTROL_PARTITION)
        timeout_s = self._timeout_ms / 1000
        try:
            low, high = watermarks(consumer, partition, timeout_s)
        except Exception as exc:  # process boundary: best effort, never fails planning
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is not None and error.code() in AUTHORIZATION_CODES:
                log.warning("%s", control_topic_refused(topic, self._kafka, "DESCRIBE", error.str()))
            else:
                log.warning("could not read the control topic %r: %s", topic, self._kafka.redact(str(exc)))
            return ControlMessages([], position)
        if position > high:
            log.warning("control topic %r ends at %d, before the position %d this query read to: it was re-created; "
                        "reading it from its earliest offset %d", topic, high, position, low)
            position = low
        position = max(position, low)
        if position >= high:
            return ControlMessages([], position)
        consumer.assign([TopicPartition(topic, CONTROL_PARTITION, position)])
        values: list[bytes | None] = []
        deadline = self._clock() + timeout_s
        while position < high and self._clock() < deadline:
            # consume() returns once it has that many messages or its wait is over: asking
            # for no more than what remains returns as soon as the last event arrives; asking
            # for more would wait out the whole wait at every backlog phase end.
            for message in consumer.consume(min(_CONSUME_BATCH, high - position), _CONSUME_WAIT_S):
                error = message.error()
                if error is None:
                    if message.offset() >= position:
                        values.append(message.value())
                        position = message.offset() + 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    position = max(position, message.offset())
                elif error.code() in AUTHORIZATION_CODES:
                    log.warning("%s", control_topic_refused(topic, self._kafka, "READ", error.str()))
                    return ControlMessages(values, position)
                else:
                    log.warning("reading the control topic %r: %s", topic, self._kafka.redact(error.str()))
        return ControlMessages(values, position)


# -- the control topic as the enumerator sees it ------------------------------------------


class TopicNotCreatedError(BacklogSourceError):
    """Kafka refused to create ``topic`` for a reason other than an ACL (a policy, too few
    brokers, an invalid name); ``detail`` is Kafka's reason, secrets removed. The caller that
    knows what the topic is for says so: :class:`ControlTopic` raises
    :class:`~backlog_source.core.errors.ControlTopicError` naming its option. Raised by the
    admin client (:meth:`~backlog_source.enumerator.kafka_admin.KafkaAdmin.ensure_topic`)."""

    def __init__(self, topic: str, detail: str) -> None:
        self.topic, self.detail = topic, detail
        super().__init__(topic, detail)

    def __str__(self) -> str:
        return f"cannot create topic {self.topic!r}: {self.detail}"


class ControlTopicAdmin(Protocol):
    """What :class:`ControlTopic` asks of the enumerator's admin client
    (:class:`~backlog_source.enumerator.kafka_admin.OffsetsClient`). Each method raises
    :class:`~backlog_source.core.kafka_refusals.AccessRefusedError` when Kafka refuses the
    client (naming the topic and the ACL operation when an ACL refused it)."""

    def ensure_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` if it is missing; :class:`TopicNotCreatedError` if Kafka refuses to."""

    def topic_identity(self, topic: str) -> TopicIdentity | None: ...

    def authorized_operations(self, topic: str) -> frozenset[str] | None:
        """The ACL operations Kafka allows this client on ``topic``; None when it does not say."""

    def latest_offsets(self, buckets: Iterable[Bucket], known=None, sent=None) -> dict[Bucket, int]: ...


class TopicChange(TextEnum):
    """What happened to the control topic since this run last looked."""

    UNCHANGED = "unchanged"
    RECREATED_HERE = "re-created here"  # it was deleted, and this run created it again: empty
    RECREATED = "re-created"  # someone else deleted and re-created it: read it from its start


class ControlTopic:
    """Opens, checks and reads the control topic named by ``backlog.eventsTopic``, or goes on
    without it for the rest of the run once an ACL refuses this client the topic
    (:attr:`usable`).

    Why going on is safe: the driver decides every boundary and finish by positions; the
    topic's events only attribute a finish to a reader and refine record sizes (see the
    module docstring). So a principal granted only what ``format("kafka")`` needs runs the
    query, with one warning (:func:`running_without`), rather than failing at start."""

    def __init__(self, settings: SourceSettings, client: ControlTopicAdmin, reader: ControlTopicReader | None = None) -> None:
        if settings.backlog_events_topic is None:
            raise ValueError("no control topic: backlog.eventsTopic is 'none'")
        self._topic = settings.backlog_events_topic
        self._kafka = settings.kafka
        self._client = client
        self._reader = reader or ControlTopicReader(settings.kafka, self._topic, settings.api_timeout_ms)
        self._identity: TopicIdentity | None = None
        self._opened = False
        self._refused = False  # an ACL refused this client the topic: the run goes on without it

    @property
    def usable(self) -> bool:
        """Whether this run uses the control topic: it is opened (:meth:`open`) on the first
        question, and once an ACL refused it, it stays unused for the run."""
        if not self._opened:
            self.open()
        return not self._refused

    def open(self) -> int | None:
        """Create the topic if it is missing and return its log end: events written before
        are not this query's. None when an ACL refuses this client the topic (DESCRIBE, CREATE
        of a missing topic, or READ or WRITE by the operations Kafka says it allows): the run
        goes on without it, said once as a warning. Raises
        :class:`~backlog_source.core.errors.ControlTopicError` naming the option when Kafka
        will not create it for another reason (a policy, too few brokers); a refused
        connection (authentication, TLS) is raised as the client raised it."""
        self._opened = True
        return self._attempt(self._open)

    def _open(self) -> int | None:
        self._client.ensure_topic(self._topic, 1)
        self._identity = self._client.topic_identity(self._topic)
        if self._identity is not None:
            self._warn_if_partitioned(self._identity)
        operations = self._client.authorized_operations(self._topic)
        # Described just now, so DESCRIBE is allowed: an answer without it (an empty set from a
        # Kafka-compatible broker that fills in no operations) says nothing, and is not a refusal.
        told = operations is not None and "DESCRIBE" in operations
        missing = [op for op in ("READ", "WRITE") if told and op not in operations]
        if missing:
            self._go_without(" and ".join(missing), "not among the operations Kafka authorizes for this client")
            return None
        return self._latest()

    def log_end(self) -> int | None:
        """The control topic's log end, after :meth:`_check` (re-created: 0); None when the
        run goes on without the topic."""
        if not self.usable:
            return None
        return self._attempt(lambda: (self._check(), self._latest())[1])

    def _attempt(self, call: Callable[[], T]) -> T | None:
        """``call()``, or None once an ACL refused this client the control topic (now or
        before). A topic Kafka would not create is the control topic: raised, with its option.
        Any other refusal (authentication, TLS, another topic) is raised as it came."""
        if self._refused:
            return None
        try:
            return call()
        except TopicNotCreatedError as failed:
            raise ControlTopicError(
                f"cannot create the control topic {failed.topic!r} (option 'backlog.eventsTopic'): "
                f"{failed.detail}. Create it beforehand with 1 partition, point 'backlog.eventsTopic' at a topic "
                f"that exists, or set it to {EVENTS_TOPIC_OFF!r} to run without a control topic"
            ) from None
        except AccessRefusedError as refused:
            if refused.refusal is Refusal.TOPIC_AUTHORIZATION and refused.topic in (None, self._topic):
                self._go_without(refused.operation, refused.detail)
                return None
            raise

    def _go_without(self, operation: str | None, detail: str) -> None:
        self._refused = True
        log.warning("%s", running_without(self._topic, self._kafka, operation, detail))

    def _latest(self) -> int:
        bucket = Bucket(self._topic, CONTROL_PARTITION)
        return self._client.latest_offsets([bucket])[bucket]

    def read_from(self, position: int) -> ControlMessages:
        """The messages since ``position``, after checking the topic is still the one this
        run read: a missing topic is re-created and yields nothing; a re-created one is read
        from its start. Nothing when the run goes on without the topic."""
        change = self._attempt(self._check) if self.usable else None
        if change is None:
            return ControlMessages([], position)
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
