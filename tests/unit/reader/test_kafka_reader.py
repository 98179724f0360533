"""The split reader against a scripted fake consumer: ends by position, never by empty polls;
several ranges per task; Spark's values for headers and timestamps; one BacklogFinishEvent
when the position passes a range's boundary, and the read span; a catch-up split's report of
the bytes it read."""

from dataclasses import replace

import pytest
from confluent_kafka import KafkaError, KafkaException

from backlog_source.core.errors import DataLossError, KafkaUnavailableError, MalformedRecordError
from backlog_source.core.kafka_refusals import AccessRefusedError
from backlog_source.core.schema import arrow_schema
from backlog_source.core.settings import parse_options
from backlog_source.core.tracing import exporter
from backlog_source.events import dedup
from backlog_source.events.sizes_report import TopicSizes
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import fetch_bytes, read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from tests.fakes import Err, FakeClock, FakeConsumer, Msg, eof

SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafkaConsumer.pollTimeoutMs": "5000"}).reader_config


def split(*ranges, source_id=""):
    return KafkaSplit(tuple(KafkaRange(*r) if isinstance(r, tuple) else r for r in ranges), source_id)


def read(s, consumer, config=SETTINGS, **kwargs):
    return list(read_split(s, config, pool=ConsumerPool(consumer, capacity=0), **kwargs))


def offsets_read(batches):
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_range_ends_at_a_record_past_the_end_and_drops_it():
    consumer = FakeConsumer([[Msg(0), Msg(1)], [Msg(2), Msg(3), Msg(4)]])
    batches = read(split(("t", 0, 0, 4)), consumer)
    assert offsets_read(batches) == [0, 1, 2, 3]
    assert consumer.assigned == [[("t", 0, 0)]] and consumer.closed
    assert consumer.config["auto.offset.reset"] == "error" and consumer.config["enable.partition.eof"] is True


def test_compaction_gap_at_the_end_finishes_on_end_of_partition():
    # Offsets 3 and 4 were compacted away (or are transaction markers): no record at end - 1.
    batches = read(split(("t", 0, 0, 5)), FakeConsumer([[Msg(0), Msg(2)], [], [eof(5)]]))
    assert offsets_read(batches) == [0, 2]


def test_a_range_ending_at_the_log_end_past_markers_ends_with_its_end_of_partition_event_after_short_waits():
    """Three transactions of 10 records: offsets 10, 21 and 32 are commit markers, so the
    range [0, 33) has 30 records. consume() waits until it has every message asked for or
    its wait is over: it is asked with a short wait, doubled only while nothing arrives, so
    the end-of-partition event ends the read at once (a fixed 1 s wait made every such read
    take the whole second)."""
    records = [Msg(o) for o in range(33) if o not in (10, 21, 32)]
    consumer = FakeConsumer([records, [], [], [eof(33)]])
    assert offsets_read(read(split(("t", 0, 0, 33)), consumer)) == [m.offset() for m in records]
    assert consumer.waits == [0.01, 0.01, 0.02, 0.04]
    assert consumer.asked == [33, 1, 1, 1]


def test_the_consume_wait_doubles_while_nothing_arrives_up_to_one_second_and_resets_on_progress():
    clock = FakeClock()
    consumer = FakeConsumer([[]] * 9 + [[Msg(0)], [], [Msg(1)]], clock=clock)
    assert offsets_read(read(split(("t", 0, 0, 2)), consumer, clock=clock)) == [0, 1]
    assert consumer.waits == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0, 1.0, 0.01, 0.02]


def test_empty_polls_alone_never_end_a_range():
    clock = FakeClock()
    consumer = FakeConsumer([[Msg(0)]], clock=clock)
    expected = r"no progress reading t-0 \[0, 3\) at offset 1 from Kafka at h:1 for 5000 ms \(kafkaConsumer.pollTimeoutMs\)"
    with pytest.raises(KafkaUnavailableError, match=expected):
        read(split(("t", 0, 0, 3)), consumer, clock=clock)
    assert consumer.closed


def test_empty_ranges_need_no_consumer():
    def refuse(config):
        raise AssertionError("no consumer should be created")

    assert read(split(("t", 0, 7, 7)), refuse) == []


