import json
import pickle

import pytest

from backlog_source.buckets import Bucket, from_nested, to_nested
from backlog_source.errors import OffsetFormatError
from enumerator.offsets import SourceOffset
from enumerator.phase_trace import PhaseTrace
from reader.split import KafkaSplit


def sample() -> SourceOffset:
    return SourceOffset(
        source_id="abc",
        positions={Bucket("orders", 1): 998, Bucket("orders", 0): 1234, Bucket("b", 0): 0},
        backlog={Bucket("orders", 1): 5000},
        events_position=17,
        trace=PhaseTrace.from_json({
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "started_ms": 1_700_000_000_000, "topics": ["orders"], "bucket_count": 1, "records": 4002,
            "buckets": {"orders": {"1": [998, 5000, 1_700_000_000_000]}},
        }),
    )


def test_offset_round_trips_through_json_and_pickle():
    offset = sample()
    data = json.loads(json.dumps(offset.to_json()))
    assert SourceOffset.from_json(data) == offset
    assert pickle.loads(pickle.dumps(offset)) == offset


def test_offset_json_uses_sparks_positions_shape_and_is_deterministic():
    data = sample().to_json()
    assert data["v"] == 1
    assert data["positions"] == {"b": {"0": 0}, "orders": {"0": 1234, "1": 998}}
    assert data["processing_backlog"] is True
    assert json.dumps(data) == json.dumps(SourceOffset.from_json(data).to_json())


def test_processing_backlog_is_derived_from_the_pending_boundaries():
    assert SourceOffset("x", {Bucket("t", 0): 1}).to_json()["processing_backlog"] is False


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"v": 2, "source_id": "x", "positions": {}}, "offset version 2 is not understood; this backlog-source reads versions 1"),
        ({"orders": {"0": 5}}, "offset version None is not understood"),
        ([1, 2], "must be a JSON object"),
        ({"v": 1, "positions": {}}, "'source_id' must be a non-empty string"),
        ({"v": 1, "source_id": "x", "positions": {"t": {"0": "5"}}}, "value for t-0 must be an integer"),
        ({"v": 1, "source_id": "x", "positions": {"t": [5]}}, "topic 't' must map partitions to offsets"),
        ({"v": 1, "source_id": "x", "positions": {}, "events_position": -1}, "'events_position' must be an integer >= 0"),
    ],
)
def test_malformed_offsets_are_rejected_with_a_reason(data, fragment):
    with pytest.raises(OffsetFormatError) as raised:
        SourceOffset.from_json(data)
    assert fragment in str(raised.value)


def test_nested_helpers_are_inverse():
    values = {Bucket("a", 2): 7, Bucket("a", 10): 1}
    assert from_nested(to_nested(values), "x") == values


def test_split_round_trips_and_pickles():
    split = KafkaSplit("orders", 3, 10, 20, boundary=15, source_id="abc", traceparent="00-x-y-01")
    assert KafkaSplit.from_json(json.loads(json.dumps(split.to_json()))) == split
    assert pickle.loads(pickle.dumps(split)) == split
    assert split.crosses_boundary
    assert not KafkaSplit("orders", 3, 15, 20, boundary=15).crosses_boundary
    assert KafkaSplit("orders", 3, 10, 15, boundary=15).crosses_boundary
    assert not KafkaSplit("orders", 3, 10, 20).crosses_boundary


def test_split_rejects_unknown_version_and_bad_ranges():
    with pytest.raises(OffsetFormatError, match="split version 9 is not understood"):
        KafkaSplit.from_json({"v": 9})
    with pytest.raises(ValueError, match=r"invalid range \[5, 4\)"):
        KafkaSplit("t", 0, 5, 4)
