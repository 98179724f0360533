"""Spark's progress events of the measured queries, and what they say: when each batch
started and committed, where it ended, how long Spark's steps took."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from benchmarks.harness.stats import fmt, median_and_spread, percentile


def timestamp_s(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def first_trigger_at(progress) -> float:
    """Wall-clock seconds of the earliest trigger among ``progress``: progress dicts, or
    ``StreamingQueryProgress`` objects (``query.recentProgress``)."""
    return min(timestamp_s(p["timestamp"] if isinstance(p, dict) else json.loads(p.json)["timestamp"]) for p in progress)


class ProgressLog:
    """Every progress event of the watched queries, as dicts (``recentProgress`` keeps only
    the last 100). Register once per session with ``spark.streams.addListener``."""

    def __init__(self, on_event: Callable[[dict], None] | None = None, keep: bool = True) -> None:
        """``on_event``: also called with each progress dict, on Spark's listener thread
        (e.g. to append it to a file); ``keep=False``: only that, nothing kept in memory (a
        soak must not grow for its own bookkeeping)."""
        from pyspark.sql.streaming import StreamingQueryListener

        log = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

            def onQueryProgress(self, event):
                progress = json.loads(event.progress.json)
                if keep:
                    with log.lock:
                        log.events.setdefault(str(event.progress.id), []).append(progress)
                if on_event is not None:
                    on_event(progress)

        self.lock = threading.Lock()
        self.events: dict[str, list[dict]] = {}
        self.listener = Listener()

    def of(self, query_id: str) -> list[dict]:
        with self.lock:
            return list(self.events.get(str(query_id), []))


def offset_of(value: Any) -> dict:
    """A progress event's offset: JSON text (``lastProgress``) or already a dict (``.json``)."""
    return json.loads(value) if isinstance(value, str) else (value or {})


def committed_at(progress: dict) -> float:
    """When the batch of a progress event committed (wall-clock s): its trigger's start
    plus the trigger's duration."""
    return timestamp_s(progress["timestamp"]) + progress["durationMs"]["triggerExecution"] / 1000


def batch_ends(progress: list[dict]) -> list[dict]:
    """Per batch with data: its end positions and when it committed."""
    batches = []
    for p in progress:
        if not p["numInputRows"]:
            continue
        end = offset_of(p["sources"][0]["endOffset"])
        positions = end.get("positions", end)
        batches.append({
            "batch_id": p["batchId"],
            "committed": committed_at(p),
            "positions": {(topic, int(part)): o for topic, parts in positions.items() for part, o in parts.items()},
        })
    return sorted(batches, key=lambda b: b["batch_id"])


def commit_time_reaching(progress: list[dict], topic: str, ends: dict[int, int]) -> float | None:
    """When the first batch whose end positions reach ``ends`` committed (wall-clock s)."""
    for batch in batch_ends(progress):
        if all(batch["positions"].get((topic, p), -1) >= end for p, end in ends.items()):
            return batch["committed"]
    return None


def drain_batches(progress: list[dict], drained_at: float) -> dict[str, int]:
    """How many batches with data committed by ``drained_at`` (``batches_to_drain``) and
    after it (``batches_after``)."""
    committed = [b["committed"] for b in batch_ends(progress)]
    return {"batches_to_drain": sum(1 for at in committed if at <= drained_at),
            "batches_after": sum(1 for at in committed if at > drained_at)}


#: Spark's steps of a micro-batch, in the order it runs them (``durationMs`` of a progress event).
BATCH_STEPS = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets", "triggerExecution")


def step_medians(progress: list[dict]) -> dict[str, float | None]:
    """The median milliseconds of each of Spark's steps over ``progress``: where a batch's time
    goes, and so whose cost it is (the source's: ``latestOffset``, part of ``queryPlanning``
    and ``addBatch``; Spark's: the two commits)."""
    return {step: percentile([p["durationMs"][step] for p in progress if step in p["durationMs"]], 0.50)
            for step in BATCH_STEPS}


def step_table(runs: dict[str, list[dict]], key: str) -> list[str]:
    """Markdown rows: per configuration, the median over rounds of each step in ``run[key]``."""
    lines = ["| configuration | " + " | ".join(BATCH_STEPS) + " |", "| --- |" + " ---: |" * len(BATCH_STEPS)]
    for config, rs in runs.items():
        medians = [median_and_spread([r[key][step] for r in rs if r.get(key) and r[key].get(step) is not None])["median"]
                   for step in BATCH_STEPS]
        lines.append(f"| {config} | " + " | ".join(fmt(m, ".0f") for m in medians) + " |")
    return lines
