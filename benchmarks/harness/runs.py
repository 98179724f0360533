"""Running a measured query: the rotated order of configurations in a round, a
``Trigger.AvailableNow`` drain of a topic and its figures, and waiting for a condition."""

from __future__ import annotations

import json
import tempfile
import time
from typing import Any

from benchmarks.harness.progress import ProgressLog, commit_time_reaching, first_trigger_at


def rotated(names: list[str], round_index: int) -> list[str]:
    """The configurations in the order of round ``round_index``: each round starts one
    further along, so no configuration always runs first after the warm-up or after the
    previous scenario. With a fixed order, the configuration that always ran first had the
    slowest steady drain in both runs, and an order effect could not be told from its own."""
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


def backlog_stream(spark, bootstrap: str, topic: str, **options: str):
    """``format("backlog")`` reading ``topic`` from earliest, with extra source ``options``."""
    return (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").options(**options).load())


def run_available_now(df) -> tuple[float, float, Any]:
    """Run ``df`` with ``Trigger.AvailableNow`` into ``noop`` on a fresh checkpoint until it
    ends. Returns (wall-clock time of ``start()``, seconds from ``start()`` to termination,
    the query). Raises RuntimeError with the query's error if it failed."""
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.time()
        query = df.writeStream.format("noop").trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
        query.awaitTermination()
        seconds = time.time() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return started, seconds, query


def first_trigger_and_total_s(df) -> tuple[float, float]:
    """Run ``df`` with ``Trigger.AvailableNow`` into ``noop``: seconds from ``start()`` to its
    first trigger, and to its end."""
    started, total, query = run_available_now(df)
    return first_trigger_at(query.recentProgress) - started, total


def drain_figures(started: float, wall: float, query, expected: int, reader: str) -> dict:
    """The figures of a drain that :func:`run_available_now` returned (``started``, ``wall``,
    ``query``): records, seconds and records/s, batches, the same from the first trigger, and
    the seconds in ``addBatch``. Raises RuntimeError unless exactly ``expected`` records
    arrived (``reader`` names who read them in the message)."""
    progress = [json.loads(p.json) for p in query.recentProgress]
    records = sum(p["numInputRows"] for p in progress)
    if records != expected:
        raise RuntimeError(f"{reader} read {records} records, expected {expected}")
    from_first_trigger = wall - (first_trigger_at(progress) - started)
    return {"records": records, "seconds": wall, "records_per_s": records / wall, "batches": len(progress),
            "from_first_trigger_s": from_first_trigger, "records_per_s_from_first_trigger": records / from_first_trigger,
            "add_batch_s": sum(p["durationMs"].get("addBatch", 0) for p in progress) / 1000}


def run_source(spark, bootstrap: str, topic: str, expected: int, **options: str) -> dict:
    """Drain ``topic`` from earliest with ``Trigger.AvailableNow`` into ``noop``; ``options``
    are extra source options. Raises RuntimeError unless exactly ``expected`` records arrive."""
    started, wall, query = run_available_now(backlog_stream(spark, bootstrap, topic, **options))
    figures = drain_figures(started, wall, query, expected, "the source")
    return {**figures, "records_per_s_in_add_batch": figures["records"] / figures["add_batch_s"]}


def wait_until(condition, timeout_s: float, what: str) -> None:
    """Poll ``condition`` every 0.1 s; raise TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.time() + timeout_s
    while not condition():
        if time.time() > deadline:
            raise TimeoutError(f"{what} within {timeout_s:.0f} s")
        time.sleep(0.1)


def wait_for_commit(log: ProgressLog, query_id: str, topic: str, ends: dict[int, int], timeout_s: float,
                    what: str) -> None:
    """Wait until a batch of query ``query_id`` that reaches ``ends`` (partition -> offset) of
    ``topic`` has committed (:func:`commit_time_reaching` over ``log``); raise TimeoutError
    naming ``what`` after ``timeout_s``."""
    wait_until(lambda: commit_time_reaching(log.of(query_id), topic, ends) is not None, timeout_s, what)