def test_several_ranges_are_read_by_one_consumer_into_one_batch_per_fetch():
    """A small batch over many partitions is one task: one consumer, all ranges assigned at
    their starts, records of several partitions in one Arrow batch with their own columns."""
    consumer = FakeConsumer([
        [Msg(10, partition=0), Msg(11, partition=0), Msg(5, partition=3), Msg(12, partition=0)],
        [Msg(6, partition=3), Msg(7, partition=3)],
    ])
    batches = read(split(("t", 0, 10, 12), ("t", 3, 5, 7)), consumer)
    rows = [(r["partition"], r["offset"]) for b in batches for r in b.to_pylist()]
    assert rows == [(0, 10), (0, 11), (3, 5), (3, 6)]  # t-0's 12 and t-3's 7 are past their ends
    assert consumer.assigned == [[("t", 0, 10), ("t", 3, 5)]]
    assert ("t", 0) in consumer.paused  # a range that is done stops fetching while the others finish
    assert len(batches) == 2


def test_runs_of_two_topics_with_the_same_partition_number_stay_apart():
    consumer = FakeConsumer([[Msg(0, topic="a"), Msg(0, topic="b"), Msg(1, topic="a"), Msg(2, topic="a")],
                             [Msg(1, topic="b")]])
    batches = read(split(("a", 0, 0, 2), ("b", 0, 0, 1)), consumer)
    rows = [(r["topic"], r["offset"]) for b in batches for r in b.to_pylist()]
    assert rows == [("a", 0), ("b", 0), ("a", 1)]  # a's 2 and b's 1 are past their ends


def test_out_of_range_is_data_loss_naming_the_offsets():
    consumer = FakeConsumer([[Msg(-1001, error=Err(KafkaError._AUTO_OFFSET_RESET))]], watermarks=(20, 40))
    with pytest.raises(DataLossError, match=r"offset 5 of t-0 is out of range \(earliest 20, log end 40\); records 5..19"):
        read(split(("t", 0, 5, 30)), consumer)


def test_out_of_range_skips_to_earliest_when_loss_is_allowed():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "false"}).reader_config
    consumer = FakeConsumer(
        [[Msg(-1001, error=Err(KafkaError._AUTO_OFFSET_RESET))], [Msg(20), Msg(21)], [eof(22)]], watermarks=(20, 22)
    )
    batches = read(split(("t", 0, 5, 22)), consumer, settings)
    assert offsets_read(batches) == [20, 21]
    # Assigned again at the earliest offset: librdkafka refuses a seek() on a partition whose
    # fetch failed out of range ("Local: Erroneous state", seen on Apache Kafka).
    assert consumer.reassigned == [("t", 0, 20)] and consumer.seeks == []


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_an_out_of_range_answer_for_an_offset_kafka_holds_reads_it_again(fail_on_data_loss):
    """Spark's KafkaDataConsumer reads "a disappeared offset" again when it lies between the
    earliest and latest offsets. Taken for deleted records it failed the read, or with
    failOnDataLoss=false skipped the rest of the range: records that exist, lost."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                              "failOnDataLoss": fail_on_data_loss}).reader_config
    consumer = FakeConsumer(
        [[Msg(5)], [Msg(-1001, error=Err(KafkaError.OFFSET_OUT_OF_RANGE))], [Msg(6), Msg(7)], [eof(8)]],
        watermarks=(0, 40),
    )
    batches = read(split(("t", 0, 5, 8)), consumer, settings)
    assert offsets_read(batches) == [5, 6, 7]
    assert consumer.reassigned == [("t", 0, 6)] and consumer.seeks == []


@pytest.mark.parametrize("watermarks, reason", [
    ((-1001, -1001), r"no valid offsets \(answered -1001, -1001\)"),
    (KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get watermark offsets: Local: Timed out")),
     "Timed out"),
])
def test_out_of_range_never_skips_on_offsets_kafka_did_not_give(watermarks, reason):
    """With failOnDataLoss=false an invalid answer (-1001 read as 'earliest') would skip the
    whole rest of the range."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "false"}).reader_config
    consumer = FakeConsumer([[Msg(-1001, error=Err(KafkaError._AUTO_OFFSET_RESET))]], watermarks=watermarks)
    with pytest.raises(KafkaUnavailableError, match=r"offset 5 of t-0 is out of range, and asking Kafka .*pollTimeoutMs "
                                                    r"\(\d+ ms\): .*" + reason):
        read(split(("t", 0, 5, 30)), consumer, settings)
    assert consumer.seeks == []


