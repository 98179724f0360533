"""Planning arithmetic, checked against hand-worked examples of Spark's own formulas."""

import json
import random

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

from backlog_source.core.buckets import Bucket
from backlog_source.split.kafka_split import KafkaRange
from backlog_source.core.settings import parse_options
from backlog_source.split.planning import ReadBudget, byte_limit, pack_tasks, plan_ranges, rate_limit

A, B, C = Bucket("t", 0), Bucket("t", 1), Bucket("t", 2)


def test_rate_limit_reads_everything_when_under_budget():
    assert rate_limit({A: 0, B: 5}, {A: 10, B: 7}, 100) == {A: 10, B: 7}


def test_rate_limit_is_sparks_proportional_floor():
    """KafkaMicroBatchStream.rateLimit: floor(limit * lag / totalLag) per partition, so
    three equal lags under a limit of 20 read 6 each: 18 records, not 20."""
    assert rate_limit({A: 0, B: 0, C: 0}, {A: 10, B: 10, C: 10}, 20) == {A: 6, B: 6, C: 6}
    end = rate_limit({A: 0, B: 0}, {A: 9000, B: 1000}, 1000)
    assert end == {A: 900, B: 100}


def test_rate_limit_never_starves_a_small_partition():
    """Spark rounds a share below one record up to one ("don't completely starve small
    topicpartitions"): 1,000,000 / 1,000,000 / 3 under a limit of 10 read 4, 4 and 1."""
    assert rate_limit({A: 0, B: 0, C: 0}, {A: 1_000_000, B: 1_000_000, C: 3}, 10) == {A: 4, B: 4, C: 1}
    # Even a limit smaller than the number of lagging partitions moves each of them.
    assert rate_limit({A: 0, B: 0, C: 0}, {A: 50, B: 50, C: 50}, 2) == {A: 1, B: 1, C: 1}


def test_rate_limit_randomised_invariants():
    rng = random.Random(7)
    for _ in range(500):
        buckets = [Bucket("t", i) for i in range(rng.randint(1, 8))]
        start = {b: rng.randint(0, 100) for b in buckets}
        latest = {b: start[b] + rng.choice([0, 1, 2, rng.randint(0, 10_000)]) for b in buckets}
        limit = rng.randint(1, 5_000)
        end = rate_limit(start, latest, limit)
        lagging = [b for b in buckets if latest[b] > start[b]]
        read = sum(end[b] - start[b] for b in buckets)
        assert all(start[b] <= end[b] <= latest[b] for b in buckets)
        assert all(end[b] > start[b] for b in lagging)  # nobody starves
        total_lag = sum(latest[b] - start[b] for b in buckets)
        if total_lag <= limit:
            assert read == total_lag
        else:  # floors lose less than one record each; the minimum of one adds at most one each
            assert limit - len(lagging) <= read <= limit + len(lagging)


def test_plan_ranges_skips_empty_and_unknown_buckets():
    ranges = plan_ranges({A: 0, B: 5}, {A: 10, B: 5, C: 3})
    assert ranges == [KafkaRange.of(A, 0, 10)]


def test_max_records_per_partition_cuts_big_ranges_like_spark():
    """getDividedPartition: ceil(25 / 10) = 3 pieces; integer division gives 8, 8, 9."""
    ranges = plan_ranges({A: 0, B: 0}, {A: 25, B: 5}, max_records_per_partition=10)
    assert [(r.bucket, r.start, r.end) for r in ranges] == [(A, 0, 8), (A, 8, 16), (A, 16, 25), (B, 0, 5)]


def test_min_partitions_leaves_small_ranges_whole_and_splits_large_ones():
    """SPARK-36576 (KafkaOffsetRangeCalculator.getRanges): sizes 1, 1 and 10,000 with
    minPartitions=6 give the two small ranges whole and four ranges of 2,500."""
    ranges = plan_ranges({A: 0, B: 0, C: 0}, {A: 1, B: 1, C: 10_000}, min_partitions=6)
    assert [(r.bucket, r.size) for r in ranges] == [(A, 1), (B, 1), (C, 2500), (C, 2500), (C, 2500), (C, 2500)]


def test_min_partitions_rounds_half_up_like_scala():
    # 10 / 20 * 3 = 1.5 rounds to 2 in Scala (Python's round() would give 2 too, but 2.5 -> 2).
    ranges = plan_ranges({A: 0, B: 0}, {A: 10, B: 10}, min_partitions=5)  # 2.5 each: Scala rounds to 3
    assert sum(1 for r in ranges if r.bucket == A) == 3 and sum(1 for r in ranges if r.bucket == B) == 3


