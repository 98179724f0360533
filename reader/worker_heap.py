"""Keep PySpark's per-task garbage collection off the objects every task shares.

Which process: a Python worker on an executor, called at the start of each ``read()``.

PySpark's daemon runs a full ``gc.collect()`` in a reused Python worker after every task
(``pyspark/daemon.py``). A worker that has imported PySpark, pyarrow, NumPy, confluent-kafka
and this package holds ~60,000 container objects (modules, classes, functions) that never
become garbage, and each of those collections walks them all, once per task of every small
live batch (figures: ``benchmarks/read_throughput.py --profile``, benchmarks/README.md). ``gc.freeze()`` moves the objects that
exist at the worker's first read into the permanent generation, which collections skip;
objects created later are collected as before. Reference counting still frees frozen
objects that are not in cycles; what the first task's cycles hold stays until the worker
exits (Spark ends idle workers after a minute).
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_once() -> None:
    """Freeze the objects that exist now, the first time this process reads; then nothing."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
