"""End-to-end latency of each record, from a query's progress events and what a live
producer delivered.

End-to-end latency of a record = the end of the batch that read it (its progress event's
trigger start + ``durationMs.triggerExecution``: the batch committed) - the record's Kafka
timestamp: on the live topics (:func:`benchmarks.harness.traffic.create_live_topic`) the
broker's append time, when a consumer could first read it, so the producer's own queueing is
left out. Both clocks are this machine's.
"""

from __future__ import annotations

from bisect import bisect_right

from benchmarks.harness.progress import batch_ends
from benchmarks.harness.stats import percentile


def record_latencies(topic: str, progress: list[dict], delivered: list[tuple[int, int, int]]) -> list[float]:
    """End-to-end latency of every delivered record, in seconds (see the module docstring):
    the first batch whose end position of the record's partition is past its offset read it."""
    return [latency for _, latency in timed_latencies(topic, progress, delivered)]


def timed_latencies(topic: str, progress: list[dict], delivered: list[tuple[int, int, int]]) -> list[tuple[float, float]]:
    """``(produced at, latency)`` in seconds for every delivered record that a batch read."""
    batches = batch_ends(progress)
    by_partition: dict[int, tuple[list[int], list[float]]] = {}
    for b in batches:
        for (t, partition), end in b["positions"].items():
            if t == topic:
                ends, times = by_partition.setdefault(partition, ([], []))
                if not ends or end > ends[-1]:
                    ends.append(end)
                    times.append(b["committed"])
    latencies = []
    for partition, offset, ts_ms in delivered:
        ends, times = by_partition.get(partition, ([], []))
        index = bisect_right(ends, offset)
        if index < len(ends):
            latencies.append((ts_ms / 1000, times[index] - ts_ms / 1000))
    return latencies


def windows(timed: list[tuple[float, float]], width_s: float) -> list[dict]:
    """p50/p99 of ``(at, value)`` pairs per window of ``width_s`` seconds from the first."""
    if not timed:
        return []
    first = min(at for at, _ in timed)
    buckets: dict[int, list[float]] = {}
    for at, value in timed:
        buckets.setdefault(int((at - first) // width_s), []).append(value)
    return [{"from_s": index * width_s, "count": len(values), "p50": percentile(values, 0.5),
             "p99": percentile(values, 0.99)} for index, values in sorted(buckets.items())]
