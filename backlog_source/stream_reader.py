"""``spark.readStream.format("backlog")``: the reader of a streaming query, Spark's hooks
delegating to the enumerator on the driver and to the read path on executors (which process
runs which hook: :mod:`backlog_source.datasource`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from backlog_source.core import gc_pause, step_timings
from backlog_source.core.buckets import to_nested
from backlog_source.core.jvm_heap import HEAP_SHARE, default_catch_up_bytes, driver_heap_bytes
from backlog_source.core.settings import EVENTS_TOPIC_OFF, ReaderConfig, SourceSettings
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.enumerator import Enumerator
from backlog_source.enumerator.group_commits import GroupCommitter
from backlog_source.enumerator.kafka_admin import KafkaAdmin
from backlog_source.enumerator.listing_ahead import ListingAhead
from backlog_source.enumerator.state import SourceOffset
from backlog_source.events.control_topic import ControlTopic
from backlog_source.reader.kafka_reader import read_split
from backlog_source.reader.snapshot_reader import read_snapshot_split
from backlog_source.reader.worker_heap import prepare_once
from backlog_source.split.batch_splits import plan_splits
from backlog_source.split.kafka_split import KafkaSplit, SnapshotSplit
from backlog_source.split.planning import ReadBudget

log = logging.getLogger(__name__)

#: How many offset dicts the planner keeps with their decoded state: Spark hands back the
#: dicts it was given (the next batch's start, ``partitions(start, end)``), so a dict of ten
#: thousand partitions is parsed once, not at every hook.
KEPT_OFFSETS = 4


class BacklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's stream-reader hooks, delegating to :class:`~backlog_source.enumerator.enumerator.Enumerator`
    on the driver and to :func:`~backlog_source.reader.kafka_reader.read_split` on executors."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings: SourceSettings | None = settings
        self.reader_config: ReaderConfig = settings.reader_config
        self._enumerator: Enumerator | None = None
        self._offsets: list[tuple[dict, SourceOffset]] = []  # the latest first, at most KEPT_OFFSETS
        self._group_commits: GroupCommitter | None = None
        self._initial: dict | None = None

    def __getstate__(self) -> dict:
        # Spark pickles this object into every task: executors get the narrow reader
        # configuration only, never the planner's settings, a Kafka client or offsets.
        return {"settings": None, "reader_config": self.reader_config, "_enumerator": None, "_offsets": [],
                "_group_commits": None, "_initial": None}

    def _decode(self, data: dict) -> SourceOffset:
        """``offset_codec.decode(data)``, from the kept offsets when an equal dict was seen."""
        for kept, offset in self._offsets:
            if kept == data:
                return offset
        offset = offset_codec.decode(data)
        self._keep(data, offset)
        return offset

    def _keep(self, data: dict, offset: SourceOffset) -> None:
        self._offsets = [(data, offset), *self._offsets[:KEPT_OFFSETS - 1]]

    @property
    def enumerator(self) -> Enumerator:
        if self._enumerator is None:
            settings = self._driver_settings()
            client = KafkaAdmin.from_settings(settings)
            tracking = settings.backlog_enabled and settings.backlog_events_topic is not None
            control = ControlTopic(settings, client) if tracking else None
            if settings.backlog_enabled and control is None:
                log.info("backlog.eventsTopic is %r: no control topic, so partitions leave backlog by their committed "
                         "positions without executors' confirmations, and catch-up batches are planned from a sample "
                         "the driver reads", EVENTS_TOPIC_OFF)
            # The subscription is listed for the next plan while Spark runs each batch, by a
            # client of its own (enumerator/listing_ahead.py).
            ahead = ListingAhead(settings, KafkaAdmin.from_settings(settings))
            self._enumerator = Enumerator(settings, client, control, listing_ahead=ahead)
            if settings.backlog_max_bytes_per_trigger is None:
                log.info("backlog.maxBytesPerTrigger is not set: catch-up batches read about %d MiB (1/%d of the "
                         "driver's %s heap)", default_catch_up_bytes(driver_heap_bytes()) >> 20, HEAP_SHARE,
                         _heap_text(driver_heap_bytes()))
        return self._enumerator

    def _driver_settings(self) -> SourceSettings:
        if self.settings is None:
            raise RuntimeError("the planner's settings are not shipped to executors")
        return self.settings

    # -- driver --------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        initial = self.enumerator.initial_offset()
        encoded = offset_codec.encode(initial)
        self._keep(encoded, initial)
        self._initial = encoded
        return encoded

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadBudget.default_limit(self._driver_settings(), driver_heap_bytes())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next batch, under the budget Spark's ``limit`` stands for
        (:meth:`ReadBudget.from_limit`; an unset ``backlog.maxBytesPerTrigger`` is sized from
        the heap of the driver JVM this planner runs under, core/jvm_heap.py). Python's cyclic
        collector is held off meanwhile (core/gc_pause.py: a quarter of the requests' time at
        ten thousand partitions). Once the answer is ready, the subscription's next listing
        starts in the background (enumerator/listing_ahead.py)."""
        with step_timings.step("driver.latestOffset"), gc_pause.paused():
            answer = self._latest_offset(start, limit)
        self.enumerator.list_ahead()
        return answer

    def _latest_offset(self, start: dict, limit: ReadLimit) -> dict:
        with step_timings.step("driver.latestOffset.decode"):
            start_offset = self._decode(start)
        if start != self._initial:
            self._commit_to_group(start)  # the end of the last batch Spark committed
        budget = ReadBudget.from_limit(limit, self._driver_settings(), driver_heap_bytes())
        end = self.enumerator.latest_offset(start_offset, budget)
        # Returning the very dict Spark gave us tells it there is nothing new to run.
        if end == start_offset:
            return start
        with step_timings.step("driver.latestOffset.encode"):
            encoded = offset_codec.encode(end)
        self._keep(encoded, end)
        return encoded

    def reportLatestOffset(self) -> dict | None:
        """The latest offsets the last ``latestOffset`` saw (Spark's progress reports them)."""
        with step_timings.step("driver.reportLatestOffset"):
            latest = self.enumerator.report_latest()
            if not latest:
                return None
            # Caught up, the batch just planned ends at the latest offsets: its positions, already
            # encoded, are the answer (a comparison costs a fraction of an encoding of every partition).
            for kept, offset in self._offsets[:1]:
                if offset.positions == latest:
                    return kept["positions"]
            return to_nested(latest)

    def prepareForTriggerAvailableNow(self) -> None:
        self.enumerator.prepare_for_available_now()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The splits of the batch ``[start, end)``, planned by the enumerator
        (:func:`~backlog_source.split.batch_splits.plan_splits`): a function of the two
        offsets, so a replayed batch reads the same ranges, except the ranges of a topic
        deleted and re-created since the offsets were planned (:meth:`Enumerator.confirm_reads`:
        the batch fails, or reads nothing of it); whether its readers publish control events is
        the run's decision (:meth:`Enumerator.publishes_events`)."""
        with step_timings.step("driver.partitions"), gc_pause.paused():
            end_offset = self._decode(end)
            reads = self.enumerator.confirm_reads(end_offset, end_offset.reads_since(self._decode(start)))
            return plan_splits(reads, self._driver_settings(), publish_events=self.enumerator.publishes_events())

    def commit(self, end: dict) -> None:
        """Spark committed the batch ending at ``end``: with ``backlog.commitOffsetsToGroup``,
        its offsets go to the consumer group (in the background; usually ``latestOffset``
        offered them already, enumerator/group_commits.py says why)."""
        self._commit_to_group(end)

    def _commit_to_group(self, committed: dict) -> None:
        """Offer ``committed`` (a batch end Spark committed) to the group committer; nothing,
        not even a decode, unless ``backlog.commitOffsetsToGroup`` is on."""
        settings = self._driver_settings()
        if not settings.backlog_commit_offsets_to_group:
            return
        if self._group_commits is None:
            self._group_commits = GroupCommitter(settings.kafka, settings.api_timeout_ms)
        self._group_commits.offer(self._decode(committed))

    def stop(self) -> None:
        if self._group_commits is not None:
            self._group_commits.close()
            self._group_commits = None
        if self._enumerator is not None:
            self._enumerator.close()
            self._enumerator = None

    # -- executors -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        prepare_once()
        if isinstance(partition, SnapshotSplit):
            return read_snapshot_split(partition, self.reader_config)
        if not isinstance(partition, KafkaSplit):
            raise TypeError(f"expected a KafkaSplit or SnapshotSplit, got {type(partition).__name__}")
        return read_split(partition, self.reader_config)


def _heap_text(heap: int | None) -> str:
    return f"{heap / (1 << 30):.3g} GiB" if heap is not None else "unknown (Spark's default 1 GiB assumed)"
