"""Every fake the unit tests use, in one place: a Kafka offsets client, a consumer, the
control topic, a clock, and Spark's query/writer objects for the mode-switch controller (classic,
and Spark Connect's with its client-side listener bus)."""

from __future__ import annotations

import json
import queue
import threading
import warnings
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import SimpleNamespace

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from backlog_source.core.buckets import Bucket, TopicIdentity
from backlog_source.core.errors import ModeSwitchError
from backlog_source.events.control_topic import ControlMessages
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.policy import SwitchPolicy
from backlog_source.mode_switch.switchers import Switched, SwitchMethod

#: The topics a fake cluster flags as internal, as Apache Kafka flags its own.
KAFKA_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


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
    audited_against: list[dict[Bucket, int] | None] = field(default_factory=list)  # latest_offsets(known=...)
    created: list[str] = field(default_factory=list)
    topic_ids: dict[str, str] = field(default_factory=dict)
    #: The ACL operations a topic allows this client (KIP-430); a topic not here: Kafka does not say.
    operations: dict[str, frozenset[str]] = field(default_factory=dict)
    closed: int = 0
    sent_used: int = 0  # latest_offsets calls answered by what send_latest_offsets sent

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        self.calls.append("partition_counts")
        return {topic: len(parts) for topic, parts in self.topics.items() if topic in set(topics)}

    def topic_names(self) -> set[str]:
        self.calls.append("topic_names")
        return set(self.topics)

    def describe_topics(self, topics: Iterable[str]) -> dict[str, TopicIdentity]:
        self.calls.append("describe_topics")
        return {t: TopicIdentity(self.topic_ids.setdefault(t, f"{t}-0"), len(self.topics[t]),
                                 internal=t in KAFKA_INTERNAL_TOPICS)
                for t in topics if t in self.topics}

    def _pair(self, bucket: Bucket) -> tuple[int, int]:
        return self.topics[bucket.topic][bucket.partition]

    def earliest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        self.calls.append("earliest_offsets")
        return {b: self._pair(b)[0] for b in buckets}

    def send_latest_offsets(self, buckets: Iterable[Bucket]) -> tuple[tuple[Bucket, ...], dict[Bucket, int] | None] | None:
        """The handle: the buckets asked about, in order, and their log ends now (what Kafka
        answers at once, while the caller goes on); None for the answer when one of them no
        longer exists (Kafka fails that request, and the request proper asks again)."""
        self.calls.append("send_latest_offsets")
        asked = tuple(buckets)
        exist = all(b.topic in self.topics and b.partition < len(self.topics[b.topic]) for b in asked)
        return (asked, self._log_ends(asked) if exist else None) if asked else None

    def latest_offsets(self, buckets: Iterable[Bucket], known: Mapping[Bucket, int] | None = None,
                       sent: tuple[tuple[Bucket, ...], dict[Bucket, int] | None] | None = None) -> dict[Bucket, int]:
        self.calls.append("latest_offsets")
        self.audited_against.append(None if known is None else dict(known))
        asked = tuple(buckets)
        if sent is not None and sent[0] == asked and sent[1] is not None:
            self.sent_used += 1
            return dict(sent[1])
        return self._log_ends(asked)

    def _log_ends(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
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
            self.topic_ids[topic] = f"{topic}-{len(self.created)}"

    def topic_identity(self, topic: str) -> TopicIdentity | None:
        self.calls.append("topic_identity")
        if topic not in self.topics:
            return None
        return TopicIdentity(self.topic_ids.setdefault(topic, f"{topic}-0"), len(self.topics[topic]))

    def authorized_operations(self, topic: str) -> frozenset[str] | None:
        self.calls.append("authorized_operations")
        return self.operations.get(topic) if topic in self.topics else None

    def delete(self, topic: str) -> None:
        del self.topics[topic]
        self.topic_ids.pop(topic, None)

    def recreate(self, topic: str, partitions: list[tuple[int, int]]) -> None:
        """Delete ``topic`` and create it again with ``partitions``: a new topic id."""
        generation = int(self.topic_ids.get(topic, f"{topic}-0").rsplit("-", 1)[-1]) + 1
        self.topics[topic] = list(partitions)
        self.topic_ids[topic] = f"{topic}-{generation}"

    def close(self) -> None:
        self.closed += 1

    def append(self, topic: str, partition: int, count: int) -> None:
        earliest, latest = self.topics[topic][partition]
        self.topics[topic][partition] = (earliest, latest + count)


@dataclass
class FakeRecordSizes:
    """Record sizes as ``{bucket: bytes per offset}`` (``default`` for the others; None: nothing
    measurable). ``asked`` records the positions of every measurement."""

    sizes: dict[Bucket, float] = field(default_factory=dict)
    default: float | None = 100.0
    asked: list[dict[Bucket, int]] = field(default_factory=list)
    closed: int = 0

    def bytes_per_offset(self, positions: Mapping[Bucket, int], lags: Mapping[Bucket, int]) -> dict[Bucket, float]:
        self.asked.append({b: positions[b] for b in lags if lags[b] > 0})
        return {b: self.sizes.get(b, self.default) for b in lags
                if lags[b] > 0 and (b in self.sizes or self.default is not None)}

    def close(self) -> None:
        self.closed += 1


class FakeClock:
    """``time.monotonic`` / ``time.time`` and ``time.sleep`` in one: sleeping advances the
    clock at once and is recorded in ``slept``."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class FakeControlTopic:
    """``events.control_topic.ControlTopic`` as a list of message values; ``reads`` counts
    read_from calls (each one a request to the broker in real life). ``refused``: an ACL
    refuses this client the topic, so the run goes on without it (``usable`` is False)."""

    def __init__(self, refused: bool = False) -> None:
        self.values: list[bytes | None] = []
        self.reads = 0
        self.opened = 0
        self.refused = refused

    @property
    def usable(self) -> bool:
        if not self.opened:
            self.open()
        return not self.refused

    def open(self) -> int | None:
        self.opened += 1
        return None if self.refused else len(self.values)

    def log_end(self) -> int | None:
        return None if self.refused else len(self.values)

    def read_from(self, position: int) -> ControlMessages:
        if self.refused:
            return ControlMessages([], position)
        self.reads += 1
        return ControlMessages(list(self.values[position:]), max(position, len(self.values)))


# -- a consumer: scripted confluent Messages ----------------------------------------------


def Msg(offset, value=b"v", error=None, key=b"k", ts=(1, 1_700_000_000_123), headers=None, partition=0, topic="t"):
    """A real confluent Message (the hot path calls its C methods unbound)."""
    return Message(topic=topic, partition=partition, offset=offset, key=key, value=value, error=error, timestamp=ts,
                   headers=headers)


def Err(code, fatal=False):
    return KafkaError(code, fatal=fatal)


def eof(offset, partition=0, topic="t"):
    return Msg(offset, error=Err(KafkaError._PARTITION_EOF), partition=partition, topic=topic)


class FakeConsumer:
    """A consumer that returns scripted ``consume()`` results (a list of Messages, or an
    exception to raise) and records what it was asked. Callable: it is its own factory."""

    def __init__(self, script, watermarks=(0, 0), clock=None):
        self.script = list(script)
        self.assigned: list[list[tuple[str, int, int]]] = []
        self.paused: set[tuple[str, int]] = set()
        self.seeks: list[tuple[str, int, int]] = []
        self.reassigned: list[tuple[str, int, int]] = []  # incremental_assign after an error
        # Partitions whose fetch failed out of range: librdkafka refuses seek() on them
        # ("Local: Erroneous state") until they are assigned again.
        self.erroneous: set[tuple[str, int]] = set()
        self.created = 0
        self.closed = False
        self.watermarks = watermarks
        self.clock = clock
        self.config: dict | None = None
        self.asked: list[int] = []  # num_messages of every consume() call
        self.waits: list[float] = []  # timeout of every consume() call
        self.watermark_asks: list[tuple] = []  # (partition, timeout, cached) of every get_watermark_offsets()

    def __call__(self, config):
        self.config = config
        self.created += 1
        return self

    def assign(self, partitions):
        self.assigned.append([(tp.topic, tp.partition, tp.offset) for tp in partitions])

    def assignment(self):
        return [TopicPartition(t, p) for t, p, _ in (self.assigned[-1] if self.assigned else [])]

    def unassign(self):
        self.assigned.append([])

    def pause(self, partitions):
        self.paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions):
        self.paused -= {(tp.topic, tp.partition) for tp in partitions}

    def seek(self, tp):
        if (tp.topic, tp.partition) in self.erroneous:
            raise KafkaException(KafkaError(KafkaError._STATE, f"Failed to seek to offset {tp.offset}: Local: "
                                            "Erroneous state"))
        self.seeks.append((tp.topic, tp.partition, tp.offset))

    def incremental_unassign(self, partitions):
        for tp in partitions:
            self.erroneous.discard((tp.topic, tp.partition))

    def incremental_assign(self, partitions):
        for tp in partitions:
            self.erroneous.discard((tp.topic, tp.partition))
            self.reassigned.append((tp.topic, tp.partition, tp.offset))

    def consume(self, num, timeout):
        self.asked.append(num)
        self.waits.append(timeout)
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, Exception):
                raise step
            self.erroneous |= {(m.topic(), m.partition()) for m in step if m.error() is not None
                               and m.error().code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)}
            return step
        if self.clock:
            self.clock.advance(timeout)
        return []

    def get_watermark_offsets(self, tp, timeout, cached=False):
        self.watermark_asks.append((tp, timeout, cached))
        if isinstance(self.watermarks, Exception):
            raise self.watermarks
        return self.watermarks

    def list_topics(self, topic, timeout):
        class Topic:
            error = None
            partitions = {p: None for p in range(8)}

        class Metadata:
            topics = {"t": Topic()} if self.topics_present is None else self.topics_present

        return Metadata()

    topics_present: dict | None = None  # None: topic "t" exists with partitions 0..7

    def close(self):
        self.closed = True


# -- Spark's query objects, for the mode-switch controller ---------------------------------


class FakeProducer:
    """A producer whose deliveries are scripted: ``outcomes`` holds, per produce() in order,
    None (acknowledged), an error (delivery failed), ``"lost"`` (never acknowledged: the
    message stays queued) or an exception to raise from produce()."""

    def __init__(self, outcomes=()) -> None:
        self.outcomes = list(outcomes)
        self.config: dict | None = None
        self.produced: list[tuple[str, bytes | None]] = []
        self.queued: list = []
        self.purged = self.closed = False

    def __call__(self, config: dict) -> FakeProducer:
        self.config = config
        return self

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, **_kwargs) -> None:
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        self.produced.append((topic, value))
        self.queued.append((outcome, on_delivery))

    def flush(self, timeout=None) -> int:
        kept = []
        for outcome, on_delivery in self.queued:
            if isinstance(outcome, str) and outcome == "lost":  # a KafkaError refuses comparison with a str
                kept.append((outcome, on_delivery))
            elif on_delivery is not None:
                on_delivery(outcome, None)
        self.queued = kept
        return len(kept)

    def purge(self, in_queue=True, in_flight=True, blocking=True) -> None:
        self.purged = True
        self.queued = []

    def close(self) -> bool:
        self.closed = True
        return True

    def __len__(self) -> int:
        return len(self.queued)


class FakeQuery:
    """A ``StreamingQuery``: ``stop()`` reports the run's termination on the listener bus,
    as Spark does; ``lastProgress`` is what a test last emitted for it; ``name`` the
    writer's ``queryName`` (None without one)."""

    _runs = iter(range(1_000_000))

    def __init__(self, spark: "FakeSpark", interval_ms: int, name: str | None = None) -> None:
        self.id, self.runId = "query-1", f"run-{next(self._runs)}"
        self.name = name
        self.interval_ms = interval_ms
        self.spark = spark
        self.stopped = False
        self.failure: BaseException | None = None
        self.lastProgress = None
        self.trigger_active = False

    @property
    def status(self) -> dict:
        return {"isTriggerActive": self.trigger_active}

    @property
    def isActive(self) -> bool:
        return not self.stopped and self.failure is None

    def stop(self) -> None:
        self.stopped = True
        for listener in list(self.spark.listeners):
            listener.onQueryTerminated(SimpleNamespace(id=self.id, runId=self.runId, exception=None))

    def exception(self):
        return self.failure


class FakeSpark:
    """A classic ``SparkSession``: its ``streams`` keep listeners in ``listeners``;
    ``post(event)`` hands an event to each, on the calling thread (the JVM's listener bus
    thread, in Spark)."""

    def __init__(self) -> None:
        self.listeners: list = []
        self.queries: dict[str, object] = {}  # what streams.get(id) finds
        self.streams = SimpleNamespace(addListener=self.listeners.append, removeListener=self.listeners.remove,
                                       get=self.queries.get)

    def post(self, event) -> None:
        for listener in list(self.listeners):
            getattr(listener, _CALLBACKS[getattr(event, "kind", "progress")])(event)


class FakeWriter:
    """A ``DataStreamWriter`` whose ``start()`` returns a :class:`FakeQuery` per run."""

    def __init__(self) -> None:
        self._spark = FakeSpark()
        self.started: list[FakeQuery] = []
        self._interval_ms: int | None = None
        self._name: str | None = None

    def queryName(self, queryName: str) -> "FakeWriter":
        self._name = queryName
        return self

    def trigger(self, *, processingTime: str | None = None, once=None, continuous=None, availableNow=None,
                realTime=None) -> "FakeWriter":
        assert processingTime is not None, "backlog-aware queries use processing-time triggers only"
        self._interval_ms = int(processingTime.split()[0])
        return self

    def start(self, path=None, format=None, outputMode=None, partitionBy=None, queryName=None, **options) -> FakeQuery:
        query = FakeQuery(self._spark, self._interval_ms, queryName or self._name)
        self.started.append(query)
        return query


class FakeInPlaceSwitcher:
    """A switcher that changes the fake query's interval in place and records each interval
    it applied."""

    method = SwitchMethod.IN_PLACE

    def __init__(self, query: FakeQuery, intervals_ms) -> None:
        self.query = query
        self._intervals_ms = dict(intervals_ms)
        self.applied: list[int] = []

    def attach(self, current: Mode, *, cancelled=lambda: False, clock=None, sleep=None) -> bool:
        return True

    def adopt(self, *, cancelled=lambda: False, clock=None, sleep=None) -> int | None:
        """The interval the fake query runs with; raises ModeSwitchError for a query marked
        ``in_place_refused`` (a trigger other than processing time)."""
        refused = getattr(self.query, "in_place_refused", None)
        if refused:
            raise ModeSwitchError(refused)
        return self.query.interval_ms

    def switch(self, to: Mode) -> Switched:
        self.applied.append(self._intervals_ms[to])
        self.query.interval_ms = self._intervals_ms[to]
        return Switched(self.query, to)


# -- Spark Connect's client-side listener bus, with its locking ----------------------------


class _Abandoned(Exception):
    """The test abandoned a :class:`FakeConnectListenerBus`: a thread stuck on its lock gives up."""


def started_event(query) -> SimpleNamespace:
    """A ``QueryStartedEvent`` of ``query``'s run."""
    return SimpleNamespace(kind="started", id=query.id, runId=query.runId, name=None)


def idle_event(query, at_ms: int) -> SimpleNamespace:
    """A ``QueryIdleEvent``: ``query``'s trigger at ``at_ms`` found no new data."""
    return SimpleNamespace(kind="idle", id=query.id, runId=query.runId, timestamp=iso_timestamp(at_ms))


def terminated_event(query, exception: str | None = None) -> SimpleNamespace:
    """A ``QueryTerminatedEvent`` of ``query``'s run."""
    return SimpleNamespace(kind="terminated", id=query.id, runId=query.runId, exception=exception)


_CALLBACKS = {"started": "onQueryStarted", "progress": "onQueryProgress", "idle": "onQueryIdle",
              "terminated": "onQueryTerminated"}


class FakeConnectListenerBus:
    """PySpark Connect's client-side ``StreamingQueryListenerBus``
    (pyspark/sql/connect/streaming/query.py) with its locking kept as it is: ``append``,
    ``remove`` and ``post_to_all`` hold one non-reentrant lock; ``append`` of the first
    listener opens the server's event stream and starts the event thread; ``remove`` of the
    last listener asks the server to end the stream (events already sent stay ahead of its
    end) and joins the event thread *while holding the lock*; the event thread takes the
    lock in ``post_to_all`` for every event it reads. So an event on its way when the last
    listener is removed hangs both threads, as in PySpark.

    Test-only controls (the real bus has none): ``server_post(event)`` is the server sending
    an event (dropped while no server-side listener is registered); ``hold()`` keeps the
    event thread from handing on the event it read (network latency) until ``release()``;
    ``fail_stream()`` breaks the event stream (the event thread then forgets every listener,
    as PySpark's does); ``joining`` is set while ``remove`` joins with the lock held, and
    ``event_thread_waiting`` when the event thread has to wait for the lock; ``abandon()``
    frees threads stuck in the deadlock so that a test can end (PySpark's waits have no such
    exit; here they only poll the flag, which a test sets at its end).
    """

    EVENT_THREAD = "fake-connect-listener-events"

    def __init__(self, sqm) -> None:
        self._sqm = sqm
        self._listener_bus: list = []
        self._execution_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stream = None  # the server's event stream (a queue) while it has a listener
        self._network = threading.Event()
        self._network.set()
        self._abandoned = threading.Event()
        self.joining = threading.Event()
        self.event_thread_waiting = threading.Event()
        self.removals = 0  # remove() calls that found the listener

    # -- the real bus's API -------------------------------------------------------------

    def close(self) -> None:
        for listener in list(self._listener_bus):
            self.remove(listener)

    def append(self, listener) -> None:
        with self._locked():
            self._listener_bus.append(listener)
            if len(self._listener_bus) == 1:
                assert self._execution_thread is None
                self._stream = queue.Queue()
                # As PySpark: no daemon=..., so the thread is a daemon only if the caller's thread is.
                self._execution_thread = threading.Thread(target=self._query_event_handler, args=(self._stream,),
                                                          name=self.EVENT_THREAD)
                self._execution_thread.start()

    def remove(self, listener) -> None:
        with self._locked():
            if listener not in self._listener_bus:
                return
            self.removals += 1
            if len(self._listener_bus) == 1:
                self._stream.put(_END_OF_STREAM)  # the server removes its listener: the stream ends
                self._stream = None
                if self._execution_thread is not None:
                    self.joining.set()
                    while self._execution_thread.is_alive():  # PySpark: join(), no timeout
                        self._execution_thread.join(0.05)
                        if self._abandoned.is_set():
                            raise _Abandoned()
                    self._execution_thread = None
            self._listener_bus.remove(listener)

    def post_to_all(self, event) -> None:
        on_event_thread = threading.current_thread().name == self.EVENT_THREAD
        with self._locked(self.event_thread_waiting if on_event_thread else None):
            for listener in self._listener_bus:
                try:
                    getattr(listener, _CALLBACKS[getattr(event, "kind", "progress")])(event)
                except Exception as exc:  # PySpark warns and goes on with the next listener
                    warnings.warn(f"Listener {listener} threw an exception\n{exc}")

    # -- test-only --------------------------------------------------------------------------

    def server_post(self, event) -> None:
        stream = self._stream
        if stream is not None:
            stream.put(event)

    def fail_stream(self) -> None:
        stream = self._stream
        if stream is not None:
            stream.put(_STREAM_FAILED)

    def hold(self) -> None:
        self._network.clear()

    def release(self) -> None:
        self._network.set()

    def abandon(self) -> None:
        self._abandoned.set()
        self._network.set()
        stream = self._stream
        if stream is not None:
            stream.put(_END_OF_STREAM)

    # -- inside --------------------------------------------------------------------------

    @contextmanager
    def _locked(self, waiting: threading.Event | None = None):
        """``with self._lock``, as PySpark has it; the wait only polls the abandon flag."""
        if not self._lock.acquire(blocking=False):
            if waiting is not None:
                waiting.set()
            while not self._lock.acquire(timeout=0.05):
                if self._abandoned.is_set():
                    raise _Abandoned()
        try:
            yield
        finally:
            self._lock.release()

    def _query_event_handler(self, stream) -> None:
        try:
            while True:
                event = stream.get()
                while not self._network.wait(0.05):  # held: the event is on its way
                    if self._abandoned.is_set():
                        return
                if event is _END_OF_STREAM or self._abandoned.is_set():
                    return
                if event is _STREAM_FAILED:  # PySpark: warn, forget every listener, end the thread
                    with self._locked():
                        self._execution_thread = None
                        self._stream = None
                        self._listener_bus.clear()
                    return
                self.post_to_all(event)
        except _Abandoned:
            return


_END_OF_STREAM, _STREAM_FAILED = object(), object()


class FakeConnectStreams:
    """A Spark Connect session's ``StreamingQueryManager``: ``addListener`` sets the
    listener's session and appends it to the client-side bus, ``removeListener`` removes it
    (pyspark/sql/connect/streaming/query.py). ``added`` and ``removed`` count the calls."""

    def __init__(self, session) -> None:
        self._session = session
        self._sqlb = FakeConnectListenerBus(self)
        self.added = 0
        self.removed = 0

    def close(self) -> None:
        self._sqlb.close()

    def addListener(self, listener) -> None:
        self.added += 1
        listener._set_spark_session(self._session)
        self._sqlb.append(listener)

    def removeListener(self, listener) -> None:
        self.removed += 1
        self._sqlb.remove(listener)


class FakeConnectSession:
    """A Spark Connect ``SparkSession``: only its ``streams``."""

    def __init__(self) -> None:
        self.streams = FakeConnectStreams(self)


class FakeConnectQuery(FakeQuery):
    """A Connect ``StreamingQuery``: ``stop()`` is answered at once, and the server sends the
    run's ``QueryTerminatedEvent`` on the event stream afterwards (once: stopping a stopped
    query sends nothing)."""

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.spark.streams._sqlb.server_post(terminated_event(self))


class FakeConnectWriter(FakeWriter):
    """A Connect ``DataStreamWriter``: ``start()`` posts the ``QueryStartedEvent`` to the
    client-side bus on the caller's thread, taking the bus lock, as
    pyspark/sql/connect/streaming/readwriter.py does. Writers may share one session."""

    def __init__(self, session: FakeConnectSession | None = None) -> None:
        self._session = session or FakeConnectSession()
        self.started: list[FakeQuery] = []
        self._interval_ms: int | None = None
        self._name: str | None = None
        self._starts = threading.Condition()

    def start(self, path=None, format=None, outputMode=None, partitionBy=None, queryName=None, **options) -> FakeQuery:
        query = FakeConnectQuery(self._session, self._interval_ms, queryName or self._name)
        with self._starts:
            self.started.append(query)
            self._starts.notify_all()
        self._session.streams._sqlb.post_to_all(started_event(query))
        return query

    def wait_started(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` runs have started."""
        with self._starts:
            return self._starts.wait_for(lambda: len(self.started) >= count, timeout)


# -- Kafka's AdminClient: scripted answers -----------------------------------------------


@dataclass(frozen=True)
class Slow:
    """A script entry that uses up the whole timeout it is given before it fails or answers,
    as a request to a broker that does not answer does (other entries take no time)."""

    entry: object


def failed(code: int, text: str = "") -> KafkaException:
    """The exception a client raises for Kafka error ``code``."""
    return KafkaException(KafkaError(code, text or f"error {code}"))


def future(value=None, error: BaseException | None = None) -> Future:
    """A resolved future, as an AdminClient request returns per partition or topic."""
    result: Future = Future()
    if error is not None:
        result.set_exception(error)
    else:
        result.set_result(value)
    return result


def offsets(values: dict[Bucket, int]):
    """A scripted answer to ``list_offsets``: one resolved future per asked partition."""
    return lambda specs: {tp: future(SimpleNamespace(offset=values[Bucket(tp.topic, tp.partition)])) for tp in specs}


def describe(known: dict[str, int], topic_id="id-1", leader: int = 1):
    """A scripted answer to ``describe_topics``: the ``known`` topics with their partition
    counts (each led by ``leader``, none when it is negative); the others are unknown."""
    def answer(topics):
        return {name: future(SimpleNamespace(partitions=[SimpleNamespace(id=p, leader=SimpleNamespace(id=leader))
                                                         if leader >= 0 else SimpleNamespace(id=p, leader=None)
                                                         for p in range(known[name])], topic_id=topic_id,
                                                  is_internal=name in KAFKA_INTERNAL_TOPICS))
                if name in known else future(error=failed(KafkaError.UNKNOWN_TOPIC_OR_PART)) for name in topics.topic_names}
    return answer


class FakeAdmin:
    """Answers ``list_offsets`` / ``describe_topics`` / ``create_topics`` from ``script``: each
    request takes the next entry, an exception to raise or a callable building the answer,
    maybe wrapped in :class:`Slow`."""

    def __init__(self, script, clock=None, cost_s: float = 0.0):
        self.script = list(script)
        self.requests: list[tuple[str, float]] = []  # (what, timeout the client allowed)
        self.clock = clock
        self.cost_s = cost_s
        self.config: dict | None = None
        self.reports: list = []  # what librdkafka has queued for the next poll(): callables
        self.served = threading.Event()  # set once a poll() has handed over a report

    def __call__(self, config):
        self.config = config
        return self

    def report_error(self, error: KafkaError) -> None:
        """librdkafka queues ``error`` for the client's error callback (``error_cb``), which
        runs in the next ``poll()``."""
        self.reports.append(lambda: self.config["error_cb"](error))

    def report_log(self, line: str) -> None:
        """librdkafka queues a connection log line for the client's ``logger``."""
        self.reports.append(lambda: self.config["logger"].error(line))

    def _next(self, what: str, timeout: float, *args):
        self.requests.append((what, timeout))
        if self.clock is not None:
            self.clock.now += self.cost_s
        entry = self.script.pop(0)
        if isinstance(entry, Slow):
            self.clock.now += timeout
            entry = entry.entry
        if isinstance(entry, BaseException):
            raise entry
        return entry(*args)

    def list_offsets_at_once(self, topic_partitions, *, isolation_level, request_timeout):
        """The scripted answer (one future per partition, as ``AdminClient.list_offsets``
        answers) as one future for the call: each partition's result, or its ``KafkaError``."""
        per_partition = self._next("list_offsets", request_timeout, topic_partitions)
        answers = {}
        for tp, answer in per_partition.items():
            error = answer.exception()
            if error is not None and not isinstance(error, KafkaException):
                return future(error=error)  # the call failed as a whole
            answers[tp] = error.args[0] if error is not None else answer.result()
        return future(answers)

    def describe_topics(self, topics, request_timeout, include_authorized_operations=False):
        return self._next("describe_topics", request_timeout, topics)

    def list_topics(self, timeout):
        return self._next("list_topics", timeout)

    def create_topics(self, new_topics, request_timeout):
        return self._next("create_topics", request_timeout, new_topics)

    def alter_consumer_group_offsets(self, alter_consumer_group_offsets_request, request_timeout):
        return self._next("alter_consumer_group_offsets", request_timeout, alter_consumer_group_offsets_request)

    def poll(self, timeout):
        served = 0
        while self.reports:
            self.reports.pop(0)()
            served += 1
        if served:
            self.served.set()
        return served


# -- the control topic's reader ----------------------------------------------------------


class RecordingControlReader:
    """The control-topic reader (``events.control_topic.ControlTopicReader``) over a list of
    message values; records each position it was asked to read from."""

    def __init__(self, values=()):
        self.values = list(values)
        self.reads: list[int] = []

    def read_from(self, position):
        self.reads.append(position)
        return ControlMessages(self.values[position:], max(position, len(self.values)))


# -- the mode switch: the JVM seen through py4j, a policy, a receiver ---------------------

EXECUTOR = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"


class JavaField:
    def __init__(self, value, refuse=False, drift=0, kind="long", final_refused=False):
        self.value, self.refuse, self.drift, self.kind = value, refuse, drift, kind
        self.final_refused = final_refused  # a JVM that enforces JEP 500: writes to final fields refused

    def setAccessible(self, flag):
        if self.refuse:
            raise RuntimeError("java.lang.reflect.InaccessibleObjectException: module does not open")

    def getType(self):
        return SimpleNamespace(getName=lambda: self.kind)

    def getLong(self, obj):
        return self.value

    def setLong(self, obj, value):
        if self.final_refused:
            raise RuntimeError("java.lang.IllegalAccessException: Can not set final long field "
                               "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor.intervalMs")
        self.value = value + self.drift


class JavaClass:
    def __init__(self, name, field=None):
        self.name, self.field = name, field

    def getName(self):
        return self.name

    def getDeclaredField(self, name):
        if self.field is None or name != "intervalMs":
            raise RuntimeError(f"java.lang.NoSuchFieldException: {name}")
        return self.field


class JavaStreamExecution:
    """``query._jsq.streamingQuery()``: its class (whose loader knows ``loadable`` classes)
    and ``triggerExecutor()``, which answers from ``executors`` (None: not created yet)."""

    def __init__(self, field, *, loadable=(EXECUTOR,), running=EXECUTOR, executors=None, active=True):
        self.field, self.loadable, self.active = field, loadable, active
        executor = SimpleNamespace(getClass=lambda: JavaClass(running, field))
        self.executors = list(executors) if executors is not None else [executor]
        self.executor = executor
        self.asked = 0

    def getClass(self):
        def load(name):
            if name not in self.loadable:
                raise RuntimeError(f"java.lang.ClassNotFoundException: {name}")
            return JavaClass(name, self.field)

        return SimpleNamespace(
            getName=lambda: "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
            getPackage=lambda: SimpleNamespace(getName=lambda: "org.apache.spark.sql.execution.streaming.runtime"),
            getClassLoader=lambda: SimpleNamespace(loadClass=load))

    def triggerExecutor(self):
        self.asked += 1
        answer = self.executors.pop(0) if len(self.executors) > 1 else self.executors[0]
        return None if answer is None else self.executor

    def isActive(self):
        return self.active


def java_query(execution):
    return SimpleNamespace(_jsq=SimpleNamespace(streamingQuery=lambda: execution))


class BackToBackQuery:
    """A query whose trigger is never seen idle (a ``0 seconds`` interval) and whose batch
    ``7`` commits after ``commits_after`` status checks."""

    def __init__(self, commits_after: int | None):
        self.commits_after = commits_after
        self.checks = 0
        self.stopped = False

    @property
    def status(self):
        self.checks += 1
        return {"isTriggerActive": True}

    @property
    def lastProgress(self):
        committed = self.commits_after is not None and self.checks > self.commits_after
        return {"batchId": 8 if committed else 7}

    @property
    def isActive(self):
        return not self.stopped

    def stop(self):
        self.stopped = True


class ChosenPolicy(SwitchPolicy):
    """The real policy, except that the in-place switcher it chooses is ``in_place`` (a
    fake) instead of one prepared on a JVM query; records every switcher it made."""

    def __init__(self, method="in-place", in_place=FakeInPlaceSwitcher, **policy):
        super().__init__(**policy)
        object.__setattr__(self, "made", [])
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "in_place", in_place)

    def choose(self, query, intervals_ms, restart):
        switcher = self.in_place(query, intervals_ms) if self.method == "in-place" else restart()
        self.made.append(switcher)
        return switcher, "test"


class HeldSwitcher(FakeInPlaceSwitcher):
    """An in-place switcher whose switches wait until ``release`` is set, with ``entered``
    set while one waits: a slow switch held on an event, never on a sleep."""

    def __init__(self, query: FakeQuery, intervals_ms, release: threading.Event, entered: threading.Event) -> None:
        super().__init__(query, intervals_ms)
        self.release, self.entered = release, entered

    def switch(self, to: Mode) -> Switched:
        self.entered.set()
        self.release.wait(30)
        return super().switch(to)


class SignallingSwitcher(FakeInPlaceSwitcher):
    """An in-place switcher that sets ``switched`` once a switch is made: a test waits on it,
    never on a sleep."""

    def __init__(self, query: FakeQuery, intervals_ms) -> None:
        super().__init__(query, intervals_ms)
        self.switched = threading.Event()

    def switch(self, to: Mode) -> Switched:
        result = super().switch(to)
        self.switched.set()
        return result


class RefusedAttach(FakeInPlaceSwitcher):
    """An in-place switcher whose running executor fails the checks."""

    def attach(self, current, *, cancelled=lambda: False, clock=None, sleep=None):
        raise ModeSwitchError("the trigger executor is a x.Other, not a ProcessingTimeExecutor")


class RecordingReceiver:
    """A mode-switch listener's receiver that keeps every message."""

    def __init__(self):
        self.messages = []

    def receive(self, message):
        self.messages.append(message)


class WaitingReceiver(RecordingReceiver):
    """A :class:`RecordingReceiver` a test can wait on: ``wait_messages(n)`` returns when it
    has ``n`` messages (False after the timeout), for messages delivered on another thread."""

    def __init__(self):
        super().__init__()
        self._arrived = threading.Condition()

    def receive(self, message):
        with self._arrived:
            super().receive(message)
            self._arrived.notify_all()

    def wait_messages(self, count: int, timeout: float) -> bool:
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self.messages) >= count, timeout)


# -- recorded progress events -------------------------------------------------------------


def source(processing_backlog=None, raw=None, traceparent=None):
    if raw is not None:
        return SimpleNamespace(endOffset=raw)
    offset = {"v": 2, "source_id": "s", "positions": {"t": {"0": 3}},
              "backlog": {"t": {"0": 5}} if processing_backlog else {}}
    if traceparent:
        offset["trace"] = {"traceparent": traceparent, "started_ms": 1}
    return SimpleNamespace(endOffset=json.dumps(offset))


def iso_timestamp(ms: int) -> str:
    """Spark's progress timestamp text (``2027-01-15T08:00:04.000Z``) of ``ms`` since the epoch."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def progress_event(query_id, run_id, batch_id, *sources, at_ms=0):
    """A ``QueryProgressEvent`` as the listener gets it; its trigger started ``at_ms``."""
    return SimpleNamespace(progress=SimpleNamespace(id=query_id, runId=run_id, batchId=batch_id,
                                                    timestamp=iso_timestamp(at_ms), sources=list(sources)))


# -- the consumer group backlog.commitOffsetsToGroup commits to ----------------------------


class FakeGroupOffsets:
    """A consumer group client (``enumerator.group_commits.GroupOffsetsClient``): records each
    commit; ``fail`` (an exception) is raised by every commit while set; while ``hold`` is
    clear, a commit waits for it (``entered`` is set once a commit is waiting), so a test can
    offer more while one is in flight."""

    def __init__(self):
        self.commits: list[tuple[str, dict]] = []
        self.fail: BaseException | None = None
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.closed = False
        self.created = 0

    def __call__(self, kafka):
        self.created += 1
        return self

    def commit(self, group, positions, timeout_s):
        self.entered.set()
        self.hold.wait(60)
        if self.fail is not None:
            raise self.fail
        self.commits.append((group, dict(positions)))

    def close(self):
        self.closed = True
