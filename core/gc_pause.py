"""Python's cyclic garbage collector held off while the driver plans a batch.

Which process: the driver's planner runner (``latestOffset``). A plan over thousands of
partitions makes tens of thousands of short-lived Python objects: confluent-kafka builds a
Python object for every partition and replica a DescribeTopicPartitions answer names, a future
and a ``TopicPartition`` for every partition a ListOffsets asks about. Each 700 allocations
start a collection, and the older generations' collections walk every object the runner
holds; at 10,000 partitions that was a quarter of the requests' time (describing the topics
157 -> 119 ms, ListOffsets 100 -> 77 ms, listing the cluster's topics 42 -> 23 ms;
benchmarks/partitions_scale.py). Reference counting frees the plan's objects as it goes
either way; only cycles wait, and the collector runs again as soon as the plan ends.

:func:`paused` nests and may be entered from several threads at once: the collector is
switched back on when the last block ends, and only if it was on when the first began (an
application that switched it off keeps it off).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
#: Blocks inside :func:`paused` now, and whether the collector was on when the first began.
_depth = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """Hold off automatic collections for the block (see the module docstring)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
