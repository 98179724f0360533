"""Kafka records to Arrow, as Spark's Kafka source builds its rows (KafkaRecordToRowConverter)."""

import datetime as dt

import pyarrow as pa
import pytest

from backlog_source.core.errors import MalformedRecordError
from backlog_source.core.schema import arrow_schema
from backlog_source.enumerator.record_sizes import record_bytes
from backlog_source.reader import arrow
from backlog_source.reader.arrow import binary_column, data_bytes, data_bytes_by_topic, to_record_batch
from tests.fakes import Msg

UTC = dt.timezone.utc


def test_columns_follow_the_output_schema_with_and_without_headers():
    messages = [Msg(7, key=b"k", value=b"v", ts=(1, 1_700_000_000_123), partition=3, topic="orders")]
    assert to_record_batch(messages, "orders", 3, False).schema == arrow_schema(False)
    batch = to_record_batch(messages, "orders", 3, True)
    assert batch.schema == arrow_schema(True)
    assert batch.to_pylist() == [{
        "key": b"k", "value": b"v", "topic": "orders", "partition": 3, "offset": 7,
        "timestamp": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC), "timestampType": 0, "headers": None,
    }]


@pytest.mark.parametrize("items", [
    [b"a", b"", b"ccc" * 1000, bytes(range(256))],  # no null: joined
    [None, None, None],  # all null
    [b"a", None, b""],  # some null
    [],
    [b""],
    [b"v" * 100] * 1_000,
    [b"v" * 4_000] * 999 + [None],  # large values, a null the sample misses
], ids=["no-null", "all-null", "some-null", "empty", "one-empty-value", "small", "large-one-null"])
def test_a_binary_column_is_what_pyarrow_builds(items):
    column = binary_column(items)
    expected = pa.array(items, pa.binary())
    assert column.type == pa.binary() and column.equals(expected)
    assert column.to_pylist() == items and column.null_count == expected.null_count
    # What the byte budget counts reads the offsets buffer: the same for both.
    assert data_bytes(pa.RecordBatch.from_arrays([column, column], ["k", "v"])) == 2 * sum(len(i or b"") for i in items)


def test_a_string_column_is_what_pyarrow_builds_from_the_strings():
    topics = ["orders", "clicks", "orders"]
    column = binary_column([topic.encode() for topic in topics], pa.string())
    assert column.equals(pa.array(topics, pa.string()))


def test_keys_or_values_past_what_a_binary_column_holds_fail_the_read_clearly(monkeypatch):
    monkeypatch.setattr(arrow, "_INT32_MAX", 10)  # 2 GiB in a unit test: the same check, smaller
    assert binary_column([b"v" * 5, b"v" * 5]).to_pylist() == [b"v" * 5] * 2
    with pytest.raises(ValueError, match="11 bytes of keys or values in one Arrow batch of 2 records: more than a "
                                         r"binary column holds \(2 GiB\)"):
        binary_column([b"v" * 5, b"v" * 6])


@pytest.mark.parametrize("headers", [
    [None, [], [("a", b"1")]],
    [[("a", b"1"), ("b", None)], [("c", b"")], None],
    [None, None],
    [[("k", None)]] * 3,
], ids=["null-empty-one", "null-value-last-null", "all-null", "only-null-values"])
def test_a_header_column_is_what_pyarrow_builds(headers):
    messages = [Msg(offset, headers=h) for offset, h in enumerate(headers)]
    column = to_record_batch(messages, "t", 0, include_headers=True).column("headers")
    expected = pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
                        arrow_schema(True).field("headers").type)
    assert column.equals(expected) and column.null_count == expected.null_count


def test_null_keys_and_values_stay_null():
    rows = to_record_batch([Msg(0, key=None, value=None)], "t", 0, False).to_pylist()
    assert rows[0]["key"] is None and rows[0]["value"] is None


@pytest.mark.parametrize("librdkafka_type, spark_type", [(0, -1), (1, 0), (2, 1)])
def test_timestamp_types_are_kafkas_ids_as_spark_reports_them(librdkafka_type, spark_type):
    # librdkafka: NOT_AVAILABLE 0, CREATE_TIME 1, LOG_APPEND_TIME 2; Kafka/Spark: -1, 0, 1.
    rows = to_record_batch([Msg(0, ts=(librdkafka_type, 5))], "t", 0, False).to_pylist()
    assert rows[0]["timestampType"] == spark_type


