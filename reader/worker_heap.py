"""Prepare a Python worker's heap for reading, once per process.

Which process: a Python worker on an executor, called at the start of each ``read()``.
Both steps change process-wide settings of the worker (never of the driver, which does not
read); Spark ends a worker after a minute idle, and the settings end with it.

**The garbage collector.** PySpark's daemon runs a full ``gc.collect()`` in a reused Python
worker after every task (``pyspark/daemon.py``). A worker that has imported PySpark, pyarrow,
NumPy, confluent-kafka and this package holds ~60,000 container objects (modules, classes,
functions) that never become garbage, and each of those collections walks them all, once per
task of every small live batch (``benchmarks/read_throughput.py --profile`` shows it).
``gc.freeze()`` moves the objects that exist at the worker's first
read into the permanent generation, which collections skip; objects created later are
collected as before. Reference counting still frees frozen objects that are not in cycles;
what the first task's cycles hold stays until the worker exits. A module imported after the
freeze is walked by every collection: pyarrow imports pandas (~35,000 objects) at a
process's first ``pa.array``, and every task of the worker would walk them, so the read
path builds its columns without it
(``reader/arrow.py``) and imports nothing on its first batch (``tests/unit/reader/test_worker_heap.py``).
The one exception: a split of several topics imports ``pyarrow.compute`` (a few thousand
objects) to count bytes per topic.

**glibc's malloc thresholds.** A read allocates and frees its data in waves: librdkafka's
fetch buffers, one Python ``bytes`` per key and value, each batch of ``ARROW_BATCH_BYTES``.
With glibc's start-up thresholds (trim the heap once 128 KiB at its top are free, adapting
upwards only as mmapped blocks are freed), each wave was handed back to the kernel and
faulted in again, page by page: one page fault per 4 KiB read
(``benchmarks/worker_heap.py`` measures it). The thresholds are pinned
where glibc's own adaptive rule ends (blocks up to 32 MiB from the heap, trim past 64 MiB
free, per arena), so a worker keeps at most that much freed memory per arena for its next
read instead of faulting it in again. Not done when the worker's environment sets glibc's
own ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` (the user chose), nor off glibc.
"""

from __future__ import annotations

import ctypes
import gc
import os

#: glibc's ``mallopt`` parameters (malloc.h) and the values pinned: ``DEFAULT_MMAP_THRESHOLD_MAX``
#: on 64-bit, and twice it for trimming, as glibc's dynamic rule sets them.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

_prepared = False


def prepare_once() -> None:
    """Freeze the objects that exist now and pin malloc's thresholds, the first time this
    process reads; then nothing. Never raises for want of glibc: the read goes on untuned."""
    global _prepared
    if not _prepared:
        _prepared = True
        gc.freeze()
        pin_malloc_thresholds()


def pin_malloc_thresholds(environ=os.environ) -> bool:
    """Pin glibc's mmap and trim thresholds (see the module docstring). Returns whether they
    were set: False off glibc or when ``environ`` names glibc's own settings."""
    if any(name in environ for name in _USER_SETTINGS) or not _glibc():
        return False
    libc = ctypes.CDLL(None)
    # mallopt returns 1 on success; both or the reader's heap is as glibc left it.
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):  # not a glibc system (musl, macOS, Windows)
        return False
