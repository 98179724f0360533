"""Python's cyclic garbage collector held off while the driver plans a batch.

Which process: the driver's planner runner (``latestOffset``, ``partitions``). A plan over thousands of
partitions makes tens of thousands of short-lived Python objects: confluent-kafka builds a
Python object for every partition and replica a DescribeTopicPartitions answer names, and a
``TopicPartition`` for every partition a ListOffsets asks about. Each 700 allocations
start a collection, and the older generations' collections walk every object the runner
holds. At 10,000 partitions under a pattern, Spark's ``latestOffset`` p50 went from 399 to
307 ms with the collector held off (benchmarks/README.md, partitions_scale; its requests table
times each request both ways). Reference counting frees the plan's objects as it goes either
way; only cycles wait, and the collector runs again as soon as the plan ends.

:func:`paused` nests and may be entered from several threads at once: the collector is
switched back on when the last block ends, and only if it was on when the first began (an
application that switched it off before keeps it off; one that switches it off from another
thread while a block runs finds it on again when the block ends: the planner's runner does
neither).
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