@pytest.mark.parametrize("seed", range(20))
def test_ranges_cover_the_batch_exactly_once(seed):
    rng = random.Random(seed)
    buckets = [Bucket("t", i) for i in range(rng.randint(1, 6))]
    start = {b: rng.randint(0, 50) for b in buckets}
    end = {b: start[b] + rng.randint(0, 1000) for b in buckets}
    ranges = plan_ranges(
        start, end, min_partitions=rng.choice([None, 1, 7, 40]), max_records_per_partition=rng.choice([None, 1, 33, 500])
    )
    for bucket in buckets:
        pieces = sorted((r.start, r.end) for r in ranges if r.bucket == bucket)
        covered = [o for s, e in pieces for o in range(s, e)]
        assert covered == list(range(start[bucket], end[bucket]))


# -- packing ranges into tasks -----------------------------------------------------------


def _pack_by_scanning(ranges, task_records, min_tasks):
    """pack_tasks's rule written the obvious way (every task scanned for every range): the
    reference the heap-based packing must agree with, task for task."""
    ordered = sorted(ranges, key=lambda r: (-r.size, r.bucket, r.start))
    tasks, totals = [], []
    for r in ordered:
        fits = [i for i, total in enumerate(totals)
                if r.size < task_records and total + r.size <= task_records and all(o.bucket != r.bucket for o in tasks[i])]
        if fits:
            best = min(fits, key=lambda i: (totals[i], i))
            tasks[best].append(r)
            totals[best] += r.size
        else:
            tasks.append([r])
            totals.append(r.size)
    while len(tasks) < min(min_tasks, len(ranges)):
        widest = max(range(len(tasks)), key=lambda i: (len(tasks[i]), totals[i], -i))
        half = len(tasks[widest]) // 2
        moved = tasks[widest][half:]
        tasks[widest] = tasks[widest][:half]
        totals[widest] -= sum(r.size for r in moved)
        tasks.append(moved)
        totals.append(sum(r.size for r in moved))
    return [sorted(task, key=lambda r: (r.bucket, r.start)) for task in tasks]


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 120), min_size=1, max_size=40),
    partitions=st.integers(1, 12),
    pieces=st.integers(1, 3),
    task_records=st.integers(1, 200),
    min_tasks=st.integers(1, 50),
)
def test_packing_agrees_with_scanning_every_task(sizes, partitions, pieces, task_records, min_tasks):
    # Ranges of one bucket (cut by maxRecordsPerPartition) must land in different tasks.
    ranges = [KafkaRange.of(Bucket(f"t{i % 2}", i % partitions), 1000 * (i // partitions) + p * 200, 1000 * (i // partitions) + p * 200 + size)
              for i, size in enumerate(sizes) for p in range(pieces)]
    assert pack_tasks(ranges, task_records=task_records, min_tasks=min_tasks) == _pack_by_scanning(
        ranges, task_records, min_tasks)


class _CountedRange(KafkaRange):
    """A range that counts how often the packer asks for its bucket."""

    asked = 0

    @property
    def bucket(self):
        _CountedRange.asked += 1
        return Bucket(self.topic, self.partition)


@pytest.mark.parametrize("min_tasks", [1, 10_000])
def test_packing_ten_thousand_small_ranges_looks_at_each_range_a_few_times(min_tasks):
    """A batch of a few records in each of 10,000 partitions fits one task: looking into every
    task for every range took minutes (50 million looks at a range's bucket)."""
    ranges = [_CountedRange("big", p, 0, 3) for p in range(10_000)]
    _CountedRange.asked = 0
    tasks = pack_tasks(ranges, min_tasks=min_tasks)
    assert len(tasks) == min_tasks and sorted(r.partition for task in tasks for r in task) == list(range(10_000))
    assert _CountedRange.asked <= 6 * len(ranges)


# -- the byte budget ----------------------------------------------------------------------

def test_byte_limit_shares_the_bytes_in_proportion_to_each_buckets_lag_in_bytes():
    a, b = Bucket("t", 0), Bucket("t", 1)
    # a: 1,000 offsets of 100 B (100 KB of lag); b: 1,000 offsets of 10 KB (10 MB of lag).
    end = byte_limit({a: 0, b: 0}, {a: 1_000, b: 1_000}, 1_010_000, {a: 100.0, b: 10_000.0}, 100.0)
    assert end == {a: 100, b: 100}  # 1 % of each bucket's bytes: 10 KB and 1 MB


def test_byte_limit_reads_at_least_one_record_per_lagging_bucket_and_never_past_the_end():
    a, b, idle = Bucket("t", 0), Bucket("t", 1), Bucket("t", 2)
    end = byte_limit({a: 5, b: 0, idle: 7}, {a: 6, b: 1_000_000, idle: 7}, 10, {}, 1_000.0)
    assert end == {a: 6, b: 1, idle: 7}


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    lags=st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    sizes=st.lists(st.floats(1.0, 1_048_576.0), min_size=8, max_size=8),
    max_bytes=st.integers(1, 1 << 30),
)
def test_a_batch_never_reads_more_than_the_byte_budget_plus_one_record_per_partition(lags, sizes, max_bytes):
    start = {Bucket("t", p): 100 for p in range(len(lags))}
    latest = {b: 100 + n for b, n in zip(start, lags)}
    per_offset = {b: sizes[i] for i, b in enumerate(start)}
    end = byte_limit(start, latest, max_bytes, per_offset, 1.0)
    read = {b: end[b] - start[b] for b in start}
    assert all(0 <= read[b] <= latest[b] - start[b] for b in start)
    lagging = sum(1 for n in lags if n > 0)
    assert sum(read[b] * per_offset[b] for b in start) <= max_bytes + lagging * max(sizes) + 1e-6


def test_an_unset_byte_budget_is_sized_from_the_drivers_heap_and_a_set_one_is_kept():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}
    unset = parse_options(base)
    assert ReadBudget.from_settings(unset, driver_heap=1 << 30).backlog_max_bytes == 128 << 20
    assert ReadBudget.from_settings(unset, driver_heap=4 << 30).backlog_max_bytes == 256 << 20
    assert ReadBudget.from_settings(unset).backlog_max_bytes == 128 << 20  # unknown heap: Spark's default driver
    chosen = parse_options({**base, "backlog.maxBytesPerTrigger": "1g"})
    assert ReadBudget.from_settings(chosen, driver_heap=1 << 30).backlog_max_bytes == 1 << 30


