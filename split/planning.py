"""Pure planning: how much a batch may read (:class:`ReadBudget`, from Spark's read limit),
how far it reads, and how its ranges are cut into input partitions.

No Kafka, no Spark session, no clock (of Spark, only its read-limit values): every function
here is a function of its arguments, which is what lets ``partitions(start, end)`` be
replayed exactly after a crash. Where a user can compare the result with Spark's Kafka
source, the arithmetic is Spark's (cited per function).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, ReadMinRows

from backlog_source.core.buckets import Bucket
from backlog_source.core.jvm_heap import default_catch_up_bytes
from backlog_source.core.settings import SourceSettings
from backlog_source.split.kafka_split import KafkaRange


@dataclass(frozen=True)
class ReadBudget:
    """How much one batch may read, from Spark's read limit (:meth:`from_limit`).

    ``max_records``: about this many records at most (Spark's proportional allocation).
    ``min_records``: skip the batch while fewer are available, unless ``maxTriggerDelay``
    has passed since the last batch (the first batch of a run always runs, as in Spark).
    ``backlog_max_records``: replaces ``max_records`` while the source is processing backlog
    as of this batch (after discovery, restart and re-entry), so a batch that enters backlog
    is already sized for it. ``backlog_max_bytes`` and ``backlog_target_ms`` bound a batch
    while processing backlog too, in bytes and in time (``enumerator/catch_up.py``); where
    several bounds apply, the smallest wins.
    """

    max_records: int | None = None
    min_records: int | None = None
    backlog_max_records: int | None = None
    backlog_max_bytes: int | None = None
    backlog_target_ms: int | None = None

    @classmethod
    def from_limit(cls, limit: ReadLimit, settings: SourceSettings, driver_heap: int | None = None) -> "ReadBudget":
        """The budget of one ``latestOffset(start, limit)``: the one place Spark's read limit is
        read, as ``KafkaMicroBatchStream.latestOffset`` matches ``ReadLimit`` in one place.

        Spark 4.2 hands a Python source one of two limits (its ``PythonStreamingSourceRunner``
        refuses any other): ``ReadAllAvailable``, which ``MicroBatchExecution`` passes for
        ``Trigger.Once`` and which reads everything whatever the options say (PySpark's
        ``latestOffset`` contract; Spark's Kafka source does so there too), or the source's
        own :meth:`default_limit`, handed back as it was given, which stands for the source's
        options: :meth:`from_settings` with ``driver_heap`` (processing-time triggers and
        ``Trigger.AvailableNow``). The default limit is never ``ReadAllAvailable`` (the
        options always set a byte budget), so the two cannot be confused.
        """
        if isinstance(limit, ReadAllAvailable):
            return cls()
        return cls.from_settings(settings, driver_heap)

    @classmethod
    def default_limit(cls, settings: SourceSettings, driver_heap: int | None = None) -> ReadLimit:
        """The ``getDefaultReadLimit`` of a source with these options. PySpark has no composite
        limit, and the budget follows the backlog state, which changes while the query runs;
        so the limit is the nearest single one to :meth:`from_settings`: the larger record
        cap, else the minimum, else the byte budget. Spark only hands it back
        (:meth:`from_limit`)."""
        budget = cls.from_settings(settings, driver_heap)
        if budget.caps:
            return ReadMaxRows(max(budget.caps))
        if budget.min_records is not None:
            return ReadMinRows(budget.min_records)
        if budget.backlog_max_bytes is not None:
            return ReadMaxBytes(budget.backlog_max_bytes)
        return ReadAllAvailable()

    @classmethod
    def from_settings(cls, settings: SourceSettings, driver_heap: int | None = None) -> "ReadBudget":
        """The budget the source's own options set: ``maxOffsetsPerTrigger``,
        ``minOffsetsPerTrigger``, ``backlog.maxOffsetsPerTrigger``,
        ``backlog.maxBytesPerTrigger`` and ``backlog.targetBatchDuration``. The one place
        that combines the read limits. ``backlog.maxBytesPerTrigger`` not set: a share of
        ``driver_heap``, the driver's maximum heap in bytes (None: Spark's default driver),
        as :func:`~backlog_source.core.jvm_heap.default_catch_up_bytes` sizes it."""
        max_bytes = settings.backlog_max_bytes_per_trigger
        if max_bytes is None:
            max_bytes = default_catch_up_bytes(driver_heap)
        return cls(settings.max_offsets_per_trigger, settings.min_offsets_per_trigger,
                   settings.backlog_max_offsets_per_trigger, max_bytes, settings.backlog_target_batch_duration_ms)

    @property
    def caps(self) -> list[int]:
        """The record caps set for either state."""
        return [n for n in (self.max_records, self.backlog_max_records) if n is not None]

    @property
    def one_batch_records(self) -> int | None:
        """The most records one batch reads in either state (None: no limit in either)."""
        return min(self.caps) if self.caps else None

    @property
    def bounds_catch_up(self) -> bool:
        """Whether a catch-up batch is bounded in bytes or time."""
        return self.backlog_max_bytes is not None or self.backlog_target_ms is not None

    def for_state(self, processing_backlog: bool) -> "ReadBudget":
        """The bounds that apply to a batch in that state: the backlog ones only in backlog."""
        if not processing_backlog:
            return ReadBudget(self.max_records, self.min_records)
        records = self.backlog_max_records if self.backlog_max_records is not None else self.max_records
        return ReadBudget(records, self.min_records, None, self.backlog_max_bytes, self.backlog_target_ms)


def lag(start: Mapping[Bucket, int], latest: Mapping[Bucket, int]) -> dict[Bucket, int]:
    """Records available per bucket: ``latest - start``, never negative; buckets of ``start`` only."""
    return {bucket: max(0, latest.get(bucket, position) - position) for bucket, position in start.items()}


def rate_limit(start: Mapping[Bucket, int], latest: Mapping[Bucket, int], max_records: int) -> dict[Bucket, int]:
    """End positions that read about ``max_records`` in total, as Spark's Kafka source does
    (``KafkaMicroBatchStream.rateLimit``).

    Each lagging bucket gets ``limit * lag / totalLag`` records, rounded down, but at least
    one, so a small partition is never starved by a big one; never past its latest offset.
    The rounding makes the total a little lower (or, with many tiny lags, higher) than the
    limit, exactly as Spark's.
    """
    if max_records <= 0:
        raise ValueError(f"max_records must be positive, got {max_records}")

    def share(size: int, total: float, _bucket: Bucket) -> int:
        prorate = max_records * (size / total)
        return math.ceil(prorate) if prorate < 1 else math.floor(prorate)

    return _shared(start, latest, {}, share)


def byte_limit(start: Mapping[Bucket, int], latest: Mapping[Bucket, int], max_bytes: int,
               bytes_per_offset: Mapping[Bucket, float], default_bytes_per_offset: float) -> dict[Bucket, int]:
    """End positions that read about ``max_bytes`` of records in total, shared as
    :func:`rate_limit` shares a record cap, in bytes: each lagging bucket gets ``max_bytes *
    lagBytes / totalLagBytes`` (its lag times its bytes per offset, ``default_bytes_per_offset``
    where none was measured), turned into offsets rounded down but at least one, never past its
    latest offset. So a batch reads at most ``max_bytes`` plus one record per partition, as
    measured."""
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    weight = {b: max(bytes_per_offset.get(b, default_bytes_per_offset), 1e-9) for b in start}

    def share(size: int, total: float, bucket: Bucket) -> int:
        return max(1, math.floor(max_bytes * (size * weight[bucket] / total) / weight[bucket]))

    return _shared(start, latest, weight, share)


def _shared(start: Mapping[Bucket, int], latest: Mapping[Bucket, int], weight: Mapping[Bucket, float],
            share: Callable[[int, float, Bucket], int]) -> dict[Bucket, int]:
    """End positions where each lagging bucket reads ``share(lag, totalWeightedLag, bucket)``
    offsets (lag weighted by ``weight``, 1 where absent), never past its latest offset; a
    bucket without lag ends at its latest offset; with no lag at all, every bucket does."""
    available = {b: n for b, n in lag(start, latest).items() if n > 0}
    total = sum(n * weight.get(b, 1.0) for b, n in available.items())
    end = {}
    for bucket, position in start.items():
        size = available.get(bucket)
        if size is None or total == 0:
            end[bucket] = max(position, latest.get(bucket, position))
            continue
        end[bucket] = min(position + size, position + share(size, total, bucket))
    return end


def plan_ranges(
    start: Mapping[Bucket, int],
    end: Mapping[Bucket, int],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[KafkaRange]:
    """Cut the batch ``[start, end)`` into ranges, as Spark's
    ``KafkaOffsetRangeCalculator.getRanges`` does.

    Buckets with nothing to read get no range. Ranges larger than
    ``max_records_per_partition`` are cut into ``ceil(size / max)`` pieces. If fewer ranges
    than ``min_partitions`` remain, only the large ones are cut further (SPARK-36576): a
    range whose share ``size / total * minPartitions`` rounds to one stays whole, and the
    others split ``minPartitions - unsplit`` in proportion to their size.
    """
    ranges = [KafkaRange.of(b, start[b], end[b]) for b in sorted(end) if b in start and end[b] > start[b]]
    if max_records_per_partition is not None:
        ranges = [piece for r in ranges for piece in _cut(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    unsplit = {r.bucket for r in ranges if _part_count(r.size, total, min_partitions) == 1}
    unsplit_total = sum(r.size for r in ranges if r.bucket in unsplit)
    split_total = total - unsplit_total
    split_min = max(min_partitions - len([r for r in ranges if r.bucket in unsplit]), 1)
    return [
        piece
        for r in ranges
        for piece in _cut(r, 1 if r.bucket in unsplit else _part_count(r.size, split_total, split_min))
    ]


def _part_count(size: int, total: int, parts: int) -> int:
    # Scala's math.round rounds half up; Python's round() rounds half to even.
    return max(math.floor(size / total * parts + 0.5), 1)


def _cut(offset_range: KafkaRange, parts: int) -> list[KafkaRange]:
    """``offset_range`` in ``parts`` contiguous pieces; the last takes the rounding (Spark's
    ``getDividedPartition``). Empty pieces are dropped; each piece keeps the range's
    boundary and trace context."""
    pieces = []
    remaining = offset_range.size
    position = offset_range.start
    for index in range(parts):
        size = remaining // (parts - index)
        remaining -= size
        end = min(position + size, offset_range.end)
        if end > position:
            pieces.append(replace(offset_range, start=position, end=end))
        position = end
    return pieces


#: Small ranges share a task up to this many records. A Python task costs tens of
#: milliseconds of fixed work (about what reading 40,000 records costs), so a batch of small
#: ranges over many partitions becomes a few tasks, while large ranges keep a task each
#: (benchmarks/latency.py measured both).
TASK_RECORDS = 40_000


def pack_tasks(ranges: list[KafkaRange], *, task_records: int = TASK_RECORDS, min_tasks: int = 1) -> list[list[KafkaRange]]:
    """Group ``ranges`` into tasks: a range of ``task_records`` or more is a task of its
    own; smaller ones share tasks of at most ``task_records`` records, never two ranges of
    one bucket in a task. At least ``min_tasks`` tasks when there are that many ranges
    (``minPartitions``). Deterministic: a replayed batch gets the same tasks.

    Each range, largest first, goes to the task with the fewest records (the first such)
    it fits in and shares no bucket with, else starts one; then the task with the most
    ranges (most records, first) is halved until there are ``min_tasks``. Both choices are
    taken from heaps, so a batch over ten thousand partitions is packed in O(n log n), not
    by scanning every task for every range."""
    ordered = sorted(ranges, key=lambda r: (-r.size, r.bucket, r.start))
    tasks: list[list[KafkaRange]] = []
    totals: list[int] = []
    buckets: list[set[Bucket]] = []
    fewest: list[tuple[int, int]] = []  # (records, task): a task's entry is stale once its records change
    for r in ordered:
        bucket = r.bucket
        chosen = None
        if r.size < task_records:
            shared: list[tuple[int, int]] = []  # tasks already reading this bucket, put back afterwards
            while fewest:
                total, i = fewest[0]
                if total != totals[i]:
                    heapq.heappop(fewest)
                elif bucket in buckets[i]:
                    shared.append(heapq.heappop(fewest))
                else:
                    # The fewest records of the tasks without this bucket: if it does not fit, none does.
                    chosen = i if total + r.size <= task_records else None
                    break
            for entry in shared:
                heapq.heappush(fewest, entry)
        if chosen is None:
            tasks.append([r])
            totals.append(r.size)
            buckets.append({bucket})
            heapq.heappush(fewest, (r.size, len(tasks) - 1))
        else:
            tasks[chosen].append(r)
            totals[chosen] += r.size
            buckets[chosen].add(bucket)
            heapq.heappush(fewest, (totals[chosen], chosen))
    wanted = min(min_tasks, len(ranges))
    if len(tasks) < wanted:
        widest = [(-len(task), -total, i) for i, (task, total) in enumerate(zip(tasks, totals))]
        heapq.heapify(widest)
        while len(tasks) < wanted:
            _, _, i = heapq.heappop(widest)
            half = len(tasks[i]) // 2
            moved = tasks[i][half:]
            tasks[i] = tasks[i][:half]
            totals[i] -= sum(r.size for r in moved)
            tasks.append(moved)
            totals.append(sum(r.size for r in moved))
            for j in (i, len(tasks) - 1):
                heapq.heappush(widest, (-len(tasks[j]), -totals[j], j))
    return [sorted(task, key=lambda r: (r.bucket, r.start)) for task in tasks]
