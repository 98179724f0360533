"""Per-step timings of the source, for benchmarks: off unless asked for.

Set ``BACKLOG_SOURCE_STEP_TIMINGS`` to a directory (in the environment of Spark's Python
workers: ``spark.executorEnv.*``, or the shell in local mode) and each process that plans or
reads appends one JSON line per step to ``<dir>/<pid>.jsonl``:
``{"step": "driver.latest_offsets", "ms": 1.9, "at": 1763800000.1}``. Unset, a step costs
one dictionary lookup. A diagnostic, not an interface: step names may change.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

VARIABLE = "BACKLOG_SOURCE_STEP_TIMINGS"


@contextmanager
def step(name: str) -> Iterator[None]:
    """Time the block as ``name`` when timings are on."""
    directory = os.environ.get(VARIABLE)
    if not directory:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        record(name, (time.perf_counter() - started) * 1000, directory)


def record(name: str, ms: float, directory: str | None = None) -> None:
    directory = directory or os.environ.get(VARIABLE)
    if not directory:
        return
    with open(os.path.join(directory, f"{os.getpid()}.jsonl"), "a") as out:
        out.write(json.dumps({"step": name, "ms": round(ms, 3), "at": time.time()}) + "\n")