def test_fatal_error_fails_the_read():
    consumer = FakeConsumer([[Msg(-1001, error=Err(KafkaError._FATAL, fatal=True))]])
    with pytest.raises(KafkaUnavailableError, match="failed at offset 0"):
        read(split(("t", 0, 0, 3)), consumer)


def test_a_fetch_an_acl_refuses_fails_at_once_naming_the_topic_and_the_acl():
    """DESCRIBE without READ: the driver plans the batch, the fetch is refused. Retried, it
    failed after kafkaConsumer.pollTimeoutMs as "no progress ... check kafka.bootstrap.servers"."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.sasl.username": "ingest",
                              "kafka.sasl.password": "s3cret"}).reader_config
    consumer = FakeConsumer([[Msg(-1001, error=Err(KafkaError.TOPIC_AUTHORIZATION_FAILED))]])
    with pytest.raises(AccessRefusedError) as raised:
        read(split(("t", 0, 0, 3)), consumer, settings)
    assert str(raised.value).startswith("authorization refused for topic 't': Kafka at h:1 does not allow principal "
                                        "User:ingest READ on it (Broker: Topic authorization failed). Grant principal "
                                        "User:ingest DESCRIBE and READ on topic 't'")
    assert consumer.closed


def test_columns_follow_sparks_kafka_source():
    """KafkaRecordToRowConverter: NULL headers for a record without any; timestamp types
    CreateTime 0, LogAppendTime 1, none -1."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "includeHeaders": "true"}).reader_config
    consumer = FakeConsumer([[
        Msg(0, key=None, ts=(1, 1_700_000_000_123), headers=[("h", b"x")], partition=4),
        Msg(1, value=None, ts=(2, 5), headers=None, partition=4),
        Msg(2, ts=(0, -1), headers=[], partition=4),
    ], [eof(3, partition=4)]])
    (batch,) = read(split(("t", 4, 0, 3)), consumer, settings)
    rows = batch.to_pylist()
    assert [r["timestampType"] for r in rows] == [0, 1, -1]
    assert rows[0]["timestamp"].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    assert rows[0]["key"] is None and rows[1]["value"] is None
    assert rows[0]["headers"] == [{"key": "h", "value": b"x"}]
    assert rows[1]["headers"] is None and rows[2]["headers"] is None
    assert {r["topic"] for r in rows} == {"t"} and {r["partition"] for r in rows} == {4}
    assert batch.schema == arrow_schema(True)


def test_a_timestamp_beyond_a_spark_timestamp_fails_naming_the_record():
    """Spark fails with KAFKA_MALFORMED_RECORD_TIMESTAMP; a wrapped timestamp is wrong data."""
    consumer = FakeConsumer([[Msg(0), Msg(1, ts=(1, 1_712_345_678_123_456_789))]])
    with pytest.raises(MalformedRecordError, match=r"offset 1 of topic t, partition 0 has timestamp 1712345678123456789 ms"):
        read(split(("t", 0, 0, 2)), consumer)


def test_a_partition_deleted_mid_read_is_data_loss_or_skipped():
    unknown = [[Msg(-1001, error=Err(KafkaError.UNKNOWN_TOPIC_OR_PART))]]

    def gone(script):
        consumer = FakeConsumer(script)
        consumer.topics_present = {}
        return consumer

    with pytest.raises(DataLossError, match=r"t-0 no longer exists; records 2..9 of the batch range \[0, 10\)"):
        read(split(("t", 0, 0, 10)), gone([[Msg(0), Msg(1)]] + unknown))
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "false"}).reader_config
    batches = read(split(("t", 0, 0, 10)), gone([[Msg(0), Msg(1)]] + unknown), settings)
    assert offsets_read(batches) == [0, 1]


def test_an_unknown_topic_error_that_metadata_does_not_confirm_is_transient():
    glitch = [[Msg(-1001, error=Err(KafkaError.UNKNOWN_TOPIC_OR_PART))]]
    batches = read(split(("t", 0, 0, 3)), FakeConsumer([[Msg(0)]] + glitch + [[Msg(1), Msg(2)]]))
    assert offsets_read(batches) == [0, 1, 2]