def handed_back(limit):
    """``limit`` as Spark hands it back to ``latestOffset``: the JSON ``getDefaultReadLimit``
    wrote (PySpark's streaming source runner), rebuilt by PySpark's registry."""
    from dataclasses import asdict

    from pyspark.sql.datasource_internal import ReadLimitRegistry

    return ReadLimitRegistry().get(json.loads(json.dumps(asdict(limit) | {"_type": type(limit).__name__})))


@pytest.mark.parametrize("options, default", [
    ({}, ReadMaxBytes(128 << 20)),
    ({"minOffsetsPerTrigger": "50"}, ReadMinRows(50)),
    ({"maxOffsetsPerTrigger": "100", "backlog.maxOffsetsPerTrigger": "5000"}, ReadMaxRows(5000)),
    ({"backlog.maxOffsetsPerTrigger": "7", "minOffsetsPerTrigger": "5", "backlog.maxBytesPerTrigger": "1m"},
     ReadMaxRows(7)),
])
def test_the_default_limit_handed_back_is_the_budget_the_options_set(options, default):
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", **options})
    limit = ReadBudget.default_limit(settings, driver_heap=1 << 30)
    assert limit == default  # never ReadAllAvailable: the options always set a byte budget
    own = ReadBudget.from_settings(settings, driver_heap=1 << 30)
    assert ReadBudget.from_limit(handed_back(limit), settings, driver_heap=1 << 30) == own


def test_read_all_available_reads_everything_whatever_the_options_say():
    """What Spark passes for Trigger.Once (PySpark's contract: the options are ignored)."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxOffsetsPerTrigger": "10",
                              "minOffsetsPerTrigger": "5", "backlog.maxBytesPerTrigger": "1m"})
    budget = ReadBudget.from_limit(handed_back(ReadAllAvailable()), settings, driver_heap=1 << 30)
    assert budget == ReadBudget() and budget.one_batch_records is None and not budget.bounds_catch_up


def test_the_budget_of_spark_s_limit_sizes_an_unset_byte_budget_from_the_drivers_heap():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"})
    for heap, expected in ((512 << 20, 64 << 20), (1 << 30, 128 << 20), (4 << 30, 256 << 20), (None, 128 << 20)):
        limit = handed_back(ReadBudget.default_limit(settings, heap))
        assert ReadBudget.from_limit(limit, settings, heap).backlog_max_bytes == expected
