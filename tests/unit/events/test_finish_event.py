"""The BacklogFinishEvent wire format: versioned JSON, strict decoding."""

import json

import pytest

from backlog_source.core.errors import MalformedEvent
from backlog_source.events.finish_event import BacklogFinishEvent


def test_event_codec_round_trip_and_rejections():
    original = BacklogFinishEvent("s", "t", 3, 10, 12, 99, "00-abc-def-01")
    assert BacklogFinishEvent.decode(original.encode()) == original
    data = json.loads(original.encode())
    assert data["type"] == "BacklogFinishEvent" and data["v"] == 1
    for payload, reason in [
        (json.dumps({**data, "v": 2}).encode(), "version 2 is not understood"),
        (json.dumps({**data, "partition": "3"}).encode(), "'partition' must be int"),
        (json.dumps({**data, "reached_offset": 1}).encode(), "below boundary_offset"),
        (None, "empty message"),
        (b"\xff", "not JSON"),
    ]:
        with pytest.raises(MalformedEvent, match=reason):
            BacklogFinishEvent.decode(payload)
