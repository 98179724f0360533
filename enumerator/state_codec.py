"""The offset dict: the JSON encoding of the source's state (:mod:`.state`), every version.

Spark stores the dict that ``latestOffset`` returns in the query's offset log and hands it
back as ``start``/``end`` of a batch, also after a restart. So it must hold everything a
replayed batch needs: read positions and the backlog state of every bucket. Every reader of
a checkpointed or reported offset (the enumerator, ``partitions()``, the mode-switch
listener, the demo, :func:`~backlog_source.metrics.lag_metrics`) parses it here.

Shape, version 3 (the end of one micro-batch; each field is named as in
:class:`~backlog_source.enumerator.state.SourceOffset`)::

    {"v": 3,
     "source_id": "7f0c…",                      # stable for the life of the checkpoint
     "positions": {"orders": {"0": 1234}},     # next offset to read, Spark's Kafka shape
     "starts": {"clicks": {"0": 0}},           # where this batch starts a new or reset bucket
     "backlog": {                               # the backlog state (BacklogState)
         "pending": {"orders": {"1": 5000}},    # boundary of each bucket still below it after this batch
         "finishing": {"orders": {"0": 1200}},  # boundaries this batch reaches (they leave with its commit)
         "event_counts": {"handled": 3, ...}},  # how control messages read so far were treated
     "processing_backlog": true,                # == bool(backlog.pending): the state once this batch commits
     "events_position": 17,                     # next control-topic offset to read
     "trace": {"traceparent": "00-…-…-01", …,   # the backlog phase's trace (enumerator/phase_trace.py), or null
               "batches": 4, "planned_bytes": 530000000,  # its batches so far, once there are any
               "bounded_by": ["bytes"], "budget_bytes": 134217728},
     "snapshot": {"root": "s3://…", "id": "…",   # snapshot.path: buckets whose snapshot is still to be read
                  "pending": {"orders": {"0": ["data/…/part-0.parquet"]}}},  # or null
     "topic_ids": {"orders": "dGhlIHRvcGljIGlk"},  # each topic's id when planned (KIP-516)
     "plan": {"bounded_by": "bytes", "bytes": 134217000,  # how the batch was sized
              "budget_bytes": 134217728, "bytes_per_s": 41000000.0},
     "intervals": {"high_throughput_ms": 0, "low_latency_ms": 5000}}  # only when the query's options set them

Positions are *next offsets*: a batch with ``start`` and ``end`` reads ``[start, end)`` of
each bucket. A boundary is a log end offset: the bucket leaves backlog once its consumer
position reaches it. Because Spark reports this dict as the ``endOffset`` of the batch that
has just committed, ``processing_backlog`` says whether backlog is left *after* that batch:
the batch that reads the last backlog record already reports false, so the switch to low
latency needs no extra batch. A stored example of every released version is read by
``tests/unit/enumerator/test_state_codec.py`` (``tests/fixtures/offsets/``).

Versions (:data:`OFFSET_CODEC`, the shape of :mod:`.codec`): 1 (release 0.1.0) had no
``starts`` and no ``finishing``; :func:`_upgrade_v1` turns it into version 2. ``topic_ids``,
``plan`` and ``intervals`` were added to version 2 in release 0.3.0 as optional fields: an older release
reading them ignores them, so a rollback still reads the checkpoint; read without them, the
ids are learnt at the next plan and catch-up sizing starts afresh. Version 2 (up to release
0.3.0) had the backlog state at the top level, its pending boundaries named ``backlog``;
:func:`_upgrade_v2` turns it into version 3. A release that reads only versions 1 and 2
refuses a version 3 checkpoint with :class:`OffsetFormatError` rather than misreading it. The trace's ``batches``,
``planned_bytes``, ``bounded_by`` and ``budget_bytes`` are optional the same way (absent:
nothing counted yet, or an offset written before they existed). Pure codecs; the
transitions live in :mod:`backlog_source.enumerator.state`,
:mod:`backlog_source.enumerator.boundaries` and :mod:`backlog_source.enumerator.phase_trace`.
"""

