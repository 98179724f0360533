"""Batch reads, ``spark.read.format("backlog")``, beside ``spark.read.format("kafka")`` on the
same Apache Kafka topics with the same options: the same rows, every column, or both fail.

Hypothesis draws the offsets JSON (specific offsets, -2 and -1 where Spark allows them, and
where it refuses them; offsets past the log end, and below the earliest offset after
DeleteRecords, under either ``failOnDataLoss``), ``minPartitions`` /
``maxRecordsPerPartition``; fixed cases cover the timestamp forms, ``includeHeaders``,
patterns with and without anchors, topics and partitions that do not exist. CI runs a fixed
number of examples on a fixed seed. ``BACKLOG_SOURCE_SIDE_BY_SIDE_EXAMPLES`` runs more.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backlog_source.demo.topics import create_topic
from tests.integration.differential import BASE_TS, batch_read, both, delete_records_before, fill_counts

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("BACKLOG_SOURCE_SIDE_BY_SIDE_EXAMPLES", "6"))


def test_a_batch_read_reads_what_sparks_batch_read_reads(spark, broker, topic_name):
    create_topic(broker.bootstrap_servers, topic_name, 3)
    fill_counts(broker.bootstrap_servers, topic_name, [20, 0, 7], headers=[("h", b"1")])
    cases = [
        {},
        {"startingOffsets": json.dumps({topic_name: {"0": 5, "1": -2, "2": -2}}),
         "endingOffsets": json.dumps({topic_name: {"0": 15, "1": -1, "2": -1}})},
        {"startingTimestamp": str(BASE_TS + 3_000), "endingTimestamp": str(BASE_TS + 10_000),
         "startingOffsetsByTimestampStrategy": "latest"},
        {"startingTimestamp": str(BASE_TS + 3_000)},  # partition 1 has no record: both fail (strategy error)
        {"minPartitions": "4", "includeHeaders": "true"},
    ]
    for options in cases:
        kafka, backlog = both(spark, broker, {"subscribe": topic_name, **options})
        if isinstance(kafka, str):
            assert isinstance(backlog, str), (options, kafka, backlog)
            continue
        assert backlog == kafka, options
    kafka, backlog = both(spark, broker, {"subscribe": topic_name})
    assert len(backlog) == 27


def test_a_batch_read_on_its_own_reads_every_column_as_produced(spark, broker, topic_name):
    """The batch path (``DataSourceReader``) with no ``format("kafka")`` to compare with: the
    newest PySpark's run (``make test-newest-spark``) has no Spark connector of its version,
    so this checks the rows against what was produced, every column and the headers."""
    create_topic(broker.bootstrap_servers, topic_name, 2)
    fill_counts(broker.bootstrap_servers, topic_name, [9, 4], headers=[("h", b"1")])
    rows = batch_read(spark, "backlog", broker.bootstrap_servers,
                      {"subscribe": topic_name, "includeHeaders": "true", "minPartitions": "3",
                       "startingOffsets": json.dumps({topic_name: {"0": 2, "1": -2}})})
    assert not isinstance(rows, str), rows
    expected = [(f"k{n}".encode(), None if n % 7 == 3 else f"{p}-{n}".encode(), topic_name, p, n,
                 datetime.fromtimestamp((BASE_TS + n * 1000) / 1000), 0, (("h", b"1"),))
                for p, first, count in ((0, 2, 9), (1, 0, 4)) for n in range(first, count)]
    assert rows == expected


@pytest.mark.parametrize("options, ours", [
    ({"startingOffsets": "latest"}, "can't be 'latest' for a batch read"),
    ({"endingOffsets": "earliest"}, "can't be 'earliest' for a batch read"),
    ({"startingOffsets": "JSON:-1"}, "can't be -1 (latest) for a batch read"),
    ({"endingOffsets": "JSON:-2"}, "can't be -2 (earliest) for a batch read"),
])
def test_what_sparks_batch_read_refuses_is_refused(spark, broker, topic_name, options, ours):
    create_topic(broker.bootstrap_servers, topic_name, 1)
    fill_counts(broker.bootstrap_servers, topic_name, [3])
    options = {k: (json.dumps({topic_name: {"0": int(v[5:])}}) if v.startswith("JSON:") else v) for k, v in options.items()}
    kafka, backlog = both(spark, broker, {"subscribe": topic_name, **options})
    assert isinstance(kafka, str) and isinstance(backlog, str), (kafka, backlog)
    assert ours in backlog, backlog


def test_a_pattern_selects_the_topics_sparks_pattern_selects(spark, broker):
    prefix = f"p{uuid.uuid4().hex[:8]}"
    for suffix in ("_t1", "_t2", "_t1x", "_u1"):
        create_topic(broker.bootstrap_servers, prefix + suffix, 1)
        fill_counts(broker.bootstrap_servers, prefix + suffix, [2])
    for pattern in (f"{prefix}_t[0-9]+", f"^{prefix}_t[0-9]+$", f"{prefix}_(t|u)1"):
        kafka, backlog = both(spark, broker, {"subscribePattern": pattern})
        assert not isinstance(kafka, str), kafka
        assert backlog == kafka, pattern
        assert {r[2] for r in backlog} <= {prefix + s for s in ("_t1", "_t2", "_t1x", "_u1")}


#: Spark's executor waits this long at a log end before it finds the offsets out of range
#: (``KafkaDataConsumer.fetch``); its default, 120 s, would make each such case two minutes.
POLL_TIMEOUT_MS = "5000"


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_topic_that_does_not_exist_fails_the_read_as_in_spark(spark, broker, topic_name, fail_on_data_loss):
    """`SubscribeStrategy` / `AssignStrategy.assignedTopicPartitions` describe the topics, and
    Kafka answers UnknownTopicOrPartition: Spark's read fails, under either failOnDataLoss. A
    backfill with a typo in a topic name must not read nothing without a word."""
    create_topic(broker.bootstrap_servers, topic_name, 1)
    fill_counts(broker.bootstrap_servers, topic_name, [3])
    missing = f"{topic_name}-typo"
    common = {"failOnDataLoss": fail_on_data_loss, "fetchOffset.retryIntervalMs": "10"}
    for options, option in (({"subscribe": f"{topic_name},{missing}"}, "subscribe"),
                            ({"assign": json.dumps({topic_name: [0], missing: [0]})}, "assign")):
        kafka, backlog = both(spark, broker, {**options, **common})
        assert isinstance(kafka, str), f"Spark's read did not fail: {kafka}"
        assert isinstance(backlog, str), f"ours did not fail: {backlog}"
        assert f"option '{option}' names topic(s) that do not exist: {missing}" in backlog, backlog


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_ranges_below_the_earliest_offset_after_delete_records(spark, broker, topic_name, fail_on_data_loss):
    """`KafkaDataConsumer.get` meets an offset below the earliest one: under failOnDataLoss=true
    both fail; under false both read what is left of each range (nothing of a range wholly
    below it: `getEarliestAvailableOffsetBetween`) and the other partitions whole."""
    create_topic(broker.bootstrap_servers, topic_name, 3)
    fill_counts(broker.bootstrap_servers, topic_name, [30, 30, 10])
    delete_records_before(broker, topic_name, {0: 25, 1: 25})
    options = {"subscribe": topic_name, "failOnDataLoss": fail_on_data_loss,
               "startingOffsets": json.dumps({topic_name: {"0": 10, "1": 10, "2": 0}}),
               "endingOffsets": json.dumps({topic_name: {"0": 20, "1": 28, "2": -1}})}
    kafka, backlog = both(spark, broker, options)
    if fail_on_data_loss == "true":
        assert isinstance(kafka, str) and isinstance(backlog, str), (kafka, backlog)
        assert f"{topic_name}-0 records 10..19" in backlog and "earliest available offset 25" in backlog, backlog
        return
    assert not isinstance(kafka, str), kafka
    assert backlog == kafka
    assert {(r[3], r[4]) for r in backlog} == {(1, o) for o in range(25, 28)} | {(2, o) for o in range(10)}


def test_ranges_beyond_the_log_end(spark, broker, topic_name):
    """`KafkaDataConsumer.fetch` answers out of range at the log end: under
    failOnDataLoss=false Spark reads up to it, and skips a range that starts beyond it
    (`getEarliestAvailableOffsetBetween`); under true it fails. An empty range is never
    read (`KafkaSourceRDD.compute`), wherever it is."""
    create_topic(broker.bootstrap_servers, topic_name, 2)
    fill_counts(broker.bootstrap_servers, topic_name, [10, 6])
    common = {"subscribe": topic_name, "kafkaConsumer.pollTimeoutMs": POLL_TIMEOUT_MS}

    def offsets(p0, p1):
        return json.dumps({topic_name: {"0": p0, "1": p1}})

    cases = [
        ({"failOnDataLoss": "false", "endingOffsets": offsets(15, -1)},
         {(0, o) for o in range(10)} | {(1, o) for o in range(6)}),
        ({"failOnDataLoss": "false", "startingOffsets": offsets(12, 2), "endingOffsets": offsets(14, -1)},
         {(1, o) for o in range(2, 6)}),
        ({"startingOffsets": offsets(12, 0), "endingOffsets": offsets(12, 3)}, {(1, o) for o in range(3)}),
    ]
    for options, read in cases:
        kafka, backlog = both(spark, broker, {**common, **options})
        assert not isinstance(kafka, str), (options, kafka)
        assert backlog == kafka, options
        assert {(r[3], r[4]) for r in backlog} == read, options
    kafka, backlog = both(spark, broker, {**common, "endingOffsets": offsets(15, -1)})
    assert isinstance(kafka, str) and isinstance(backlog, str), (kafka, backlog)
    assert f"{topic_name}-0 records 10..14 (log end 10)" in backlog and "failOnDataLoss=false" in backlog, backlog


def test_an_assigned_partition_that_does_not_exist(spark, broker, topic_name):
    """`AssignStrategy` keeps the partitions a topic has: Spark reads the others. So does
    ours under failOnDataLoss=false, with a warning; under true it fails naming the
    partition (README, "Differences")."""
    create_topic(broker.bootstrap_servers, topic_name, 2)
    fill_counts(broker.bootstrap_servers, topic_name, [4, 3])
    assign = {"assign": json.dumps({topic_name: [1, 5]})}
    kafka, backlog = both(spark, broker, {**assign, "failOnDataLoss": "false"})
    assert not isinstance(kafka, str), kafka
    assert backlog == kafka and {(r[3], r[4]) for r in backlog} == {(1, o) for o in range(3)}
    kafka, backlog = both(spark, broker, assign)
    assert not isinstance(kafka, str) and len(kafka) == 3, kafka
    assert isinstance(backlog, str) and f"option 'assign' names partition(s) that do not exist: {topic_name}-5" in backlog


@st.composite
def ranges(draw):
    """A topic's record counts, the records deleted from the front of each partition
    (DeleteRecords), and offsets up to two past each log end, under either failOnDataLoss."""
    counts = [draw(st.integers(0, 12)) for _ in range(draw(st.integers(1, 3)))]
    deleted = [draw(st.sampled_from([0, 0, n // 2])) for n in counts]
    start = {str(p): draw(st.sampled_from([-2, *range(0, n + 3)])) for p, n in enumerate(counts)}
    end = {str(p): draw(st.sampled_from([-1, *range(0, n + 3)])) for p, n in enumerate(counts)}
    options = {"startingOffsets": start, "endingOffsets": end,
               "failOnDataLoss": draw(st.sampled_from(["true", "false"])),
               "kafkaConsumer.pollTimeoutMs": POLL_TIMEOUT_MS}
    if draw(st.booleans()):
        options["minPartitions"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        options["maxRecordsPerPartition"] = draw(st.integers(1, 5))
    return counts, deleted, options


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=ranges())
def test_generated_offset_ranges_read_alike_or_fail_alike(spark, broker, case):
    counts, deleted, drawn = case
    topic = f"b-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap_servers, topic, len(counts))
    fill_counts(broker.bootstrap_servers, topic, counts)
    if any(deleted):
        delete_records_before(broker, topic, {p: n for p, n in enumerate(deleted) if n})
    options = {"subscribe": topic, **{k: (json.dumps({topic: v}) if isinstance(v, dict) else str(v))
                                      for k, v in drawn.items()}}
    kafka, backlog = both(spark, broker, options)
    if isinstance(kafka, str) or isinstance(backlog, str):
        assert isinstance(kafka, str) and isinstance(backlog, str), f"only one failed for {options}: {kafka} / {backlog}"
        return
    assert backlog == kafka, options
