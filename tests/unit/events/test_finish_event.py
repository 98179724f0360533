"""The BacklogFinishEvent wire format: versioned JSON, strict decoding."""

import json
from pathlib import Path

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


def test_every_released_event_version_is_read_and_the_current_one_written_byte_for_byte():
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "events"
    expected = BacklogFinishEvent("src-1", "orders", 3, 5000, 5002, 1763800000123,
                                  "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    stored = (fixtures / "v1.json").read_bytes()
    assert BacklogFinishEvent.decode(stored) == expected
    assert expected.encode() == stored  # version 1 is also the one written
    assert sorted(p.name for p in fixtures.glob("*.json")) == ["v1.json"]  # a new version adds its fixture
