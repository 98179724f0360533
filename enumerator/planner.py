"""Pure planning: how far a batch reads, and how its ranges are cut into input partitions.

No Kafka, no Spark, no clock: every function here is a function of its arguments, which is
what lets ``partitions(start, end)`` be replayed exactly after a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from backlog_source.buckets import Bucket


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The half-open offset range ``[start, end)`` of one bucket."""

    bucket: Bucket
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def lag(start: Mapping[Bucket, int], latest: Mapping[Bucket, int]) -> dict[Bucket, int]:
    """Records available per bucket: ``latest - start``, never negative; buckets of ``start`` only."""
    return {bucket: max(0, latest.get(bucket, position) - position) for bucket, position in start.items()}


def rate_limit(start: Mapping[Bucket, int], latest: Mapping[Bucket, int], max_records: int) -> dict[Bucket, int]:
    """End positions that read at most ``max_records`` in total.

    Every lagging bucket first gets one record, then the rest of the budget is shared in
    proportion to each bucket's remaining lag (largest-remainder rounding, so the total is
    exactly ``min(max_records, total lag)``). So whenever ``max_records`` is at least the
    number of lagging buckets, every one of them advances: a small partition is never
    starved by a big one. With a smaller budget, the buckets with the largest lag go first.
    """
    if max_records <= 0:
        raise ValueError(f"max_records must be positive, got {max_records}")
    available = lag(start, latest)
    total = sum(available.values())
    if total <= max_records:
        return {bucket: start[bucket] + available[bucket] for bucket in start}

    lagging = sorted((b for b in start if available[b] > 0), key=lambda b: (-available[b], b))
    # One record for each lagging bucket first (the largest lags when the budget is smaller
    # than the number of lagging buckets), then the rest in proportion to what remains.
    shares = {bucket: 0 for bucket in start}
    for bucket in lagging[:max_records]:
        shares[bucket] = 1
    budget = max_records - sum(shares.values())
    remaining = {b: available[b] - shares[b] for b in lagging}
    remaining_total = sum(remaining.values())
    if budget > 0 and remaining_total > 0:
        exact = {b: budget * remaining[b] / remaining_total for b in lagging}
        for bucket in lagging:
            shares[bucket] += int(exact[bucket])
        leftover = max_records - sum(shares.values())
        # Largest-remainder rounding: the total is exactly the budget, never more.
        by_fraction = sorted(lagging, key=lambda b: (-(exact[b] - int(exact[b])), -available[b], b))
        for bucket in by_fraction:
            if leftover == 0:
                break
            if shares[bucket] < available[bucket]:
                shares[bucket] += 1
                leftover -= 1
    return {bucket: start[bucket] + shares[bucket] for bucket in start}


def plan_ranges(
    start: Mapping[Bucket, int],
    end: Mapping[Bucket, int],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Cut the batch ``[start, end)`` into balanced ranges, one Spark input partition each.

    Buckets with nothing to read get no range. A bucket present in ``end`` but not in
    ``start`` was discovered in this batch: the enumerator adds it at its earliest offset,
    so it has nothing to read yet. Ranges larger than ``max_records_per_partition`` are cut
    into equal pieces; if fewer than ``min_partitions`` ranges remain, the larger ranges are
    cut further in proportion to their size (Spark's ``KafkaOffsetRangeCalculator``).
    """
    ranges = [
        OffsetRange(bucket, start[bucket], end[bucket])
        for bucket in sorted(end)
        if bucket in start and end[bucket] > start[bucket]
    ]
    if max_records_per_partition is not None:
        ranges = [
            piece
            for offset_range in ranges
            for piece in _cut(offset_range, -(-offset_range.size // max_records_per_partition))
        ]
    if min_partitions is not None and 0 < len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        ranges = [
            piece
            for offset_range in ranges
            for piece in _cut(offset_range, max(1, round(offset_range.size / total * min_partitions)))
        ]
    return ranges


def _cut(offset_range: OffsetRange, parts: int) -> list[OffsetRange]:
    """``offset_range`` in ``parts`` contiguous pieces whose sizes differ by at most one."""
    parts = max(1, min(parts, offset_range.size))
    pieces = []
    position = offset_range.start
    remaining = offset_range.size
    for index in range(parts):
        size = remaining // (parts - index)
        pieces.append(OffsetRange(offset_range.bucket, position, position + size))
        position += size
        remaining -= size
    return pieces
