"""The heap of the Spark driver a source's planner runs under, and the catch-up byte budget a
user who sets none gets from it.

Which process: the driver's Python planner (PySpark's streaming source runner, a child of the
driver JVM; on Spark Connect, of the server's JVM). It reads its ancestors in ``/proc`` and
takes the maximum heap of the nearest ``java`` one: the last ``-Xmx`` (or
``-XX:MaxHeapSize=``) on its command line, which is how ``spark-submit`` passes
``spark.driver.memory``; a JVM started without either gets the JVM's own default, a quarter
of the machine's memory. Where no JVM ancestor is found (no ``/proc``, an unusual launcher),
Spark's default driver (1 GiB) is assumed: the safe side.

Why the driver's heap: a catch-up batch that a collect-style sink (``foreachBatch`` calling
``toArrow()``, ``toPandas()`` or ``collect()``) brings to the driver is held there several
times over while it is converted (the task results, their Arrow or row form); the batch that
fits a 1 GiB driver is a fraction of what a 4 GiB one holds. ``local[*]``, where the driver
is the executor too, holds the read on top.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

#: Spark's default ``spark.driver.memory``.
SPARK_DEFAULT_DRIVER_HEAP = 1 << 30
#: A default catch-up batch is this share of the driver's heap (1/8: 128 MiB for Spark's
#: default driver): about half the largest batch a collect-style sink was seen to hold in a
#: driver's heap, a 2x margin (benchmarks/README.md, "driver_heap").
HEAP_SHARE = 8
#: The default never goes above this (the figure that keeps a batch's fixed cost a small share
#: of its time; larger batches drain no faster) nor below the floor (a batch must hold at
#: least a few of the largest records Kafka accepts by default, 1 MB).
DEFAULT_MAX_BYTES_CEILING = 256 << 20
DEFAULT_MAX_BYTES_FLOOR = 16 << 20
#: How far up the process tree to look for the JVM (runner -> JVM; worker -> daemon -> JVM).
MAX_ANCESTORS = 6

_SIZE = re.compile(r"^(\d+)([kKmMgGtT]?)$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def default_catch_up_bytes(heap_bytes: int | None) -> int:
    """``backlog.maxBytesPerTrigger`` for a user who sets none: :data:`HEAP_SHARE` of
    ``heap_bytes`` (the driver's maximum heap; None: Spark's default 1 GiB), between
    :data:`DEFAULT_MAX_BYTES_FLOOR` and :data:`DEFAULT_MAX_BYTES_CEILING`."""
    heap = heap_bytes if heap_bytes is not None else SPARK_DEFAULT_DRIVER_HEAP
    return max(DEFAULT_MAX_BYTES_FLOOR, min(DEFAULT_MAX_BYTES_CEILING, heap // HEAP_SHARE))


def max_heap_of(args: list[str], physical_memory: int | None) -> int | None:
    """The maximum heap a JVM started with ``args`` gets: the last ``-Xmx`` or
    ``-XX:MaxHeapSize=`` (the JVM takes the last), else a quarter of ``physical_memory`` (the
    JVM's default), else None. A value the JVM would refuse counts as not given."""
    heap = None
    for arg in args:
        text = arg[4:] if arg.startswith("-Xmx") else arg[16:] if arg.startswith("-XX:MaxHeapSize=") else None
        if text is not None:
            match = _SIZE.match(text)
            if match:
                heap = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if heap is not None:
        return heap
    return physical_memory // 4 if physical_memory else None


def jvm_max_heap(pid: int | None = None, proc: Path = Path("/proc")) -> int | None:
    """The maximum heap of the nearest ``java`` process among ``pid``'s ancestors (``pid``
    itself excluded; default: this process), or None when none is found within
    :data:`MAX_ANCESTORS` or ``/proc`` cannot be read. Never raises."""
    try:
        current = os.getpid() if pid is None else pid
        for _ in range(MAX_ANCESTORS):
            current = _parent(proc, current)
            if current is None or current <= 1:
                return None
            args = [a.decode(errors="replace") for a in (proc / str(current) / "cmdline").read_bytes().split(b"\0") if a]
            if args and Path(args[0]).name == "java":
                return max_heap_of(args, _physical_memory(proc))
    except (OSError, ValueError, IndexError):
        return None
    return None


@functools.cache
def driver_heap_bytes() -> int | None:
    """:func:`jvm_max_heap` of this process, read once (a process's ancestors do not change)."""
    return jvm_max_heap()


def _parent(proc: Path, pid: int) -> int | None:
    stat = (proc / str(pid) / "stat").read_text()
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
    return int(stat.rsplit(")", 1)[1].split()[1])


def _physical_memory(proc: Path) -> int | None:
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
