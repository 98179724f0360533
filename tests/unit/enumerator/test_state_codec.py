"""The offset dict: its one parser, every released version, and what it carries."""

import json
import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from backlog_source.core.buckets import Bucket, from_nested, to_nested
from backlog_source.core.errors import OffsetFormatError
from backlog_source.core.tracing.context import SpanContextIds
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.state import (
    BacklogState,
    BatchPlan,
    BoundedBy,
    OpenBucket,
    PhaseTrace,
    SourceOffset,
    TriggerIntervals,
)
from backlog_source.enumerator.state_codec import parse_reported

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "offsets"
O0, O1 = Bucket("orders", 0), Bucket("orders", 1)


def sample() -> SourceOffset:
    return SourceOffset(
        source_id="abc",
        positions={Bucket("orders", 1): 998, Bucket("orders", 0): 1234, Bucket("b", 0): 0},
        backlog=BacklogState(pending={Bucket("orders", 1): 5000}, finishing={Bucket("orders", 0): 1200}),
        starts={Bucket("b", 0): 0},
        events_position=17,
        trace=PhaseTrace(
            SpanContextIds.parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            started_ms=1_700_000_000_000, topics=("orders",), bucket_count=1, records=4002,
            buckets={Bucket("orders", 1): OpenBucket(998, 5000, 1_700_000_000_000)},
        ),
    )


def test_offset_round_trips_through_json_and_pickle():
    offset = sample()
    data = json.loads(json.dumps(offset_codec.encode(offset)))
    assert offset_codec.decode(data) == offset
    assert pickle.loads(pickle.dumps(offset)) == offset


def test_offset_json_uses_sparks_positions_shape_and_is_deterministic():
    """Spark compares offsets by their JSON: equal offsets must give the same text, whatever
    order their maps were built in."""
    data = offset_codec.encode(sample())
    assert data["v"] == 3
    assert list(data) == ["v", "source_id", "positions", "starts", "backlog", "processing_backlog", "events_position",
                          "trace", "snapshot", "topic_ids", "plan"]
    assert data["positions"] == {"b": {"0": 0}, "orders": {"0": 1234, "1": 998}}
    assert data["processing_backlog"] is True
    assert data["backlog"]["pending"] == {"orders": {"1": 5000}} and data["backlog"]["finishing"] == {"orders": {"0": 1200}}
    assert list(data["backlog"]) == ["pending", "finishing", "event_counts"] and data["starts"] == {"b": {"0": 0}}
    assert json.dumps(data) == json.dumps(offset_codec.encode(offset_codec.decode(data)))
    reordered = replace(sample(), positions=dict(reversed(list(sample().positions.items()))))
    assert json.dumps(offset_codec.encode(reordered)) == json.dumps(data)


def test_processing_backlog_is_derived_from_the_pending_boundaries():
    assert offset_codec.encode(SourceOffset("x", {Bucket("t", 0): 1}))["processing_backlog"] is False
    # A batch that reaches every boundary already reports that no backlog is left.
    reached = SourceOffset("x", {Bucket("t", 0): 9}, backlog=BacklogState(finishing={Bucket("t", 0): 9}))
    assert offset_codec.encode(reached)["processing_backlog"] is False and reached.boundaries == {Bucket("t", 0): 9}


def test_every_released_version_is_read_forever():
    """Stored offsets of each released version (tests/fixtures/offsets, written by that
    release: version 1 against the embedded broker, version 2 by its encoder); a new version
    must keep reading them, to the same meaning."""
    read = {path.stem: offset_codec.decode(json.loads(path.read_text())) for path in sorted(FIXTURES.glob("*.json"))}
    assert {name.split("-")[0] for name in read} == {"v1", "v2", "v3"}  # a new version adds its fixtures
    mid = read["v1-mid-backlog"]
    assert mid.processing_backlog and mid.backlog.pending == {O0: 10001, O1: 10001} and mid.backlog.finishing == {}
    assert mid.positions == {O0: 6000, O1: 6000} and mid.trace.bucket_count == 2
    # 0.1.0 kept a boundary its batch had reached in "backlog" until the next batch: that is
    # "finishing" now, so the upgraded query does not report backlog that is already read.
    reached = read["v1-boundary-reached-from-snapshot"]
    assert not reached.processing_backlog and reached.backlog.finishing == {O0: 10007, O1: 10007}
    assert reached.snapshot is not None and reached.snapshot.pending == {}
    done = read["v1-caught-up"]
    assert not done.processing_backlog and done.backlog.event_counts["handled"] == 2 and done.events_position == 2
    # Version 2 (written up to release 0.3.0), by that release's encoder: a catch-up planned
    # by its enumerator under a byte budget, its last batch, and every optional field at once.
    mid2 = read["v2-mid-catch-up"]
    assert mid2.processing_backlog and mid2.backlog.pending == {O0: 10_000, O1: 600} and mid2.backlog.finishing == {}
    assert mid2.plan == BatchPlan(BoundedBy.BYTES, 2_096_000, 2 << 20, 1_048_000.0)
    assert mid2.trace.batches == 2 and mid2.trace.bounded_by == (BoundedBy.BYTES,) and mid2.trace.budget_bytes == 2 << 20
    assert mid2.intervals == TriggerIntervals(None, 5_000) and mid2.topic_ids == {"orders": "b3JkZXJzLXRvcGljLWlk"}
    last = read["v2-last-catch-up-batch"]
    assert not last.processing_backlog and last.backlog.pending == {} and last.backlog.finishing == {O0: 10_000, O1: 600}
    assert last.boundaries == {O0: 10_000, O1: 600} and last.plan.bounded_by is BoundedBy.AVAILABLE
    every = read["v2-every-field"]
    clicks = Bucket("clicks", 0)
    assert every.backlog.pending == {O1: 9_000, clicks: 3_000} and every.backlog.finishing == {O0: 12_000}
    assert every.starts == {clicks: 0} and every.events_position == 17
    counts = every.backlog.event_counts
    assert (counts["handled"], counts["duplicate"], counts["malformed"], counts["finished_by_position"],
            counts["stale"]) == (3, 1, 1, 1, 0)
    assert every.snapshot.pending == {clicks: ("data/clicks/0/part-0.parquet", "data/clicks/0/part-1.parquet")}
    assert every.trace.bounded_by == (BoundedBy.BYTES, BoundedBy.RECORDS) and every.trace.buckets[O1].boundary == 9_000
    assert every.intervals == TriggerIntervals(0, 5_000) and every.plan.bytes_per_s == 41_000_000.0
    plain = read["v2-caught-up"]
    assert not plain.processing_backlog and plain.trace is None and plain.snapshot is None and plain.intervals is None
    # Version 3 (this release) holds the same offsets; it is what the encoder writes, to the byte.
    assert read["v3-every-field"] == every and read["v3-mid-catch-up"] == mid2
    for name in ("v3-every-field", "v3-mid-catch-up"):
        written = json.dumps(offset_codec.encode(read[name]), indent=4) + "\n"
        assert written == (FIXTURES / f"{name}.json").read_text()
    for offset in read.values():  # what this release writes for them reads back the same
        assert offset_codec.decode(json.loads(json.dumps(offset_codec.encode(offset)))) == offset