from __future__ import annotations

import json
from typing import Any

from backlog_source.core.buckets import Bucket, from_nested, to_nested
from backlog_source.core.codec import VersionedCodec
from backlog_source.core.errors import OffsetFormatError
from backlog_source.core.tracing.context import SpanContextIds
from backlog_source.enumerator.state import (
    COUNT_KINDS,
    BacklogState,
    BatchPlan,
    BoundedBy,
    EventCounts,
    OpenBucket,
    PhaseTrace,
    SnapshotState,
    SourceOffset,
    TriggerIntervals,
)


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2. Version 1's ``backlog`` held every boundary the batch was planned
    with, including those its positions had already reached; those become ``finishing``,
    except a bucket whose snapshot is still to be read (its boundary is its snapshot's log
    offset, which its position equals before the read). ``starts`` did not exist."""
    positions = from_nested(data.get("positions", {}), "offset field 'positions'")
    backlog = from_nested(data.get("backlog", {}), "offset field 'backlog'")
    snapshot = _snapshot_from_json(data.get("snapshot"))
    unread = snapshot.pending if snapshot is not None else {}
    finishing = {b: o for b, o in backlog.items() if b not in unread and positions.get(b, -1) >= o}
    still = {b: o for b, o in backlog.items() if b not in finishing}
    return {**data, "backlog": to_nested(still), "finishing": to_nested(finishing)}


#: Version 2's top-level fields of the backlog state -> their names in version 3's ``backlog``.
_V2_BACKLOG_FIELDS = {"backlog": "pending", "finishing": "finishing", "event_counts": "event_counts"}


def _upgrade_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 -> 3. The backlog state moves into one object under the names the code
    uses: version 2's ``backlog`` (the pending boundaries), ``finishing`` and
    ``event_counts`` become ``backlog.pending``, ``backlog.finishing`` and
    ``backlog.event_counts``. Fields absent in version 2 stay absent."""
    backlog = {new: data[old] for old, new in _V2_BACKLOG_FIELDS.items() if old in data}
    return {**{k: v for k, v in data.items() if k not in _V2_BACKLOG_FIELDS}, "backlog": backlog}


#: What ``trace.bounded_by`` may hold; a kind a later release adds is left out when read.
_BOUNDED_BY_VALUES = frozenset(b.value for b in BoundedBy)

#: The offset dict's versions: 3 is written; 1 and 2 are read and upgraded.
OFFSET_CODEC = VersionedCodec("offset", "v", 3, OffsetFormatError, upgrades={1: _upgrade_v1, 2: _upgrade_v2})


def encode(offset: SourceOffset) -> dict[str, Any]:
    """The dict Spark checkpoints (JSON-serialisable, deterministic key order)."""
    return OFFSET_CODEC.stamp({
        "source_id": offset.source_id,
        "positions": to_nested(offset.positions),
        "starts": to_nested(offset.starts),
        "backlog": _backlog_to_json(offset.backlog),
        "processing_backlog": offset.processing_backlog,
        "events_position": offset.events_position,
        "trace": None if offset.trace is None else _trace_to_json(offset.trace),
        "snapshot": None if offset.snapshot is None else _snapshot_to_json(offset.snapshot),
        "topic_ids": dict(sorted(offset.topic_ids.items())),
        "plan": None if offset.plan is None else _plan_to_json(offset.plan),
        **({} if offset.intervals is None else {"intervals": _intervals_to_json(offset.intervals)}),
    })


