"""Lag figures like Spark's Kafka source reports, from a query's progress.

Spark's Kafka source puts ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
``avgOffsetsBehindLatest`` in ``SourceProgress.metrics``. PySpark's Python data source API
cannot attach custom metrics, so this source reports what they are computed from instead:
``endOffset`` (the batch end, our offset dict) and ``latestOffset`` (the latest offsets,
``reportLatestOffset``). :func:`lag_metrics` computes the same three figures from them.
"""

from __future__ import annotations

import json
from typing import Any

from backlog_source.core.buckets import from_nested
from backlog_source.enumerator import state_codec as offset_codec


def lag_metrics(source_progress: Any) -> dict[str, float] | None:
    """``{"minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest"}`` for
    one source of a progress event, or None when it carries no latest offsets yet.

    Accepts a ``SourceProgress`` (``query.lastProgress.sources[0]`` or a listener's
    ``event.progress.sources[0]``) or its dict form (``json.loads(progress.json)["sources"][0]``).
    Per partition, offsets behind latest = latest offset - batch end offset, as in Spark.
    """
    end_raw = progress_field(source_progress, "endOffset")
    latest_raw = progress_field(source_progress, "latestOffset")
    if not end_raw or not latest_raw:
        return None
    end = offset_codec.decode(_as_dict(end_raw)).positions
    latest = from_nested(_as_dict(latest_raw), "latestOffset")
    behind = [max(0, latest[b] - end[b]) for b in end if b in latest]
    if not behind:
        return None
    return {
        "minOffsetsBehindLatest": float(min(behind)),
        "maxOffsetsBehindLatest": float(max(behind)),
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
    }


def progress_field(progress: Any, name: str) -> Any:
    """Field ``name`` of a progress (or of one of its sources), object or dict form."""
    return progress.get(name) if isinstance(progress, dict) else getattr(progress, name, None)


def _as_dict(value: Any) -> dict:
    return json.loads(value) if isinstance(value, str) else value
