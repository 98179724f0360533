"""The PySpark versions this release runs on, and the refusal of older ones.

Which process: :meth:`BacklogDataSource.name` runs in the user's program when it registers
the source, and :meth:`BacklogDataSource.__init__` in the Python worker of ``load()``, which
imports the PySpark of the Spark that runs the query (under Spark Connect, the server's, which
may differ from the client's). Both call :func:`require_supported_pyspark`, so an older Spark
is refused before any query starts, with a message instead of an ``ImportError`` from the
stream reader's planner.

PySpark 4.0 and 4.1 give a Python streaming source ``initialOffset``, ``latestOffset()``
(no start, no read limit), ``partitions`` and ``commit`` only: no read limits
(``latestOffset(start, limit)``, ``getDefaultReadLimit``, ``pyspark.sql.streaming.datasource``),
no ``prepareForTriggerAvailableNow`` and no ``reportLatestOffset``; all arrived in 4.2.
"""

from __future__ import annotations

import re

import pyspark

from backlog_source.core.errors import SparkVersionError

#: The oldest PySpark (major, minor) this release runs on.
MINIMUM = (4, 2)


def require_supported_pyspark(version: str | None = None) -> None:
    """Raise :class:`SparkVersionError` when ``version`` (default: the ``pyspark`` this process
    imports) is older than :data:`MINIMUM`. A version string that does not start with
    ``major.minor`` (a vendor's build) is not refused: nothing is known of it."""
    version = pyspark.__version__ if version is None else version
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) >= MINIMUM:
        return
    needed = ".".join(map(str, MINIMUM))
    raise SparkVersionError(
        f"format('backlog') needs PySpark {needed} or newer; this Spark's PySpark is {version}. Before {needed} a "
        "Python streaming source gets no read limits (latestOffset(start, limit)), no Trigger.AvailableNow "
        "(prepareForTriggerAvailableNow) and no reportLatestOffset, on which its catch-up budgets, "
        f"maxOffsetsPerTrigger, minOffsetsPerTrigger and AvailableNow runs depend. Run it on Spark {needed} or "
        "newer, or use Spark's format('kafka') on this one"
    )
