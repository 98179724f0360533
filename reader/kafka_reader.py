"""The executor read path: one split -> Arrow record batches.

Which process: a Python worker on an executor. The consumer is created inside
:func:`read_split` and closed in ``finally``; nothing here survives the call.

The end of the range is detected by consumer position, never by the record at ``end - 1``
(compaction and transaction markers leave gaps) and never by "an empty poll means done":
a record at or past ``end``, or an end-of-partition event at or past ``end``, proves that
every record of ``[start, end)`` has been delivered.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from backlog_core import span_names, telemetry
from backlog_core.errors import DataLossError, KafkaUnavailableError
from backlog_core.kafka_config import ClientRole
from backlog_core.settings import ReaderConfig
from backlog_core.trace_context import SpanContextIds, SpanEventRecord, SpanRecord, new_span_id
from events.channel import publish, publish_once
from events.finish_event import BacklogFinishEvent
from reader.arrow import to_record_batch
from reader.split import KafkaSplit

log = logging.getLogger(__name__)

#: Records per consume() call, and so per Arrow batch (measured in benchmarks/).
CONSUME_BATCH = 10_000
#: Upper bound of one consume() wait, so the no-progress deadline is checked often.
_CONSUME_WAIT_S = 1.0
#: While the position does not move, ask this often whether the partition still exists
#: (librdkafka does not always report a deleted topic as an error).
_EXISTENCE_CHECK_S = 3.0


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while reading a split.

    Each consume() creates thousands of Message objects that survive into older GC
    generations and trigger full collections: about 30% of the read time measured. They
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
    consumer_factory: Callable[[dict], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
    publish_event: Callable[[ReaderConfig, BacklogFinishEvent], bool] = publish,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``split`` as record batches, in offset order, each exactly once.

    When the split carries a backlog boundary and the consumer position moves from below it
    to at or past it, publish one BacklogFinishEvent (at most once per worker process for a
    source, bucket and boundary), flushed before the batch that reached the boundary is
    handed over, so the event is on the control topic before the task ends. A publish that
    fails is logged, not raised: the enumerator's committed-position safety net finishes the
    bucket anyway. With tracing on in this process, such a split also exports a
    ``backlog.read`` span (child of the split's ``traceparent``), flushed before the last
    batch is handed over.

    Raises :class:`DataLossError` when records of the range were deleted before they were
    read (``failOnDataLoss=true``; with false it logs a warning and reads what remains), and
    :class:`KafkaUnavailableError` when the position makes no progress for
    ``kafkaConsumer.pollTimeoutMs``.
    """
    if split.end <= split.start:
        return
    span = _ReadSpan.begin(split, config)
    consumer = (consumer_factory or Consumer)(config.kafka.librdkafka(ClientRole.READER))
    try:
        with _gc_paused():
            for batch, position in _consume_range(consumer, split, config, clock):
                if split.crosses_boundary and position >= split.boundary and config.events_topic is not None:
                    if span is not None:
                        span.boundary_reached(position)
                    _report_finish(split, config, position, publish_event, span)
                if position >= split.end and span is not None:
                    # Export the span before handing over the last batch: once Spark has
                    # it, the task may end and the worker may be reused or killed.
                    span.finish(position)
                    span = None
                if batch is not None:
                    yield batch
    except GeneratorExit:  # the consumer of this generator stopped early: not a failure
        if span is not None:
            span.finish(None)
        raise
    except BaseException as exc:
        if span is not None:
            span.finish(None, error=type(exc).__name__)
        raise
    finally:
        consumer.close()


def _report_finish(split: KafkaSplit, config: ReaderConfig, position: int, publish_event, span) -> None:
    if split.boundary is None:
        return
    event = BacklogFinishEvent(
        source_id=split.source_id,
        topic=split.topic,
        partition=split.partition,
        boundary_offset=split.boundary,
        reached_offset=position,
        emitted_at_ms=int(time.time() * 1000),
        traceparent=span.ids.traceparent if span is not None else split.traceparent,
    )
    publish_once(config, event, publish_event)


class _ReadSpan:
    """The ``backlog.read`` span of a split that crosses its bucket's boundary, as a child
    of the bucket span whose context the split carries. Exported (and flushed) once."""

    def __init__(self, split: KafkaSplit, parent: SpanContextIds) -> None:
        self.split = split
        self.parent = parent
        self.ids = SpanContextIds(parent.trace_id, new_span_id())
        self.start_ns = time.time_ns()
        self.events: list[SpanEventRecord] = []

    @classmethod
    def begin(cls, split: KafkaSplit, config: ReaderConfig) -> "_ReadSpan | None":
        if not (config.events_topic is not None and split.crosses_boundary):
            return None
        parent = SpanContextIds.parse(split.traceparent)
        if parent is None or not telemetry.enabled():
            return None
        return cls(split, parent)

    def boundary_reached(self, position: int) -> None:
        if not self.events:
            self.events.append(
                SpanEventRecord(span_names.BOUNDARY_REACHED, time.time_ns(), {span_names.REACHED_OFFSET: position})
            )

    def finish(self, position: int | None, error: str | None = None) -> None:
        split = self.split
        attributes: dict[str, object] = {
            span_names.MESSAGING_SYSTEM: span_names.MESSAGING_SYSTEM_KAFKA,
            span_names.DESTINATION_NAME: split.topic,
            span_names.DESTINATION_PARTITION: str(split.partition),
            span_names.SPLIT_START_OFFSET: split.start,
            span_names.SPLIT_END_OFFSET: split.end,
            span_names.BOUNDARY_OFFSET: split.boundary,
            span_names.SOURCE_ID: split.source_id,
        }
        if position is not None:
            attributes[span_names.REACHED_OFFSET] = position
        record = SpanRecord(
            span_names.READ, self.ids, self.parent, self.start_ns, time.time_ns(), attributes, tuple(self.events), error
        )
        telemetry.export([record])
        telemetry.flush()


