"""Trace context as plain values: W3C ``traceparent`` text, ids, and finished-span records.

Pure (no OpenTelemetry SDK import), so the enumerator and readers can compute trace
context whether or not tracing is configured in their process; :mod:`backlog_source.core.tracing.exporter`
exports the records when it is.

Why records instead of live spans: a ``backlog.bucket`` span starts in one process (the
enumerator that recorded the boundary) and may end in another (a restarted enumerator,
hours later), and its id must be known from the start because splits carry it to executors.
So each span's ids and start time are fixed when it starts, kept in the offset dict, and the
finished span is exported once, as a record, by whichever process sees it end.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Union

AttributeValue = Union[str, bool, int, float, tuple[str, ...]]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_random = random.SystemRandom()


@dataclass(frozen=True)
class SpanContextIds:
    """The ids of one span: what a ``traceparent`` carries (always sampled)."""

    trace_id: int
    span_id: int

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-01"

    @classmethod
    def parse(cls, traceparent: str | None) -> "SpanContextIds | None":
        """The ids in a W3C ``traceparent``, or None when it is absent or not valid (a bad
        context starts no trace rather than failing a read)."""
        if not traceparent:
            return None
        match = _TRACEPARENT.match(traceparent.strip().lower())
        if not match:
            return None
        trace_id, span_id = int(match.group(1), 16), int(match.group(2), 16)
        if trace_id == 0 or span_id == 0:
            return None
        return cls(trace_id, span_id)


def new_trace_id() -> int:
    return _random.getrandbits(128) or 1


def new_span_id() -> int:
    return _random.getrandbits(64) or 1


def derived_span_id(trace_id: int, *parts: object) -> int:
    """A span id that any process can compute from the same inputs (non-zero).

    Used for ``backlog.bucket`` spans: ``partitions()`` must hand executors the bucket span's
    context as a pure function of the checkpointed offset, before the span exists anywhere.
    """
    key = "/".join([f"{trace_id:032x}", *map(str, parts)]).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") or 1


@dataclass(frozen=True)
class SpanEventRecord:
    name: str
    at_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanRecord:
    """A finished span, ready to export: ``parent`` is None for a trace's root; ``error``
    (an exception's type name, never its message) marks it failed."""

    name: str
    ids: SpanContextIds
    parent: SpanContextIds | None
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    events: tuple[SpanEventRecord, ...] = ()
    error: str | None = None


def ms_to_ns(ms: int | float) -> int:
    return int(ms * 1_000_000)
