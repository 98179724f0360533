"""The reader publishes one BacklogFinishEvent when its position passes the split's boundary."""

from backlog_source.settings import parse_options
from events import dedup
from reader.kafka_reader import read_split
from reader.split import KafkaSplit
from tests.unit.test_reader import FakeConsumer, Msg, eof

SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})


def run(split, script, published, succeed=True):
    def publish(settings, event):
        published.append(event)
        return succeed

    return list(read_split(split, SETTINGS, consumer_factory=FakeConsumer(script), publish_event=publish))


def test_event_published_once_when_the_position_reaches_the_boundary():
    published = []
    split = KafkaSplit("t", 0, 0, 4, boundary=3, source_id="src-a", traceparent="00-x-y-01")
    run(split, [[Msg(0), Msg(1)], [Msg(2), Msg(3)]], published)
    assert [(e.topic, e.partition, e.boundary_offset, e.reached_offset, e.traceparent) for e in published] == [
        ("t", 0, 3, 4, "00-x-y-01")
    ]
    run(split, [[Msg(0), Msg(1)], [Msg(2), Msg(3)]], published)  # a retried task, same worker
    assert len(published) == 1


def test_end_of_partition_past_a_gap_counts_as_reaching_the_boundary():
    published = []
    run(KafkaSplit("t", 1, 0, 5, boundary=5, source_id="src-b"), [[Msg(0)], [eof(5)]], published)
    assert len(published) == 1 and published[0].reached_offset == 5


def test_no_event_for_a_split_that_does_not_cross_its_boundary():
    published = []
    run(KafkaSplit("t", 2, 0, 2, boundary=5, source_id="src-c"), [[Msg(0), Msg(1)]], published)
    run(KafkaSplit("t", 2, 5, 7, boundary=5, source_id="src-c"), [[Msg(5), Msg(6)]], published)
    run(KafkaSplit("t", 2, 0, 2, source_id="src-c"), [[Msg(0), Msg(1)]], published)
    assert published == []


def test_a_failed_publish_may_be_retried_later():
    published = []
    split = KafkaSplit("t", 3, 0, 1, boundary=1, source_id="src-d")
    run(split, [[Msg(0)]], published, succeed=False)
    run(split, [[Msg(0)]], published)
    assert len(published) == 2
    assert not dedup.first_time("src-d", "t", 3, 1)
