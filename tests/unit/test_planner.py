import random

import pytest

from backlog_source.buckets import Bucket
from enumerator.planner import OffsetRange, plan_ranges, rate_limit

A, B, C = Bucket("t", 0), Bucket("t", 1), Bucket("t", 2)


def test_rate_limit_reads_everything_when_under_budget():
    assert rate_limit({A: 0, B: 5}, {A: 10, B: 7}, 100) == {A: 10, B: 7}


def test_rate_limit_shares_in_proportion_to_lag():
    end = rate_limit({A: 0, B: 0}, {A: 9000, B: 1000}, 1000)
    # Within one record of exact proportion (each lagging bucket's first record is reserved).
    assert abs(end[A] - 900) <= 1 and abs(end[B] - 100) <= 1
    assert end[A] + end[B] == 1000


def test_rate_limit_never_starves_a_small_partition():
    end = rate_limit({A: 0, B: 0, C: 0}, {A: 1_000_000, B: 1_000_000, C: 3}, 10)
    assert end[C] >= 1
    assert sum(end.values()) == 10


def test_rate_limit_randomised_invariants():
    rng = random.Random(7)
    for _ in range(500):
        buckets = [Bucket("t", i) for i in range(rng.randint(1, 8))]
        start = {b: rng.randint(0, 100) for b in buckets}
        latest = {b: start[b] + rng.choice([0, 1, 2, rng.randint(0, 10_000)]) for b in buckets}
        limit = rng.randint(1, 5_000)
        end = rate_limit(start, latest, limit)
        total_lag = sum(latest[b] - start[b] for b in buckets)
        read = sum(end[b] - start[b] for b in buckets)
        assert read == min(limit, total_lag)
        assert all(start[b] <= end[b] <= latest[b] for b in buckets)
        lagging = [b for b in buckets if latest[b] > start[b]]
        if limit >= len(lagging):
            assert all(end[b] > start[b] for b in lagging)


def test_plan_ranges_skips_empty_and_new_buckets():
    ranges = plan_ranges({A: 0, B: 5}, {A: 10, B: 5, C: 3})
    assert ranges == [OffsetRange(A, 0, 10)]


def test_max_records_per_partition_cuts_big_ranges():
    ranges = plan_ranges({A: 0, B: 0}, {A: 25, B: 5}, max_records_per_partition=10)
    assert [(r.bucket, r.start, r.end) for r in ranges] == [(A, 0, 8), (A, 8, 16), (A, 16, 25), (B, 0, 5)]


def test_min_partitions_cuts_in_proportion_to_size():
    ranges = plan_ranges({A: 0, B: 0}, {A: 900, B: 100}, min_partitions=10)
    assert sum(1 for r in ranges if r.bucket == A) == 9
    assert sum(1 for r in ranges if r.bucket == B) == 1
    assert max(r.size for r in ranges) - min(r.size for r in ranges) <= 1


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
