"""The reader publishes one BacklogFinishEvent when its position passes a range's boundary."""

import pytest

from backlog_source.core.settings import parse_options
from backlog_source.core.split import KafkaRange, KafkaSplit
from backlog_source.core.tracing import exporter
from backlog_source.events import dedup
from backlog_source.reader.kafka_reader import read_split
from tests.fakes import FakeConsumer, Msg, eof

SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}).reader_config


def one(topic, partition, start, end, boundary=None, source_id="", traceparent=None):
    return KafkaSplit((KafkaRange(topic, partition, start, end, boundary, traceparent),), source_id)


def on(partition, messages):
    """The scripted messages, as records of ``partition``."""
    return [[Msg(m.offset(), partition=partition) if m.error() is None else eof(m.offset(), partition) for m in step]
            for step in messages]


def consumer_of(script, partition):
    return FakeConsumer(on(partition, script))


def run(split, script, published, succeed=True):
    def publish(settings, event):
        published.append(event)
        return succeed

    partition = split.ranges[0].partition
    return list(read_split(split, SETTINGS, consumer_factory=consumer_of(script, partition), publish_event=publish))


def test_event_published_once_when_the_position_reaches_the_boundary():
    published = []
    split = one("t", 0, 0, 4, boundary=3, source_id="src-a", traceparent="00-x-y-01")
    run(split, [[Msg(0), Msg(1)], [Msg(2), Msg(3)]], published)
    assert [(e.topic, e.partition, e.boundary_offset, e.reached_offset, e.traceparent) for e in published] == [
        ("t", 0, 3, 4, "00-x-y-01")
    ]
    run(split, [[Msg(0), Msg(1)], [Msg(2), Msg(3)]], published)  # a retried task, same worker
    assert len(published) == 1


def test_end_of_partition_past_a_gap_counts_as_reaching_the_boundary():
    published = []
    run(one("t", 1, 0, 5, boundary=5, source_id="src-b"), [[Msg(0)], [eof(5)]], published)
    assert len(published) == 1 and published[0].reached_offset == 5


def test_no_event_for_a_split_that_does_not_cross_its_boundary():
    published = []
    run(one("t", 2, 0, 2, boundary=5, source_id="src-c"), [[Msg(0), Msg(1)]], published)
    run(one("t", 2, 5, 7, boundary=5, source_id="src-c"), [[Msg(5), Msg(6)]], published)
    run(one("t", 2, 0, 2, source_id="src-c"), [[Msg(0), Msg(1)]], published)
    assert published == []


def test_a_failed_publish_may_be_retried_later():
    published = []
    split = one("t", 3, 0, 1, boundary=1, source_id="src-d")
    run(split, [[Msg(0)]], published, succeed=False)
    run(split, [[Msg(0)]], published)
    assert len(published) == 2
    assert not dedup.first_time("src-d", "t", 3, 1)


# ----------------------------------------------------------------------- the read span

BUCKET_SPAN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_crossing_split_exports_its_read_span_before_the_last_batch_is_handed_over(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    published = []
    split = one("t", 4, 0, 4, boundary=3, source_id="src-e", traceparent=BUCKET_SPAN)
    batches = read_split(
        split, SETTINGS, consumer_factory=consumer_of([[Msg(0), Msg(1)], [Msg(2), Msg(3)]], 4),
        publish_event=lambda settings, event: published.append(event) or True,
    )
    next(batches)
    assert receiver.spans == []
    next(batches)  # the last batch: the span is already out
    [span] = receiver.spans
    assert span["name"] == "backlog.read"
    assert (span["trace_id"], span["parent_span_id"]) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert span["attributes"]["messaging.destination.partition.id"] == "4"
    assert span["attributes"]["backlog.boundary_offset"] == 3
    assert [(e["name"], e["attributes"]) for e in span["events"]] == [
        ("backlog.boundary_reached", {"backlog.reached_offset": 4})
    ]
    # The event names the read span as its context, so the enumerator's side joins the trace.
    assert published[0].traceparent == f"00-{span['trace_id']}-{span['span_id']}-01"
    assert list(batches) == []


def test_splits_that_do_not_cross_export_nothing(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    run(one("t", 5, 0, 2, boundary=5, source_id="src-f", traceparent=BUCKET_SPAN), [[Msg(0), Msg(1)]], [])
    run(one("t", 5, 0, 2, source_id="src-f"), [[Msg(0), Msg(1)]], [])
    exporter.flush()
    assert receiver.requests == 0


def test_a_failed_read_exports_a_failed_span(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    split = one("t", 6, 0, 4, boundary=3, source_id="src-g", traceparent=BUCKET_SPAN)
    failing = FakeConsumer([[Msg(0, partition=6)], RuntimeError("broker gone")])
    with pytest.raises(RuntimeError):
        list(read_split(split, SETTINGS, consumer_factory=failing, publish_event=lambda s, e: True))
    exporter.flush()
    [span] = receiver.spans
    assert span["status"] == "error" and span["events"] == []
