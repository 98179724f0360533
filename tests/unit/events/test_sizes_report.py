"""The RecordSizesReport wire format (versioned JSON) and how the enumerator picks reports out
of the control topic's messages."""

import json
from pathlib import Path

import pytest

from backlog_source.core.errors import MalformedEvent
from backlog_source.events.finish_event import BacklogFinishEvent
from backlog_source.events.sizes_report import (
    MAX_REPORT_BYTES,
    MAX_TOPICS,
    RecordSizesReport,
    TopicSizes,
    split_size_reports,
)


def test_report_codec_round_trip_and_rejections():
    original = RecordSizesReport("s", {"t": TopicSizes(1_000, 10), "u": TopicSizes(0, 3)})
    assert RecordSizesReport.decode(original.encode()) == original
    data = json.loads(original.encode())
    assert data["type"] == "RecordSizesReport" and data["v"] == 1
    for payload, reason in [
        (json.dumps({**data, "v": 2}).encode(), "version 2 is not understood"),
        (json.dumps({**data, "topics": {"t": [1, -1]}}).encode(), "'t': sizes must be \\[bytes, offsets\\]"),
        (json.dumps({**data, "topics": {"t": [True, 1]}}).encode(), "sizes must be"),
        (json.dumps({**data, "source_id": None}).encode(), "needs 'source_id'"),
    ]:
        with pytest.raises(MalformedEvent, match=reason):
            RecordSizesReport.decode(payload)
    finish = BacklogFinishEvent("s", "t", 0, 1, 1, 0).encode()
    assert [RecordSizesReport.decode(p) for p in (None, b"\xff", finish, b"[]")] == [None] * 4  # not reports


def test_a_task_over_very_many_topics_reports_its_largest_within_the_message_limit():
    report = RecordSizesReport("s", {f"topic-{i:04d}": TopicSizes(i, 1) for i in range(MAX_TOPICS + 50)})
    decoded = RecordSizesReport.decode(report.encode())
    assert len(decoded.topics) == MAX_TOPICS and min(s.bytes for s in decoded.topics.values()) == 50


def test_a_report_over_many_long_topic_names_keeps_its_largest_topics_and_stays_readable():
    """Kafka allows topic names of 249 characters: a hundred of them would exceed the size the
    driver parses, and a report it cannot read measures nothing."""
    report = RecordSizesReport("s", {f"{i:03d}" + "t" * 246: TopicSizes(1_000 + i, 1) for i in range(MAX_TOPICS)})
    payload = report.encode()
    assert len(payload) <= MAX_REPORT_BYTES
    decoded = RecordSizesReport.decode(payload)
    assert 0 < len(decoded.topics) < MAX_TOPICS
    assert min(s.bytes for s in decoded.topics.values()) == 1_000 + MAX_TOPICS - len(decoded.topics)


def test_every_released_report_version_is_read_and_the_current_one_written_byte_for_byte():
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "size_reports"
    expected = RecordSizesReport("src-1", {"orders": TopicSizes(134217728, 36210), "payments": TopicSizes(1048576, 9000)})
    stored = (fixtures / "v1.json").read_bytes()
    assert RecordSizesReport.decode(stored) == expected
    assert expected.encode() == stored  # version 1 is also the one written
    assert sorted(p.name for p in fixtures.glob("*.json")) == ["v1.json"]  # a new version adds its fixture


def test_the_reports_of_this_source_are_summed_per_topic_and_other_messages_kept_in_order():
    finish = BacklogFinishEvent("s", "t", 0, 1, 1, 0).encode()
    values = [
        RecordSizesReport("s", {"t": TopicSizes(100, 10)}).encode(),
        finish,
        RecordSizesReport("s", {"t": TopicSizes(300, 10), "u": TopicSizes(7, 1)}).encode(),
        RecordSizesReport("another", {"t": TopicSizes(1, 1_000)}).encode(),
        b'{"type":"RecordSizesReport","v":9}',  # unreadable: left out
        b"garbage",
        None,
    ]
    others, sizes = split_size_reports(values, "s")
    assert others == [finish, b"garbage", None]
    assert sizes == {"t": TopicSizes(400, 20), "u": TopicSizes(7, 1)}