def test_a_v1_bucket_whose_snapshot_is_unread_stays_pending():
    data = {"v": 1, "source_id": "x", "positions": {"t": {"0": 50}}, "backlog": {"t": {"0": 50}},
            "snapshot": {"root": "/s", "id": "i", "pending": {"t": {"0": ["f.parquet"]}}}}
    offset = offset_codec.decode(data)
    assert offset.backlog.pending == {Bucket("t", 0): 50} and offset.backlog.finishing == {}


def test_reported_offsets_of_other_sources_are_not_ours():
    assert parse_reported('{"orders": {"0": 5}}') is None  # Spark's Kafka source
    assert parse_reported("") is None and parse_reported("not json") is None
    assert parse_reported(json.dumps(offset_codec.encode(sample()))) == sample()
    with pytest.raises(OffsetFormatError, match="offset version 9 is not understood"):
        parse_reported({"v": 9, "source_id": "x", "positions": {}})


@pytest.mark.parametrize(
    "data, fragment",
    [
        ({"v": 4, "source_id": "x", "positions": {}},
         "offset version 4 is not understood; this release reads version(s) 1, 2, 3"),
        ({"orders": {"0": 5}}, "offset version None is not understood"),
        ([1, 2], "must be a JSON object"),
        ({"v": 1, "positions": {}}, "'source_id' must be a non-empty string"),
        ({"v": 1, "source_id": "x", "positions": {"t": {"0": "5"}}}, "value for t-0 must be an integer"),
        ({"v": 1, "source_id": "x", "positions": {"t": [5]}}, "topic 't' must map partitions to offsets"),
        ({"v": 1, "source_id": "x", "positions": {}, "events_position": -1}, "'events_position' must be an integer >= 0"),
        ({"v": 3, "source_id": "x", "positions": {}, "backlog": {"pending": {"t": [5]}}}, "field 'backlog.pending'"),
        ({"v": 3, "source_id": "x", "positions": {}, "backlog": [5]}, "'backlog' must be an object"),
        ({"v": 2, "source_id": "x", "positions": {}, "event_counts": {"handled": -1}}, "'backlog.event_counts'"),
    ],
)
def test_malformed_offsets_are_rejected_with_a_reason(data, fragment):
    with pytest.raises(OffsetFormatError) as raised:
        offset_codec.decode(data)
    assert fragment in str(raised.value)


def test_nested_helpers_are_inverse():
    values = {Bucket("a", 2): 7, Bucket("a", 10): 1}
    assert from_nested(to_nested(values), "x") == values


def test_the_batch_plan_round_trips_and_an_offset_without_one_is_read():
    offset = SourceOffset("s", {Bucket("a", 0): 5}, plan=BatchPlan(BoundedBy.TIME, 1_000, 2_000, 12.5))
    assert offset_codec.decode(offset_codec.encode(offset)) == offset
    assert offset_codec.decode({k: v for k, v in offset_codec.encode(offset).items() if k != "plan"}).plan is None
    with pytest.raises(OffsetFormatError, match="offset field 'plan' is malformed"):
        offset_codec.decode({**offset_codec.encode(offset), "plan": {"bounded_by": "luck"}})


def test_a_querys_own_trigger_intervals_round_trip_and_are_omitted_when_unset():
    from backlog_source.enumerator.state import TriggerIntervals

    offset = SourceOffset("s", {Bucket("a", 0): 5}, intervals=TriggerIntervals(None, 5_000))
    assert offset_codec.decode(offset_codec.encode(offset)) == offset
    assert "intervals" not in offset_codec.encode(SourceOffset("s", {Bucket("a", 0): 5}))
    with pytest.raises(OffsetFormatError, match="offset field 'intervals'"):
        offset_codec.decode({**offset_codec.encode(offset), "intervals": {"low_latency_ms": -1}})