def test_a_topic_error_other_than_unknown_topic_in_metadata_is_not_a_deletion():
    """A topic with "leader not available" in the metadata answer (a broker back from a pause,
    a leader election) still exists: read as deleted, it failed the read as data loss."""
    from types import SimpleNamespace

    clock = FakeClock()
    unknown = [[Msg(-1001, error=Err(KafkaError.UNKNOWN_TOPIC_OR_PART))]]
    consumer = FakeConsumer([[Msg(0)]] + unknown + [[], [Msg(1), Msg(2)]], clock=clock)
    consumer.topics_present = {"t": SimpleNamespace(error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE), partitions={})}
    batches = read(split(("t", 0, 0, 3)), consumer, clock=clock)
    assert offsets_read(batches) == [0, 1, 2]


def test_a_deleted_partition_is_noticed_even_without_an_error_from_the_client():
    clock = FakeClock()
    consumer = FakeConsumer([[Msg(0)]], clock=clock)
    consumer.topics_present = {}  # metadata no longer lists the topic
    with pytest.raises(DataLossError, match="t-0 no longer exists"):
        read(split(("t", 0, 0, 5)), consumer, clock=clock)


def test_small_ranges_fetch_less_and_a_users_setting_wins():
    consumer = FakeConsumer([[Msg(0)]])
    read(split(("t", 0, 0, 1)), consumer)
    assert consumer.config["max.partition.fetch.bytes"] == 65_536
    consumer = FakeConsumer([[Msg(0)], [eof(5_000)]])
    read(split(("t", 0, 0, 5_000)), consumer)
    assert consumer.config["max.partition.fetch.bytes"] == 1_048_576
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                              "kafka.max.partition.fetch.bytes": "2000000"}).reader_config
    consumer = FakeConsumer([[Msg(0)]])
    read(split(("t", 0, 0, 1)), consumer, settings)
    assert consumer.config["max.partition.fetch.bytes"] == "2000000"


def test_a_catch_up_range_of_known_bytes_fetches_more_per_request_up_to_4_mib():
    # 8,000 records of 4 KB: 32 MB expected; the record rule alone stops at 1 MiB.
    large = [KafkaRange("t", 0, 0, 8_000), KafkaRange("t", 1, 0, 100)]
    assert fetch_bytes(large) == 1_048_576
    assert fetch_bytes(large, bytes_per_offset=4_000) == 4 << 20
    # 1,500 records of 1 KB: 1.5 MB, the power of two that holds it.
    assert fetch_bytes([KafkaRange("t", 0, 0, 1_500)], bytes_per_offset=1_000) == 2 << 20
    # Small records never fetch less than the record rule gives.
    assert fetch_bytes([KafkaRange("t", 0, 0, 5_000)], bytes_per_offset=100) == 1_048_576
    assert fetch_bytes([KafkaRange("t", 0, 0, 10)], bytes_per_offset=100) == 65_536


def test_the_reader_asks_for_the_fetch_size_of_its_splits_measured_bytes():
    consumer = FakeConsumer([[Msg(0)], [eof(8_000)]])
    read(KafkaSplit((KafkaRange("t", 0, 0, 8_000),), "src", bytes_per_offset=4_000.0), consumer)
    assert consumer.config["max.partition.fetch.bytes"] == 4 << 20


# ----------------------------------------------------------------------- the BacklogFinishEvent

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
    return list(read_split(split, SETTINGS, pool=ConsumerPool(consumer_of(script, partition), capacity=0), publish_event=publish))


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
        split, SETTINGS, pool=ConsumerPool(consumer_of([[Msg(0), Msg(1)], [Msg(2), Msg(3)]], 4), capacity=0),
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
        list(read_split(split, SETTINGS, pool=ConsumerPool(failing, capacity=0), publish_event=lambda s, e: True))
    exporter.flush()
    [span] = receiver.spans
    assert span["status"] == "error" and span["events"] == []


def test_each_arrow_batch_is_bounded_in_bytes_whatever_the_record_size():
    """64 KiB values: the first call asks for 256 messages (no size known yet), the next ones
    for as many as fit ARROW_BATCH_BYTES (32 MiB: 511 rows of ~64 KiB with the other columns)."""
    big = b"v" * (64 << 10)
    script, offset = [], 0
    for count in (256, 511, 233):
        script.append([Msg(o, value=big) for o in range(offset, offset + count)])
        offset += count
    consumer = FakeConsumer(script)
    batches = read(split(("t", 0, 0, 1_000)), consumer)
    assert offsets_read(batches) == list(range(1_000))
    assert consumer.asked == [256, 511, 233]
    assert max(b.nbytes for b in batches) <= (32 << 20) + (64 << 10)


