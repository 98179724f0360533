"""Reader-side deduplication: at most one event per (source, bucket, boundary) per process.

Which process: a Python worker on an executor. Spark reuses workers across tasks, so a
bucket whose boundary is crossed again (a retried task, a replayed batch) in the same
worker does not publish again. Across workers and retries the enumerator deduplicates:
an event for a bucket that is no longer pending is ignored.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_published: set[tuple[str, str, int, int]] = set()
_LIMIT = 100_000  # bound the memory of a long-lived worker


def first_time(source_id: str, topic: str, partition: int, boundary: int) -> bool:
    """True the first time this process sees the key; False afterwards."""
    key = (source_id, topic, partition, boundary)
    with _lock:
        if key in _published:
            return False
        if len(_published) >= _LIMIT:
            _published.clear()  # forgetting only risks a duplicate, which the enumerator ignores
        _published.add(key)
        return True


def forget(source_id: str, topic: str, partition: int, boundary: int) -> None:
    """Undo :func:`first_time` after a failed publish, so a later attempt may publish."""
    with _lock:
        _published.discard((source_id, topic, partition, boundary))
