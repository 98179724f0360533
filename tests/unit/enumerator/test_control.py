"""ControlTopic: created once, checked before every read, re-established when deleted or
re-created. Kafka is the in-memory fake; the reader records what it was asked."""

from __future__ import annotations

import logging

from backlog_source.core.settings import parse_options
from backlog_source.enumerator.control import ControlTopic
from tests.fakes import FakeOffsetsClient, RecordingControlReader

SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "backlog.eventsTopic": "_events"})


def control_topic(**topics):
    client = FakeOffsetsClient(topics={"a": [(0, 10)], **topics})
    reader = RecordingControlReader([b"e0", b"e1"])
    return ControlTopic(SETTINGS, client, reader), client, reader


def test_open_creates_a_missing_topic_with_one_partition_and_starts_at_its_end():
    control, client, _ = control_topic()
    assert control.open() == 0
    assert client.created == ["_events"] and client.topics["_events"] == [(0, 0)]


def test_open_keeps_an_existing_topic_and_skips_what_was_written_before():
    control, client, _ = control_topic(_events=[(0, 7)])
    assert control.open() == 7 and client.created == []


def test_read_checks_the_topic_then_reads_from_the_position():
    control, _, reader = control_topic(_events=[(0, 2)])
    control.open()
    assert control.read_from(1).values == [b"e1"]
    assert reader.reads == [1]


def test_a_deleted_topic_is_re_created_and_yields_nothing(caplog):
    control, client, reader = control_topic(_events=[(0, 2)])
    control.open()
    client.delete("_events")
    with caplog.at_level(logging.WARNING):
        read = control.read_from(2)
    assert read.values == [] and read.next_position == 0
    assert "_events" in client.topics and reader.reads == []
    assert "backlog.eventsTopic" in caplog.text and "deleted" in caplog.text


def test_the_log_end_of_a_deleted_topic_re_creates_it():
    """The batch that carries a bucket to its boundary asks the log end before any read."""
    control, client, reader = control_topic(_events=[(0, 2)])
    control.open()
    client.delete("_events")
    assert control.log_end() == 0
    assert client.topics["_events"] == [(0, 0)]


def test_a_re_created_topic_is_read_from_its_start(caplog):
    control, client, reader = control_topic(_events=[(0, 2)])
    control.open()
    client.topic_ids["_events"] = "another-id"
    with caplog.at_level(logging.WARNING):
        control.read_from(2)
    assert reader.reads == [0] and "re-created" in caplog.text
    control.read_from(1)  # the new identity is the one checked from now on
    assert reader.reads == [0, 1]


def test_a_topic_with_several_partitions_is_used_but_warned_about(caplog):
    control, _, reader = control_topic(_events=[(0, 2), (0, 0)])
    with caplog.at_level(logging.WARNING):
        control.open()
    assert "partition 0 only" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        control.read_from(0)
    assert reader.reads == [0] and "partition 0 only" not in caplog.text  # said once, not at every read