def decode(data: Any) -> SourceOffset:
    """Parse a dict written by :func:`encode`, of this release or an earlier one.

    Raises :class:`OffsetFormatError` for an unknown version or a malformed dict, e.g. a
    checkpoint written by Spark's ``kafka`` source or by a newer backlog-source.
    """
    data = OFFSET_CODEC.current_shape(
        data, hint=". Was the checkpoint written by another source or a newer release?")
    source_id = data.get("source_id")
    if not isinstance(source_id, str) or not source_id:
        raise OffsetFormatError("offset field 'source_id' must be a non-empty string")
    events_position = data.get("events_position", 0)
    if not isinstance(events_position, int) or isinstance(events_position, bool) or events_position < 0:
        raise OffsetFormatError(f"offset field 'events_position' must be an integer >= 0, got {events_position!r}")
    return SourceOffset(
        source_id=source_id,
        positions=from_nested(data.get("positions", {}), "offset field 'positions'"),
        backlog=_backlog_from_json(data.get("backlog", {})),
        starts=from_nested(data.get("starts", {}), "offset field 'starts'"),
        events_position=events_position,
        trace=_trace_from_json(data.get("trace")),
        snapshot=_snapshot_from_json(data.get("snapshot")),
        topic_ids=_topic_ids_from_json(data.get("topic_ids")),
        plan=_plan_from_json(data.get("plan")),
        intervals=_intervals_from_json(data.get("intervals")),
    )


def parse_reported(value: Any) -> SourceOffset | None:
    """The backlog-source offset in a progress event's ``startOffset``/``endOffset`` or in a
    line of the checkpoint's offset log (JSON text or its dict), or None when the value is
    another source's offset (Spark's Kafka source, the rate source...) or empty.

    Raises :class:`OffsetFormatError` for a backlog-source offset this release cannot read,
    e.g. one written by a newer release.
    """
    if not value:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not (isinstance(value, dict) and "source_id" in value and "positions" in value):
        return None
    return decode(value)


# -- the parts ---------------------------------------------------------------------------


def _backlog_to_json(backlog: BacklogState) -> dict[str, Any]:
    return {"pending": to_nested(backlog.pending), "finishing": to_nested(backlog.finishing),
            "event_counts": {kind: backlog.event_counts[kind] for kind in COUNT_KINDS}}


def _backlog_from_json(data: Any) -> BacklogState:
    if not isinstance(data, dict):
        raise OffsetFormatError(f"offset field 'backlog' must be an object, got {data!r}")
    return BacklogState(
        pending=from_nested(data.get("pending", {}), "offset field 'backlog.pending'"),
        finishing=from_nested(data.get("finishing", {}), "offset field 'backlog.finishing'"),
        event_counts=_counts_from_json(data.get("event_counts")),
    )


def _plan_to_json(plan: BatchPlan) -> dict[str, Any]:
    return {"bounded_by": plan.bounded_by.value, "bytes": plan.bytes, "budget_bytes": plan.budget_bytes,
            "bytes_per_s": plan.bytes_per_s}


def _plan_from_json(data: Any) -> BatchPlan | None:
    if data is None:
        return None
    try:
        rate = data.get("bytes_per_s")
        return BatchPlan(BoundedBy(data["bounded_by"]), _optional_int(data.get("bytes")),
                         _optional_int(data.get("budget_bytes")), None if rate is None else float(rate))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise OffsetFormatError(f"offset field 'plan' is malformed: {exc!r}") from None


def _intervals_to_json(intervals: TriggerIntervals) -> dict[str, Any]:
    return {"high_throughput_ms": intervals.high_throughput_ms, "low_latency_ms": intervals.low_latency_ms}


def _intervals_from_json(data: Any) -> TriggerIntervals | None:
    if data is None:
        return None
    try:
        found = TriggerIntervals(_optional_int(data.get("high_throughput_ms")), _optional_int(data.get("low_latency_ms")))
    except (TypeError, ValueError, AttributeError) as exc:
        raise OffsetFormatError(f"offset field 'intervals' is malformed: {exc!r}") from None
    if any(v is not None and v < 0 for v in (found.high_throughput_ms, found.low_latency_ms)):
        raise OffsetFormatError(f"offset field 'intervals' holds a negative interval: {data!r}")
    return found


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _topic_ids_from_json(data: Any) -> dict[str, str]:
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in data.items()):
        raise OffsetFormatError("offset field 'topic_ids' must map topic names to non-empty id strings")
    return dict(data)


