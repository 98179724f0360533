"""The executor read path: one split (one or more bucket ranges) -> Arrow record batches.

Which process: a Python worker on an executor. One consumer per split at a time, lent by
the worker's pool (:mod:`backlog_source.reader.consumer_pool`, as Spark's Kafka source pools
its consumers) and given back only when the read ended cleanly; any error, data loss handled
or early stop closes it.

The end of a range is detected by consumer position, never by the record at ``end - 1``
(compaction and transaction markers leave gaps) and never by "an empty poll means done":
a record at or past ``end``, or an end-of-partition event at or past ``end``, proves that
every record of ``[start, end)`` has been delivered. A range that is done is paused, so its
partition's records past the end are no longer fetched while the others finish.
"""

from __future__ import annotations

import gc
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from backlog_source.core import step_timings
from backlog_source.core.buckets import Bucket
from backlog_source.core.client_pool import settings_key
from backlog_source.core.data_loss import report_data_loss
from backlog_source.core.errors import KafkaUnavailableError
from backlog_source.core.kafka_answers import NoValidOffsets, watermarks
from backlog_source.core.kafka_config import ClientRole
from backlog_source.core.kafka_refusals import Refusal, access_refused
from backlog_source.core.settings import ReaderConfig
from backlog_source.events.control_topic import ControlEvent, publish, publish_once
from backlog_source.events.finish_event import BacklogFinishEvent
from backlog_source.events.sizes_report import RecordSizesReport, TopicSizes
from backlog_source.reader.arrow import data_bytes, data_bytes_by_topic, to_record_batch
from backlog_source.reader.consumer_pool import WORKER_POOL, ConsumerPool
from backlog_source.reader.read_span import ReadSpan
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit

log = logging.getLogger(__name__)

#: Records per consume() call, and so at most per Arrow batch (measured in benchmarks/).
CONSUME_BATCH = 10_000
#: An Arrow batch holds about this many bytes at most, whatever the record size: each call
#: asks for as many messages as fit, by the bytes per record of the batches before it. A
#: bound by count alone lets large records make a batch of gigabytes, a worker's peak memory a
#: multiple of it (benchmarks/README.md, "worker_memory"), and past 2 GiB in one call pyarrow cannot
#: build the binary column at all.
ARROW_BATCH_BYTES = 32 << 20
#: The first call of a read asks for at most this many messages, before any size is known.
FIRST_CONSUME = 256
#: How long one consume() may wait for the messages it asks for: the shortest wait, used
#: again after every call that moved a range, doubling up to the longest while none does.
#: consume() returns only once it has every message asked for or the wait is over, and a
#: range that ends at the log end past offsets without a record (transaction markers, a
#: compacted tail) never gets as many messages as it has offsets: a fixed 1 s wait made
#: every such read wait the whole second. The longest wait keeps the no-progress deadline
#: checked often.
_CONSUME_WAIT_MIN_S, _CONSUME_WAIT_MAX_S = 0.01, 1.0
#: While the position does not move, ask this often whether the partition still exists
#: (librdkafka does not always report a deleted topic as an error).
_EXISTENCE_CHECK_S = 3.0
_UNKNOWN_TOPIC_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})
_OUT_OF_RANGE_CODES = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})
#: librdkafka's default per-partition fetch size, and the smallest one used for small ranges.
_FETCH_BYTES_MAX, _FETCH_BYTES_MIN = 1_048_576, 65_536
#: The largest per-partition fetch of a catch-up range whose bytes are known. The broker
#: spends CPU on every fetch request whatever its size, on the cores the readers share when
#: it runs beside them, so a range known to be large asks for more per request: fewer
#: requests for the same bytes (benchmarks/README.md, "fetch_size"). The bound keeps one
#: partition's response at most a quarter of the
#: readers' fetch-ahead queue, which bounds a whole response (librdkafka lowers a request's
#: ``fetch.max.bytes`` to it, ``core/kafka_config.py``).
_FETCH_BYTES_CATCH_UP = 4 << 20


