"""The BacklogFinishEvent and its wire codec (JSON, versioned).

A reader publishes one when its consumer position reaches or passes the backlog boundary of
the bucket it reads; the enumerator consumes it from the control topic. Events are value
objects: the same event twice is the same fact, so handlers may ignore duplicates.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from backlog_source.core.buckets import Bucket
from backlog_source.core.codec import VersionedCodec
from backlog_source.core.errors import MalformedEvent

EVENT_TYPE = "BacklogFinishEvent"
#: The event's versions (the shape of :mod:`backlog_source.core.codec`): 1 is written and read.
EVENT_CODEC = VersionedCodec("BacklogFinishEvent", "v", 1, MalformedEvent)
#: Control messages larger than this are rejected unread: a real event is a few hundred bytes.
MAX_EVENT_BYTES = 16 * 1024


@dataclass(frozen=True)
class BacklogFinishEvent:
    """Reader -> enumerator: "my consumer position passed the boundary of this bucket".

    ``boundary_offset`` is the boundary the split carried; ``reached_offset`` the consumer
    position when it was seen passed (>= boundary). ``traceparent`` is the W3C context of
    the read span, or None.
    """

    source_id: str
    topic: str
    partition: int
    boundary_offset: int
    reached_offset: int
    emitted_at_ms: int
    traceparent: str | None = None
    #: The longest a publish waits for the broker: a lost event only costs attribution.
    publish_timeout_ms: ClassVar[int] = 30_000

    @property
    def bucket(self) -> Bucket:
        return Bucket(self.topic, self.partition)

    def describe(self) -> str:
        return f"BacklogFinishEvent for {self.bucket} (boundary {self.boundary_offset})"

    def encode(self) -> bytes:
        return json.dumps({"type": EVENT_TYPE, **EVENT_CODEC.stamp(asdict(self))}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, payload: bytes | None) -> "BacklogFinishEvent":
        """Parse a control-topic message value. Raises :class:`MalformedEvent` with the reason."""
        if payload is None:
            raise MalformedEvent("empty message")
        if len(payload) > MAX_EVENT_BYTES:
            raise MalformedEvent(f"message of {len(payload)} bytes exceeds {MAX_EVENT_BYTES}")
        try:
            data = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise MalformedEvent("not JSON") from None
        if not isinstance(data, dict) or data.get("type") != EVENT_TYPE:
            raise MalformedEvent("not a BacklogFinishEvent")
        data = EVENT_CODEC.current_shape(data)
        fields: dict[str, Any] = {}
        for name, kind in (
            ("source_id", str),
            ("topic", str),
            ("partition", int),
            ("boundary_offset", int),
            ("reached_offset", int),
            ("emitted_at_ms", int),
        ):
            value = data.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise MalformedEvent(f"field {name!r} must be {kind.__name__}, got {type(value).__name__}")
            fields[name] = value
        traceparent = data.get("traceparent")
        if traceparent is not None and not isinstance(traceparent, str):
            raise MalformedEvent("field 'traceparent' must be a string or null")
        if fields["reached_offset"] < fields["boundary_offset"]:
            raise MalformedEvent("reached_offset is below boundary_offset")
        return cls(traceparent=traceparent, **fields)
