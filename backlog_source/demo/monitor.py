"""What the demo's query did, from its progress events (one listener, all runs).

Which process: the user's driver program; callbacks run on Spark's listener thread and
only parse and append. Readers take snapshots under the lock.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql.streaming import StreamingQueryListener

from backlog_source.core.buckets import Bucket, from_nested
from backlog_source.enumerator.state_codec import parse_reported


@dataclass(frozen=True)
class BatchRecord:
    """One committed micro-batch. Times are wall-clock seconds (``time.time()``)."""

    batch_id: int
    run_id: str
    started_at: float  # the batch's trigger time (Spark's progress timestamp)
    ended_at: float  # started_at + trigger execution time
    records: int
    processing_backlog: bool
    positions: dict[Bucket, int]
    latest: dict[Bucket, int]

    @property
    def seconds(self) -> float:
        return self.ended_at - self.started_at

    @property
    def lag(self) -> int:
        return sum(max(0, self.latest.get(b, p) - p) for b, p in self.positions.items())


@dataclass
class BucketDrain:
    """A bucket's first backlog: from its start offset to its boundary."""

    start: int
    boundary: int
    position: int = 0
    finished: bool = False

    @property
    def fraction(self) -> float:
        if self.finished:
            return 1.0
        span = self.boundary - self.start
        return 1.0 if span <= 0 else min(1.0, max(0.0, (self.position - self.start) / span))


@dataclass
class Snapshot:
    batches: list[BatchRecord] = field(default_factory=list)
    drains: dict[Bucket, BucketDrain] = field(default_factory=dict)


def _parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class QueryMonitor(StreamingQueryListener):
    """Collects the batches of one query (by query id, across the runs a mode switch starts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._query_id: str | None = None
        self._state = Snapshot()

    def watch(self, query_id: str) -> None:
        with self._lock:
            self._query_id = query_id

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(list(self._state.batches),
                            {b: BucketDrain(d.start, d.boundary, d.position, d.finished) for b, d in self._state.drains.items()})

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        if self._query_id is not None and str(progress.id) != self._query_id:
            return
        source = progress.sources[0] if progress.sources else None
        end = parse_reported(source.endOffset) if source is not None else None
        if end is None:
            return
        latest = json.loads(source.latestOffset) if source.latestOffset else {}
        positions = end.positions
        started = _parse_time(progress.timestamp)
        record = BatchRecord(
            batch_id=progress.batchId,
            run_id=str(progress.runId),
            started_at=started,
            ended_at=started + progress.durationMs.get("triggerExecution", 0) / 1000,
            records=progress.numInputRows,
            processing_backlog=end.processing_backlog,
            positions=positions,
            latest=from_nested(latest, "latest") if isinstance(latest, dict) else {},
        )
        open_buckets = end.trace.buckets if end.trace is not None else {}
        with self._lock:
            self._state.batches.append(record)
            for bucket, entry in open_buckets.items():
                if bucket not in self._state.drains:
                    self._state.drains[bucket] = BucketDrain(start=entry.start_offset, boundary=entry.boundary)
            for bucket, drain in self._state.drains.items():
                drain.position = positions.get(bucket, drain.position)
                drain.finished = drain.finished or bucket not in end.backlog.pending