def fetch_bytes(ranges: Sequence[KafkaRange], bytes_per_offset: float | None = None) -> int:
    """``max.partition.fetch.bytes`` for a split: librdkafka's 1 MiB, or less for small
    ranges (1 KiB per record of the largest range rounded up to a power of two, at least
    64 KiB). The first fetch of each partition is that size whatever the range needs, so a
    small range fetches small: a fetch of 1 MiB per partition costs a small live split more
    than reading its records does. A larger
    record still arrives whole (the broker returns at least one record batch), in more round
    trips. Powers of two keep the kinds of reader settings few, so pooled consumers match
    the next split (the size is part of a consumer's settings).

    With ``bytes_per_offset`` (a catch-up batch planned from measured sizes), a range
    expected to hold more bytes fetches more per request: up to the power of two that holds
    the largest range, at most :data:`_FETCH_BYTES_CATCH_UP`, never less than the rule above."""
    largest = max(r.size for r in ranges)
    size = _FETCH_BYTES_MIN
    while size < largest * 1024 and size < _FETCH_BYTES_MAX:
        size *= 2
    if bytes_per_offset:
        while size < largest * bytes_per_offset and size < _FETCH_BYTES_CATCH_UP:
            size *= 2
    return size


def messages_per_batch(batch: pa.RecordBatch) -> int:
    """How many messages the next consume() may ask for so that its Arrow batch holds about
    :data:`ARROW_BATCH_BYTES`, from the bytes per row of ``batch`` (at least 1, at most
    :data:`CONSUME_BATCH`)."""
    per_row = batch.nbytes / max(batch.num_rows, 1)
    return max(1, min(CONSUME_BATCH, int(ARROW_BATCH_BYTES // max(per_row, 1.0))))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while reading a split.

    Each consume() creates thousands of Message objects that survive into older GC
    generations and trigger full collections, a large share of the read time. They
    hold no reference cycles, so pausing collects nothing later than it would have been.
    Spark's Python worker runs one task at a time; the previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_split(
    split: KafkaSplit,
    config: ReaderConfig,
    *,
    pool: ConsumerPool = WORKER_POOL,
    clock: Callable[[], float] = time.monotonic,
    publish_event: Callable[[ReaderConfig, ControlEvent], bool] = publish,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of every range of ``split`` as record batches, each record once,
    in offset order per bucket.

    When a range carries a backlog boundary and the consumer position moves from below it
    to at or past it, publish one BacklogFinishEvent (at most once per worker process for a
    source, bucket and boundary) before the batch that reached the boundary is handed over,
    so the event is on the control topic before the task ends. A publish that fails is
    logged, not raised: the driver finishes the bucket by its committed position anyway.
    Nothing is published when ``config`` has no control topic or the split says its
    readers do not publish (``KafkaSplit.publish_events``).
    A split with ``report_sizes`` publishes a RecordSizesReport (per topic, the bytes read
    and the offsets they spanned) once its last range is read, before its last batch is
    handed over.
    With tracing on in this process, such a range also exports a ``backlog.read`` span
    (child of the range's ``traceparent``), flushed before its last batch is handed over.

    Raises :class:`~backlog_source.core.errors.DataLossError` when records of a range were deleted before they were
    read (``failOnDataLoss=true``; with false it logs a warning and reads what remains),
    :class:`KafkaUnavailableError` when no range makes progress for
    ``kafkaConsumer.pollTimeoutMs``, and
    :class:`~backlog_source.core.errors.MalformedRecordError` for a timestamp a Spark timestamp
    cannot hold.

    The consumer comes from ``pool``, this worker's pool by default; a pool of no capacity
    gives a fresh consumer per split and closes it at the end (tests, benchmarks).
    """
    ranges = [r for r in split.ranges if r.end > r.start]
    if not ranges:
        return
    # Control events only where the query has a control topic and the driver found it may
    # use it (the split says so); spans follow the ranges' trace context either way.
    publishing = config.events_topic is not None and split.publish_events
    spans = {r.bucket: s for r in ranges if (s := ReadSpan.begin(r, split.source_id)) is not None}
    reached: set[Bucket] = set()
    sizes = _SizesRead(split.source_id, ranges) if publishing and split.report_sizes else None
    sized = ({} if "max.partition.fetch.bytes" in config.kafka.params
             else {"max.partition.fetch.bytes": fetch_bytes(ranges, split.bytes_per_offset)})
    settings = config.kafka.librdkafka(ClientRole.READER, **sized)
    key = settings_key(settings, (r.topic for r in ranges), generated_group_id="group.id" not in config.kafka.params)
    incidents: list[str] = []
    with step_timings.step("reader.create_consumer"):
        consumer = pool.borrow(settings, key)
    try:
        by_bucket = {r.bucket: r for r in ranges}
        with _gc_paused():
            for batch, positions, moved in _consume(consumer, ranges, config, clock, incidents):
                for bucket in moved:  # only the ranges that moved: a task may read ten thousand
                    r = by_bucket[bucket]
                    position = positions[bucket]
                    if r.crosses_boundary and position >= r.boundary and r.bucket not in reached:
                        reached.add(r.bucket)
                        span = spans.get(r.bucket)
                        if span is not None:
                            span.boundary_reached(position)
                        if publishing:
                            _report_finish(r, r.boundary, split.source_id, config, position, publish_event, span)
                    if position >= r.end and r.bucket in spans:
                        # Export before handing over the range's last batch: once Spark
                        # has it, the task may end and the worker may be reused or killed.
                        spans.pop(r.bucket).finish(position)
                if sizes is not None:
                    sizes.add(batch, positions, moved, incidents, config, publish_event)
                if batch is not None:
                    yield batch
    except GeneratorExit:  # the consumer of this generator stopped early: not a failure
        for span in spans.values():
            span.finish(None)
        pool.discard(consumer)
        raise
    except BaseException as exc:  # cleanup, then re-raised
        for span in spans.values():
            span.finish(None, error=type(exc).__name__)
        pool.discard(consumer)
        raise
    with step_timings.step("reader.release_consumer"):
        if incidents:
            pool.discard(consumer)
        else:
            pool.give_back(key, consumer)


def _report_finish(r: KafkaRange, boundary: int, source_id: str, config: ReaderConfig, position: int, publish_event,
                   span: ReadSpan | None) -> None:
    """Publish that ``r``'s bucket reached ``position``, at or past its ``boundary`` (called
    only for a range that crosses it)."""
    event = BacklogFinishEvent(
        source_id=source_id,
        topic=r.topic,
        partition=r.partition,
        boundary_offset=boundary,
        reached_offset=position,
        emitted_at_ms=int(time.time() * 1000),
        traceparent=span.ids.traceparent if span is not None else r.traceparent,
    )
    publish_once(config, event, publish_event)


class _SizesRead:
    """What a split of a catch-up batch read, per topic, published as a RecordSizesReport
    once every range has reached its end. Not published after an incident (records lost to
    retention, a partition gone): offsets skipped without their bytes would make records
    look smaller than they are, and the next batch larger than its budget."""

    def __init__(self, source_id: str, ranges: Sequence[KafkaRange]) -> None:
        self.source_id = source_id
        self.ranges = ranges
        topics = {r.topic for r in ranges}
        #: The topic of every batch when the split reads one (its bytes then cost O(1)).
        self.only_topic = next(iter(topics)) if len(topics) == 1 else None
        self.bytes = dict.fromkeys(topics, 0)
        self.published = False
        self._ends = {r.bucket: r.end for r in ranges}
        self._unread = set(self._ends)  # buckets whose range has not reached its end

    def add(self, batch: pa.RecordBatch | None, positions: dict[Bucket, int], moved: Iterable[Bucket],
            incidents: list[str], config: ReaderConfig, publish_event) -> None:
        """Count ``batch``; ``moved``: the buckets whose position changed with it."""
        if batch is not None:
            if self.only_topic is not None:
                self.bytes[self.only_topic] += data_bytes(batch)
            else:
                for topic, read in data_bytes_by_topic(batch).items():
                    self.bytes[topic] += read
        self._unread.difference_update(b for b in moved if positions[b] >= self._ends[b])
        if self.published or self._unread:
            return
        self.published = True
        if incidents:
            return
        offsets = dict.fromkeys(self.bytes, 0)
        for r in self.ranges:
            offsets[r.topic] += positions[r.bucket] - r.start
        publish_event(config, RecordSizesReport(
            self.source_id, {topic: TopicSizes(self.bytes[topic], offsets[topic]) for topic in self.bytes}))


@dataclass
class _Progress:
    """Where the read of one range stands."""

    range: KafkaRange
    position: int

    @property
    def done(self) -> bool:
        return self.position >= self.range.end


def _consume(consumer, ranges: Sequence[KafkaRange], config: ReaderConfig, clock, incidents: list[str]) -> Iterator[
        tuple[pa.RecordBatch | None, dict[Bucket, int], list[Bucket]]]:
    """Yield ``(batch or None, position of every range, the buckets that moved)`` until every
    range reaches its end; the positions are one dict, updated in place between yields.
    Appends to ``incidents`` what went wrong on the way (an error event other than end of
    partition, a partition gone): such a consumer is not reused.

    Each step costs what it moved, not the split's ranges: a task of ten thousand small
    ranges, read a few hundred messages at a time, went over every range at every step."""
    progress = {r.bucket: _Progress(r, r.start) for r in ranges}
    positions = {b: p.position for b, p in progress.items()}
    active = {b: p for b, p in progress.items() if not p.done}  # ranges not at their end, in split order
    remaining = sum(p.range.end - p.position for p in active.values())
    order = {b: i for i, b in enumerate(progress)}  # moved buckets are handed over in split order
    partitions = [TopicPartition(r.topic, r.partition, r.start) for r in ranges]
    with step_timings.step("reader.assign"):
        consumer.assign(partitions)
    one_topic = len({r.topic for r in ranges}) == 1
    first_fetch = step_timings.enabled()  # timed once, and only when timings are on
    wait_s = _CONSUME_WAIT_MIN_S
    per_call = FIRST_CONSUME
    last_progress = last_check = clock()
    while True:
        if not active:
            return
        # consume() waits until it has that many messages or the wait is over: asking for
        # exactly what remains returns as soon as the last record arrives (asking for more
        # made every small split wait the full wait, then a broker-held fetch for EOF). With
        # gaps, fewer messages than offsets exist; the end-of-partition event then ends the
        # range within one short wait.
        wanted = min(per_call, remaining)
        started = time.perf_counter() if first_fetch else 0.0
        messages = consumer.consume(wanted, wait_s)
        if first_fetch and messages:
            step_timings.record("reader.first_fetch", (time.perf_counter() - started) * 1000)
            first_fetch = False
        records, moved = _sort_out(consumer, messages, progress, config, one_topic, incidents)
        batch = None
        if records:
            with step_timings.step("reader.arrow"):
                single = len(active) == 1
                first_active = next(iter(active.values())).range
                batch = to_record_batch(records, first_active.topic if single or one_topic else None,
                                        first_active.partition if single else None, config.include_headers)
            per_call = messages_per_batch(batch)
        now = clock()
        wait_s = _CONSUME_WAIT_MIN_S if moved else min(wait_s * 2, _CONSUME_WAIT_MAX_S)
        if moved:
            for bucket, position in moved.items():
                remaining -= _advance(progress[bucket], position, positions, active, consumer)
            last_progress = last_check = now
            yield batch, positions, sorted(moved, key=order.__getitem__)
            continue
        stuck = list(active.values())
        if now - last_check >= _EXISTENCE_CHECK_S:
            last_check = now
            gone = [p for p in stuck if _vanished(consumer, p.range, config)]
            if gone:
                incidents.append("partition gone")
                for p in gone:
                    remaining -= _advance(p, _handle_vanished(p.range, p.position, config), positions, active, None)
                    consumer.pause([TopicPartition(p.range.topic, p.range.partition)])
                yield None, positions, [p.range.bucket for p in gone]
                continue
        if (now - last_progress) * 1000 >= config.poll_timeout_ms:
            described = ", ".join(f"{p.range.bucket} [{p.range.start}, {p.range.end}) at offset {p.position}"
                                  for p in stuck)
            raise KafkaUnavailableError(
                f"no progress reading {described} from Kafka at {config.kafka.bootstrap_servers} for "
                f"{config.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs). Check kafka.bootstrap.servers and "
                f"that the brokers are reachable from the executors"
            )


def _advance(state: _Progress, position: int, positions: dict[Bucket, int], active: dict[Bucket, _Progress],
             consumer) -> int:
    """Move ``state`` to ``position`` (never back); a range at its end leaves ``active`` and,
    with a ``consumer``, its partition is paused. Returns how many offsets of its range that
    read: what the split has left to read shrinks by it."""
    bucket = state.range.bucket
    before = min(state.position, state.range.end)
    state.position = max(state.position, position)
    positions[bucket] = state.position
    if state.done and active.pop(bucket, None) is not None and consumer is not None:
        consumer.pause([TopicPartition(bucket.topic, bucket.partition)])
    return min(state.position, state.range.end) - before


def _sort_out(consumer, messages: list[Message], progress: dict[Bucket, _Progress], config: ReaderConfig,
              one_topic: bool, incidents: list[str]) -> tuple[list[Message], dict[Bucket, int]]:
    """The records of ``messages`` that belong to their ranges (in order), and the new
    position of every range that moved. Errors are handled here: end of partition moves a
    position, out-of-range and vanished partitions are data loss, fatal errors raise."""
    if not messages:
        return [], {}
    if not any(map(Message.error, messages)):  # C-level scan; errors are rare
        return _in_range(messages, progress, one_topic)
    records: list[Message] = []
    moved: dict[Bucket, int] = {}
    for message in messages:
        error = message.error()
        if error is None:
            kept, positions = _in_range([message], progress, one_topic)
            records.extend(kept)
            for bucket, position in positions.items():
                moved[bucket] = max(moved.get(bucket, position), position)
            continue
        if error.code() != KafkaError._PARTITION_EOF:
            incidents.append(error.name())
        bucket = Bucket(message.topic(), message.partition())
        state = progress.get(bucket)
        if state is None:
            log.warning("error for a partition this split does not read: %s", config.kafka.redact(error.str()))
            continue
        position = max(state.position, moved.get(bucket, state.position))
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            # Every record before the end-of-partition offset has been delivered.
            moved[bucket] = max(position, min(message.offset(), state.range.end))
        elif code in _OUT_OF_RANGE_CODES:
            moved[bucket] = _handle_out_of_range(consumer, state.range, position, config)
        elif code in _UNKNOWN_TOPIC_CODES and _vanished(consumer, state.range, config):
            moved[bucket] = _handle_vanished(state.range, position, config)
        elif code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            # DESCRIBE without READ: the driver planned the batch, the fetch is refused. Asked
            # again, it failed as "no progress ... check kafka.bootstrap.servers" after
            # kafkaConsumer.pollTimeoutMs.
            raise access_refused(Refusal.TOPIC_AUTHORIZATION, config.kafka, error.str(), topic=bucket.topic,
                                 operation="READ")
        elif error.fatal():
            raise KafkaUnavailableError(
                f"reading {bucket} [{state.range.start}, {state.range.end}) failed at offset {position}: "
                f"{config.kafka.redact(error.str())}"
            )
        else:
            log.warning("transient error reading %s: %s", bucket, config.kafka.redact(error.str()))
    return records, {b: o for b, o in moved.items() if o > progress[b].position}


def _in_range(messages: list[Message], progress: dict[Bucket, _Progress], one_topic: bool) -> tuple[
        list[Message], dict[Bucket, int]]:
    """Error-free ``messages`` cut to their ranges, and each moved range's position after
    them. A record at or past a range's end ends that range (the records before it were
    all delivered)."""
    topic_of_all = next(iter(progress)).topic if one_topic else None
    kept: list[Message] = []
    moved: dict[Bucket, int] = {}
    index = 0
    for topic, partition, length in _runs(messages, one_topic):
        chunk = messages[index:index + length]
        index += length
        bucket = Bucket(topic if topic is not None else topic_of_all, partition)
        state = progress.get(bucket)
        if state is None or state.done:
            continue  # prefetched records of a range already done, or not ours
        first, last = chunk[0].offset(), chunk[-1].offset()
        end = state.range.end
        if first >= state.position and last < end:
            kept.extend(chunk)
            moved[bucket] = last + 1
            continue
        inside = [m for m in chunk if state.position <= m.offset() < end]
        kept.extend(inside)
        if last >= end:
            moved[bucket] = end
        elif inside:
            moved[bucket] = inside[-1].offset() + 1
    return kept, moved


def _runs(messages: list[Message], one_topic: bool) -> list[tuple[str | None, int, int]]:
    """``(topic, partition, length)`` of each run of consecutive records of one bucket
    (topic None when the split reads one topic). A fetch returns long runs, often one: the
    runs are found by C-level list operations, never by Python code per record (counting
    each run with a generator took as long as building the Arrow columns)."""
    partitions = list(map(Message.partition, messages))
    if one_topic:
        if partitions.count(partitions[0]) == len(partitions):
            return [(None, partitions[0], len(partitions))]
        keys = partitions
    else:
        keys = list(zip(map(Message.topic, messages), partitions))
    runs = []
    for key, run in itertools.groupby(keys):
        topic, partition = (None, key) if one_topic else key
        runs.append((topic, partition, len(list(run))))
    return runs


def _vanished(consumer, r: KafkaRange, config: ReaderConfig) -> bool:
    """Confirm with a metadata request that the range's partition no longer exists (an
    unknown-topic error can also be a transient metadata glitch)."""
    try:
        metadata = consumer.list_topics(r.topic, timeout=min(config.poll_timeout_ms / 1000, 10))
    except Exception:  # process boundary: a check after a failure; cannot tell: keep trying until pollTimeoutMs
        return False  # cannot tell: keep trying until pollTimeoutMs
    topic = metadata.topics.get(r.topic)
    if topic is not None and topic.error is not None:
        # Only "unknown topic" says it is gone; "leader not available" and the like are a
        # cluster in motion, and taken for deletion they failed the read as data loss, or
        # skipped the rest of the range with failOnDataLoss=false.
        return topic.error.code() in _UNKNOWN_TOPIC_CODES
    return topic is None or r.partition not in topic.partitions


def _handle_vanished(r: KafkaRange, position: int, config: ReaderConfig) -> int:
    """The partition was deleted while this range was read: fail, or finish the range."""
    message = (
        f"{r.bucket} no longer exists; records {position}..{r.end - 1} of the batch range "
        f"[{r.start}, {r.end}) cannot be read"
    )
    report_data_loss(config.fail_on_data_loss, message, instead="skip them")
    return r.end


def _handle_out_of_range(consumer, r: KafkaRange, position: int, config: ReaderConfig) -> int:
    """The broker no longer has ``position``: fail, or skip to the earliest offset and return it.

    What is skipped is decided from the partition's offsets, so they must be real answers:
    a failed or invalid one (see :mod:`backlog_source.core.kafka_answers`) raises
    :class:`KafkaUnavailableError` instead of skipping on a guess."""
    tp = TopicPartition(r.topic, r.partition)
    try:
        low, high = watermarks(consumer, tp, config.poll_timeout_ms / 1000)
    except (KafkaException, NoValidOffsets) as exc:  # timed out, broker down, or an invalid answer
        raise KafkaUnavailableError(
            f"offset {position} of {r.bucket} is out of range, and asking Kafka for its earliest and latest "
            f"offsets failed within kafkaConsumer.pollTimeoutMs ({config.poll_timeout_ms} ms): "
            f"{config.kafka.redact(str(exc))}"
        ) from None
    if low <= position < high:
        # Kafka has the offset after all (Spark's KafkaDataConsumer: "Found a disappeared
        # offset"; a topic re-created and refilled fast, a leader in motion). Skipping to the
        # range's end here dropped records that exist; read it again instead. If it keeps
        # failing, no progress for kafkaConsumer.pollTimeoutMs fails the read.
        log.warning("offset %d of %s was answered out of range, but Kafka holds [%d, %d): reading it again",
                    position, r.bucket, low, high)
        _assign_afresh(consumer, tp, position)
        return position
    # Below the earliest offset: retention deleted records. At or past the log end: the
    # topic was re-created or truncated, and nothing of the rest of the range exists.
    resume = min(low, r.end) if low > position else r.end
    message = (
        f"offset {position} of {r.bucket} is out of range (earliest {low}, log end {high}); "
        f"records {position}..{resume - 1} of the batch range [{r.start}, {r.end}) are gone"
    )
    report_data_loss(config.fail_on_data_loss, message, instead="skip them")
    if resume < r.end:
        _assign_afresh(consumer, tp, resume)
    return resume


def _assign_afresh(consumer, tp: TopicPartition, offset: int) -> None:
    """Fetch ``tp`` from ``offset`` next. Not seek(): librdkafka keeps a partition whose fetch
    failed out of range in an error state and refuses a seek on it ("Local: Erroneous
    state"); assigned afresh, it fetches from ``offset``."""
    consumer.incremental_unassign([tp])
    consumer.incremental_assign([TopicPartition(tp.topic, tp.partition, offset)])