def test_headers_keep_their_order_duplicates_and_null_values():
    headers = [("a", b"1"), ("a", b"2"), ("b", None)]
    rows = to_record_batch([Msg(0, headers=headers), Msg(1, headers=[])], "t", 0, True).to_pylist()
    assert rows[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "a", "value": b"2"}, {"key": "b", "value": None}]
    assert rows[1]["headers"] is None  # no headers at all: NULL, as Spark gives


def test_records_of_several_buckets_take_topic_and_partition_from_each_record():
    messages = [Msg(0, topic="a", partition=1), Msg(5, topic="b", partition=0)]
    rows = to_record_batch(messages, None, None, False).to_pylist()
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [("a", 1, 0), ("b", 0, 5)]


def test_a_timestamp_beyond_what_spark_holds_names_the_record():
    messages = [Msg(0, ts=(1, 5)), Msg(1, ts=(1, 2**62), partition=2, topic="clicks")]
    with pytest.raises(MalformedRecordError, match="record at offset 1 of topic clicks, partition 2 has timestamp "
                                                   f"{2**62} ms, beyond what a Spark timestamp holds"):
        to_record_batch(messages, None, None, False)


def test_the_largest_millisecond_timestamp_spark_holds_is_kept():
    largest_ms = (2**63 - 1) // 1000
    rows = to_record_batch([Msg(0, ts=(1, largest_ms)), Msg(1, ts=(1, -largest_ms))], "t", 0, False)
    assert rows.column("timestamp").cast("int64").to_pylist() == [largest_ms * 1000, -largest_ms * 1000]


def test_offsets_of_one_bucket_keep_the_gaps_compaction_and_transactions_leave():
    messages = [Msg(3), Msg(4), Msg(7), Msg(8)]
    assert to_record_batch(messages, "t", 0, False).column("offset").to_pylist() == [3, 4, 7, 8]


def test_offsets_without_gaps_are_each_records_own():
    messages = [Msg(offset) for offset in range(10, 15)]
    assert to_record_batch(messages, "t", 0, False).column("offset").to_pylist() == [10, 11, 12, 13, 14]


def test_offsets_of_several_buckets_are_read_per_record_even_when_they_look_contiguous():
    # 0, 1 of one partition then 2 of another: the range 0..2 would be right by accident only.
    messages = [Msg(5, partition=0), Msg(6, partition=1), Msg(9, partition=0)]
    assert to_record_batch(messages, None, None, False).column("offset").to_pylist() == [5, 6, 9]


def test_data_bytes_counts_keys_values_and_headers_as_the_byte_budget_does():
    messages = [Msg(0, b"v" * 7, key=None), Msg(1, None, key=b"kk", headers=[("h1", b"abc"), ("h2", None)]),
                Msg(2, b"x" * 1000, headers=[])]
    batch = to_record_batch(messages, "t", 0, include_headers=True)
    assert data_bytes(batch) == sum(map(record_bytes, messages)) == 7 + 2 + (2 + 3 + 2) + 1000 + 1
    assert data_bytes(batch.slice(1, 1)) == record_bytes(messages[1])
    without = to_record_batch(messages, "t", 0, include_headers=False)
    assert data_bytes(without) == sum(record_bytes(m, include_headers=False) for m in messages) == 7 + 2 + 1000 + 1


def test_data_bytes_by_topic_counts_each_run_of_a_topic_in_a_batch_of_several():
    messages = [Msg(0, b"a" * 5, topic="x", partition=0), Msg(0, b"b" * 70, topic="y", partition=1),
                Msg(1, b"c" * 9, topic="x", partition=0, headers=[("h", b"12")]), Msg(1, None, topic="x", partition=1)]
    batch = to_record_batch(messages, None, None, include_headers=True)
    by_topic = data_bytes_by_topic(batch)
    assert by_topic == {"x": sum(record_bytes(m) for m in messages if m.topic() == "x"),
                        "y": record_bytes(messages[1])}
    assert sum(by_topic.values()) == data_bytes(batch)
    assert data_bytes_by_topic(batch.slice(1, 2)) == {"y": record_bytes(messages[1]), "x": record_bytes(messages[2])}
    assert data_bytes_by_topic(batch.slice(0, 0)) == {}