def test_small_records_are_still_read_ten_thousand_per_call():
    script = [[Msg(o) for o in range(0, 256)], [Msg(o) for o in range(256, 10_256)], [Msg(o) for o in range(10_256, 12_000)]]
    consumer = FakeConsumer(script)
    assert len(offsets_read(read(split(("t", 0, 0, 12_000)), consumer))) == 12_000
    assert consumer.asked == [256, 10_000, 1_744]


# ----------------------------------------------------------------------- the RecordSizesReport


def test_a_catch_up_split_reports_what_it_read_before_its_last_batch_is_handed_over():
    """Keys, values and header keys and values, and the offsets spanned, gaps included (offsets
    1-3 of partition 1 hold no record: transaction markers, compaction): the next batch is
    planned from them."""
    published = []
    config = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "includeHeaders": "true"}).reader_config
    ranges = (KafkaRange("t", 0, 0, 3), KafkaRange("t", 1, 0, 5))
    script = [[Msg(0, b"v" * 10, partition=0), Msg(1, b"v" * 20, key=None, partition=0)],
              [Msg(2, b"", headers=[("h", b"xyz")], partition=0), Msg(0, b"w" * 100, partition=1)],
              [Msg(4, b"w" * 50, partition=1), eof(5, partition=1)]]
    batches = read_split(KafkaSplit(ranges, "src-r", bytes_per_offset=100.0), config,
                         pool=ConsumerPool(FakeConsumer(script), capacity=0),
                         publish_event=lambda settings, event: published.append(event) or True)
    next(batches), next(batches)
    assert published == []
    next(batches)  # the last batch: the report is already out
    [report] = published
    key_bytes = 1 * 4  # b"k" on every record but one
    assert report.source_id == "src-r"
    assert dict(report.topics) == {"t": TopicSizes(10 + 20 + (1 + 3) + 100 + 50 + key_bytes, 3 + 5)}
    assert list(batches) == []


def test_no_report_outside_catch_up_batches():
    published = []
    ranges = (KafkaRange("t", 0, 0, 1), KafkaRange("t", 1, 0, 1))
    script = [[Msg(0, partition=0), Msg(0, partition=1)]]
    list(read_split(KafkaSplit(ranges, "src-s"), SETTINGS,
                    pool=ConsumerPool(FakeConsumer(script), capacity=0),
                    publish_event=lambda settings, event: published.append(event) or True))
    assert published == []


def test_a_split_over_several_topics_reports_each_topics_own_bytes_and_offsets():
    """Small ranges of several topics share a task: its report splits what it read by topic,
    even when one fetch interleaves the topics, so no topic is planned from another's sizes."""
    published = []
    ranges = (KafkaRange("small", 0, 0, 3), KafkaRange("large", 0, 10, 12), KafkaRange("small", 1, 0, 2))
    script = [[Msg(0, b"s" * 10, topic="small", partition=0), Msg(10, b"L" * 5_000, topic="large", partition=0),
               Msg(1, b"s" * 10, topic="small", partition=0), Msg(0, b"s" * 20, topic="small", partition=1)],
              [Msg(11, b"L" * 7_000, key=None, topic="large", partition=0), Msg(1, b"s" * 20, topic="small", partition=1),
               eof(3, topic="small", partition=0)]]
    list(read_split(KafkaSplit(ranges, "src-m", bytes_per_offset=100.0), SETTINGS,
                    pool=ConsumerPool(FakeConsumer(script), capacity=0),
                    publish_event=lambda settings, event: published.append(event) or True))
    [report] = published
    key = 1  # b"k" on every record but one
    assert dict(report.topics) == {"small": TopicSizes(10 + 10 + 20 + 20 + 4 * key, 3 + 2),
                                   "large": TopicSizes(5_000 + 7_000 + key, 2)}


def test_a_split_over_several_topics_counts_the_batches_read_after_one_topic_is_done():
    """Once only one range is left, its batches carry the topic as one repeated value."""
    published = []
    ranges = (KafkaRange("small", 0, 0, 1), KafkaRange("large", 0, 0, 3))
    script = [[Msg(0, b"s" * 10, topic="small"), Msg(0, b"L" * 1_000, topic="large")],
              [Msg(1, b"L" * 2_000, topic="large"), Msg(2, b"L" * 3_000, topic="large")]]
    list(read_split(KafkaSplit(ranges, "src-o", bytes_per_offset=100.0), SETTINGS,
                    pool=ConsumerPool(FakeConsumer(script), capacity=0),
                    publish_event=lambda settings, event: published.append(event) or True))
    [report] = published
    assert dict(report.topics) == {"small": TopicSizes(10 + 1, 1), "large": TopicSizes(6_000 + 3, 3)}


