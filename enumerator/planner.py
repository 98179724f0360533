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

    The budget is shared in proportion to each bucket's lag (largest-remainder rounding, so
    the total never exceeds the budget). Buckets whose share rounds down to zero get the
    leftover records first, so whenever ``max_records`` is at least the number of lagging
    buckets, every lagging bucket advances: a small partition is never starved by a big one.
    """
    if max_records <= 0:
        raise ValueError(f"max_records must be positive, got {max_records}")
    available = lag(start, latest)
    total = sum(available.values())
    if total <= max_records:
        return {bucket: start[bucket] + available[bucket] for bucket in start}

    shares = {bucket: 0 for bucket in start}
    remainders: list[tuple[bool, float, int, Bucket]] = []
    for bucket, records in available.items():
        if records == 0:
            continue
        exact = max_records * records / total
        shares[bucket] = int(exact)
        # Sort key: buckets with no whole share first, then the largest fraction, then the
        # largest lag, then a stable order by bucket.
        remainders.append((shares[bucket] > 0, -(exact - int(exact)), -records, bucket))
    leftover = max_records - sum(shares.values())
    for _, _, _, bucket in sorted(remainders):
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
