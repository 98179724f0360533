"""Per-step timings, the one seam for benchmark instrumentation: a no-op unless switched on.

Which process: any that plans or reads (Spark's Python workers, the driver's runner). A
benchmark calls :func:`switch_on` before it starts Spark: that sets
``BACKLOG_SOURCE_STEP_TIMINGS`` to a directory, which the Python processes Spark starts
inherit (local mode; on a cluster, set it in ``spark.executorEnv.*``). A process reads the
variable once, when it imports this module, and then appends one JSON line per step to
``<dir>/<pid>.jsonl``: ``{"step": "driver.latest_offsets", "ms": 1.9, "at": 1763800000.1}``.

Off (the default), :func:`step` hands back one shared do-nothing context and :func:`record`
returns at once: no clock, no environment lookup, no file. A diagnostic, not an interface:
step names may change.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

VARIABLE = "BACKLOG_SOURCE_STEP_TIMINGS"

_OFF: AbstractContextManager[None] = nullcontext()
#: Where this process writes its timings; None while timings are off.
_directory: str | None = os.environ.get(VARIABLE) or None


def enabled() -> bool:
    """Whether this process records timings (for a step a ``with`` block cannot frame)."""
    return _directory is not None


def step(name: str) -> AbstractContextManager[None]:
    """Time the block as ``name`` when timings are on; off, the shared no-op context."""
    if _directory is None:
        return _OFF
    return _timed(name, _directory)


def record(name: str, ms: float) -> None:
    """Record a step timed by the caller (``ms`` milliseconds) when timings are on."""
    if _directory is not None:
        _append(_directory, name, ms)


def switch_on(directory: str) -> None:
    """Turn timings on in this process and, through the environment, in every process it
    starts from now on."""
    global _directory
    os.environ[VARIABLE] = directory
    _directory = directory


def switch_off() -> None:
    """Turn timings off in this process and in the processes it starts from now on."""
    global _directory
    os.environ.pop(VARIABLE, None)
    _directory = None


@contextmanager
def _timed(name: str, directory: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        _append(directory, name, (time.perf_counter() - started) * 1000)


def _append(directory: str, name: str, ms: float) -> None:
    with open(os.path.join(directory, f"{os.getpid()}.jsonl"), "a") as out:
        out.write(json.dumps({"step": name, "ms": round(ms, 3), "at": time.time()}) + "\n")