def test_a_split_over_several_topics_reports_nothing_when_one_topic_lost_records_to_retention():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t,u",
                              "failOnDataLoss": "false"}).reader_config
    consumer = FakeConsumer([[Msg(0, topic="u", partition=1), Msg(-1001, error=Err(KafkaError._AUTO_OFFSET_RESET))],
                             [Msg(20), Msg(21)], [eof(22)]], watermarks=(20, 22))
    published = []
    ranges = (KafkaRange("t", 0, 5, 22), KafkaRange("u", 1, 0, 1))
    batches = list(read_split(KafkaSplit(ranges, "src-l", bytes_per_offset=100.0), settings,
                              pool=ConsumerPool(consumer, capacity=0),
                              publish_event=lambda config, event: published.append(event) or True))
    assert sorted(offsets_read(batches)) == [0, 20, 21] and published == []


def test_a_split_that_skipped_records_lost_to_retention_reports_nothing():
    """Offsets 5-19 were deleted before they were read (``failOnDataLoss=false``): counted as
    spanned without their bytes, they would make records look 15 times smaller than they
    are, and the next catch-up batch as much larger than its budget."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "false"}).reader_config
    consumer = FakeConsumer(
        [[Msg(-1001, error=Err(KafkaError._AUTO_OFFSET_RESET))], [Msg(20), Msg(21)], [eof(22)]], watermarks=(20, 22)
    )
    published = []
    batches = list(read_split(KafkaSplit((KafkaRange("t", 0, 5, 22),), "src-l", bytes_per_offset=100.0), settings,
                              pool=ConsumerPool(consumer, capacity=0),
                              publish_event=lambda config, event: published.append(event) or True))
    assert offsets_read(batches) == [20, 21] and published == []


class _CountedRange(KafkaRange):
    """A range that counts how often the reader asks for its bucket."""

    asked = 0

    @property
    def bucket(self):
        _CountedRange.asked += 1
        return super().bucket


def test_a_task_of_ten_thousand_small_ranges_costs_what_each_step_moved_not_every_range_per_step():
    """Three records in each of 10,000 partitions, a hundred messages per consume(): every
    record once, and each range looked at a few times, not at each of the 300 steps (which
    was 4.5 million looks, seconds of a task)."""
    ranges = [_CountedRange("t", p, 0, 3) for p in range(10_000)]
    messages = [Msg(o, partition=p) for p in range(10_000) for o in range(3)]
    consumer = FakeConsumer([messages[i:i + 100] for i in range(0, len(messages), 100)])
    s = KafkaSplit(tuple(ranges))
    _CountedRange.asked = 0
    batches = read(s, consumer)
    assert sum(b.num_rows for b in batches) == 30_000 and len(consumer.paused) == 10_000
    assert _CountedRange.asked <= 5 * len(ranges)


# ----------------------------------------------------------------------- a split whose readers do not publish


def test_a_split_the_driver_marked_not_to_publish_publishes_nothing_and_still_exports_its_read_span(otel_env,
                                                                                                   receiver):
    """The driver found the control topic refused (or off): a task tries no write the cluster
    would refuse, neither the finish event nor the size report, and its span is unchanged."""
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    published = []
    silent = KafkaSplit((KafkaRange("t", 7, 0, 4, 3, BUCKET_SPAN),), "src-silent", bytes_per_offset=100.0,
                        publish_events=False)
    batches = read_split(silent, SETTINGS, pool=ConsumerPool(consumer_of([[Msg(0), Msg(1)], [Msg(2), Msg(3)]], 7),
                                                            capacity=0),
                         publish_event=lambda settings, event: published.append(event) or True)
    assert offsets_read(list(batches)) == [0, 1, 2, 3]
    assert published == []
    [span] = receiver.spans
    assert span["name"] == "backlog.read" and [e["name"] for e in span["events"]] == ["backlog.boundary_reached"]
    # The same split marked to publish: its finish event and its size report.
    run(replace(silent, publish_events=True), [[Msg(0), Msg(1)], [Msg(2), Msg(3)]], published)
    assert sorted(type(e).__name__ for e in published) == ["BacklogFinishEvent", "RecordSizesReport"]