def _consume_range(
    consumer, split: KafkaSplit, config: ReaderConfig, clock
) -> Iterator[tuple[pa.RecordBatch | None, int]]:
    """Yield ``(batch or None, position after it)`` until the position reaches the end."""
    topic, partition, end = split.topic, split.partition, split.end
    consumer.assign([TopicPartition(topic, partition, split.start)])
    position = split.start
    last_progress = last_check = clock()
    while position < end:
        # consume() waits until it has that many messages or the timeout passed. Asking for
        # more than the range still holds made every small split wait the full second, and
        # waiting for the end-of-partition event costs a broker-held fetch (fetch.wait.max.ms,
        # 500 ms): measured, a 500-record split took 1.0 s, then 0.5 s. Asking for exactly
        # what remains returns as soon as the last record arrives; only ranges with gaps
        # (compaction, transaction markers) wait for the end-of-partition event.
        messages = consumer.consume(min(CONSUME_BATCH, end - position), _CONSUME_WAIT_S)
        records = messages
        moved_to = position
        if any(map(Message.error, messages)):  # C-level scan; errors are rare
            records = []
            for message in messages:
                error = message.error()
                if error is None:
                    records.append(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    moved_to = max(moved_to, message.offset())
                elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    moved_to = _handle_out_of_range(consumer, split, position, config)
                elif error.code() in _UNKNOWN_TOPIC_CODES and _vanished(consumer, split, config):
                    moved_to = _handle_vanished(split, position, config)
                elif error.fatal():
                    raise KafkaUnavailableError(
                        f"reading {split.bucket} [{split.start}, {end}) failed at offset {position}: "
                        f"{config.kafka.redact(error.str())}"
                    )
                else:
                    log.warning("transient error reading %s: %s", split.bucket, config.kafka.redact(error.str()))
        if records and records[-1].offset() >= end:
            records = [m for m in records if m.offset() < end]
            moved_to = end
        batch = None
        if records:
            moved_to = max(moved_to, records[-1].offset() + 1)
            batch = to_record_batch(records, topic, partition, config.include_headers)
        now = clock()
        if moved_to > position:
            position = moved_to
            last_progress = last_check = now
            yield batch, position
        elif now - last_check >= _EXISTENCE_CHECK_S and _vanished(consumer, split, config):
            position = _handle_vanished(split, position, config)
            yield None, position
        elif (now - last_progress) * 1000 >= config.poll_timeout_ms:
            raise KafkaUnavailableError(
                f"no progress reading {split.bucket} [{split.start}, {end}) at offset {position} for "
                f"{config.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs); is the broker reachable?"
            )
        if now - last_check >= _EXISTENCE_CHECK_S:
            last_check = now


_UNKNOWN_TOPIC_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})


def _vanished(consumer, split: KafkaSplit, config: ReaderConfig) -> bool:
    """Confirm with a metadata request that the split's partition no longer exists (an
    unknown-topic error can also be a transient metadata glitch)."""
    try:
        metadata = consumer.list_topics(split.topic, timeout=min(config.poll_timeout_ms / 1000, 10))
    except Exception:
        return False  # cannot tell: keep trying until pollTimeoutMs
    topic = metadata.topics.get(split.topic)
    return topic is None or topic.error is not None or split.partition not in topic.partitions


def _handle_vanished(split: KafkaSplit, position: int, config: ReaderConfig) -> int:
    """The partition was deleted while this split read it: fail, or finish the split."""
    message = (
        f"{split.bucket} no longer exists; records {position}..{split.end - 1} of the batch range "
        f"[{split.start}, {split.end}) cannot be read"
    )
    if config.fail_on_data_loss:
        raise DataLossError(message + ". Set failOnDataLoss=false to skip them")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return split.end


def _handle_out_of_range(consumer, split: KafkaSplit, position: int, config: ReaderConfig) -> int:
    """The broker no longer has ``position``: fail, or skip to the earliest offset and return it."""
    low, high = consumer.get_watermark_offsets(
        TopicPartition(split.topic, split.partition), timeout=config.poll_timeout_ms / 1000
    )
    # Below the earliest offset: retention deleted records. At or past the log end: the
    # topic was re-created or truncated, and nothing of the rest of the range exists.
    resume = min(low, split.end) if low > position else split.end
    message = (
        f"offset {position} of {split.bucket} is out of range (earliest {low}, log end {high}); "
        f"records {position}..{resume - 1} of the batch range [{split.start}, {split.end}) "
        "are gone"
    )
    if config.fail_on_data_loss:
        raise DataLossError(message + ". Set failOnDataLoss=false to skip them")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    if resume < split.end:
        consumer.assign([TopicPartition(split.topic, split.partition, resume)])
    return resume