def _counts_from_json(data: Any) -> EventCounts:
    if data is None:
        return EventCounts()
    if not isinstance(data, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in data.values()
    ):
        raise OffsetFormatError("offset field 'backlog.event_counts' must map kinds to counts >= 0")
    return EventCounts({k: v for k, v in data.items() if k in COUNT_KINDS and v})


def _trace_to_json(trace: PhaseTrace) -> dict[str, Any]:
    nested: dict[str, dict[str, list[int]]] = {}
    for bucket in sorted(trace.buckets):
        entry = trace.buckets[bucket]
        nested.setdefault(bucket.topic, {})[str(bucket.partition)] = [entry.start_offset, entry.boundary, entry.started_ms]
    return {
        "traceparent": trace.ids.traceparent,
        "started_ms": trace.started_ms,
        "topics": list(trace.topics),
        "bucket_count": trace.bucket_count,
        "records": trace.records,
        "buckets": nested,
        # Written once there is something to say (absent: nothing counted yet).
        **({"batches": trace.batches} if trace.batches else {}),
        **({"planned_bytes": trace.planned_bytes} if trace.planned_bytes else {}),
        **({"bounded_by": [str(b) for b in trace.bounded_by]} if trace.bounded_by else {}),
        **({"budget_bytes": trace.budget_bytes} if trace.budget_bytes is not None else {}),
    }


def _trace_from_json(data: Any) -> PhaseTrace | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise OffsetFormatError(f"offset field 'trace' must be an object or null, got {data!r}")
    ids = SpanContextIds.parse(data.get("traceparent"))
    if ids is None:
        raise OffsetFormatError(f"offset field 'trace.traceparent' is not a W3C traceparent: {data.get('traceparent')!r}")
    try:
        buckets = {
            Bucket(topic, int(partition)): OpenBucket(int(entry[0]), int(entry[1]), int(entry[2]))
            for topic, partitions in data.get("buckets", {}).items()
            for partition, entry in partitions.items()
        }
        return PhaseTrace(
            ids=ids,
            started_ms=int(data["started_ms"]),
            topics=tuple(str(t) for t in data.get("topics", [])),
            bucket_count=int(data.get("bucket_count", 0)),
            records=int(data.get("records", 0)),
            buckets=buckets,
            batches=int(data.get("batches", 0)),
            planned_bytes=int(data.get("planned_bytes", 0)),
            # A kind a later release adds is left out: these only describe the phase.
            bounded_by=tuple(BoundedBy(b) for b in data.get("bounded_by", []) if b in _BOUNDED_BY_VALUES),
            budget_bytes=None if data.get("budget_bytes") is None else int(data["budget_bytes"]),
        )
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise OffsetFormatError(f"offset field 'trace' is malformed: {exc!r}") from None


def _snapshot_to_json(snapshot: SnapshotState) -> dict[str, Any]:
    nested: dict[str, dict[str, list[str]]] = {}
    for bucket in sorted(snapshot.pending):
        nested.setdefault(bucket.topic, {})[str(bucket.partition)] = list(snapshot.pending[bucket])
    return {"root": snapshot.root, "id": snapshot.snapshot_id, "pending": nested}


def _snapshot_from_json(data: Any) -> SnapshotState | None:
    if data is None:
        return None
    try:
        pending = {
            Bucket(topic, int(partition)): tuple(str(f) for f in files)
            for topic, partitions in data["pending"].items()
            for partition, files in partitions.items()
        }
        return SnapshotState(str(data["root"]), str(data["id"]), pending)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise OffsetFormatError(f"offset field 'snapshot' is malformed: {exc!r}") from None
