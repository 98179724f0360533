"""The drop-in source against Apache Kafka and a real local[2] SparkSession."""

from __future__ import annotations

import json
import threading
from datetime import datetime

import pytest
from pyspark.errors import PySparkException
from pyspark.sql.utils import AnalysisException

from tests.integration.helpers import (
    fill,
    log_end_offsets,
    make_topic,
    reader,
    start_memory,
    start_query,
    wait_for,
    wait_for_progress,
)
from tests.support.topics import delete_topic

pytestmark = pytest.mark.integration

SPARK_KAFKA_SCHEMA = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]


def test_schema_is_sparks_kafka_schema(spark, broker, topic_name):
    make_topic(broker, topic_name, 1)
    df = reader(spark, broker, subscribe=topic_name)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == SPARK_KAFKA_SCHEMA
    with_headers = reader(spark, broker, subscribe=topic_name, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in with_headers.schema.fields] == SPARK_KAFKA_SCHEMA + [
        ("headers", "array<struct<key:string,value:binary>>")
    ]


def test_bad_option_fails_at_load_with_its_message(spark, broker):
    with pytest.raises((AnalysisException, PySparkException)) as raised:
        reader(spark, broker, subscribe="x", maxOffsetsPerTrigger="lots")
    assert "option 'maxOffsetsPerTrigger' must be a whole number, got 'lots'" in str(raised.value)


def test_available_now_with_max_offsets_reads_exactly_the_captured_end(spark, broker, topic_name, tmp_path):
    produced = make_topic(broker, topic_name, 3, per_partition=2_000)
    captured = log_end_offsets(broker, topic_name)
    late_writes = []

    def during_batch(batch_df, batch_id):
        # Records produced after the query started must not be read by this AvailableNow run.
        if batch_id == 0:
            late_writes.append(fill(broker, topic_name, 3, 500, start=10_000))
        batch_df.write.mode("append").parquet(str(tmp_path / "out"))

    query = start_query(
        reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=1_500, includeHeaders="true")
        .writeStream.foreachBatch(during_batch)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "out")).select("partition", "offset").collect()
    assert late_writes, "the test did not produce during the run"
    assert len(rows) == produced
    assert {(r.partition, r.offset) for r in rows} == {(p, o) for p, end in captured.items() for o in range(end)}
    sizes = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    assert max(sizes) <= 1_500 and sum(sizes) == produced
    last = query.recentProgress[-1].sources[0]
    assert json.loads(last.latestOffset)[topic_name] == {str(p): o for p, o in log_end_offsets(broker, topic_name).items()}


def test_exactly_once_across_a_restart_under_live_traffic(spark, broker, topic_name, tmp_path):
    """200k records over 4 partitions; stopped mid-stream and restarted from the checkpoint
    while a producer keeps writing: every (partition, offset) lands exactly once."""
    make_topic(broker, topic_name, 4, per_partition=25_000)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    stop_producing = threading.Event()

    def live_producer():
        n = 25_000
        while n < 50_000 and not stop_producing.is_set():
            fill(broker, topic_name, 4, 1_000, start=n)
            n += 1_000

    def start():
        return start_query(
            reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=30_000)
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="0 seconds")
            .start
        )

    producer = threading.Thread(target=live_producer)
    query = start()
    producer.start()
    wait_for_progress(query, lambda p: p.batchId >= 1 and p.numInputRows > 0, what="two batches")
    query.stop()
    restarted = start()
    producer.join(timeout=180)
    assert not producer.is_alive()
    expected = sum(log_end_offsets(broker, topic_name).values())
    assert expected >= 200_000

    def caught_up():
        progress = restarted.lastProgress
        return progress and progress.sources[0].endOffset and sum(
            json.loads(progress.sources[0].endOffset)["positions"][topic_name].values()
        ) == expected

    wait_for_progress(restarted, lambda p: True, what="first progress after restart")
    wait_for(caught_up, 240, "the restarted query to reach the log end")
    restarted.stop()
    df = spark.read.parquet(out)
    assert df.count() == expected
    assert df.select("partition", "offset").distinct().count() == expected


#: maxTriggerDelay below: long enough to tell a wait from none (a run's triggers come 200 ms
#: apart), short enough not to idle a test (it was 12 s).
DELAY_S = 6


def test_min_offsets_waits_for_enough_records_or_the_delay(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 2)
    table = topic_name.replace("-", "_")
    query = start_memory(
        reader(spark, broker, subscribe=topic_name, minOffsetsPerTrigger=1_000, maxTriggerDelay=f"{DELAY_S}s"), tmp_path,
        table,
    )
    try:
        wait_for_progress(query, lambda p: True, what="the first trigger")
        first_trigger = min(trigger_started_s(p) for p in query.recentProgress)
        fill(broker, topic_name, 2, 5)  # 10 records: below the minimum
        wait_for(lambda: spark.table(table).count() == 10, 60, "the delayed batch")
        # No batch read them before maxTriggerDelay had passed since the run's first trigger
        # (a lower bound: a busy machine can only make it later). 0.5 s for the two clocks.
        early = [(p.batchId, trigger_started_s(p) - first_trigger) for p in query.recentProgress
                 if p.numInputRows and trigger_started_s(p) - first_trigger < DELAY_S - 0.5]
        assert early == [], f"batches ran below minOffsetsPerTrigger before maxTriggerDelay: {early}"
        fill(broker, topic_name, 2, 600)  # enough records: read without waiting for the delay
        wait_for(lambda: spark.table(table).count() == 10 + 1_200, 60, "the batch that met the minimum")
    finally:
        query.stop()


def test_subscribe_pattern_discovers_a_topic_created_mid_run(spark, broker, topic_name, tmp_path):
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    make_topic(broker, first, 2, per_partition=100)
    table = topic_name.replace("-", "_")
    query = start_memory(
        reader(spark, broker, subscribePattern=f"{topic_name}-.*", startingOffsets="earliest"), tmp_path, table
    )
    try:
        wait_for(lambda: spark.table(table).count() == 200, 120, "the first topic")
        make_topic(broker, second, 3, per_partition=50)
        wait_for(lambda: spark.table(table).count() == 200 + 150, 120, "the topic created mid-run, from earliest")
        rows = spark.table(table).where(f"topic = '{second}'").select("partition", "offset").collect()
        assert {(r.partition, r.offset) for r in rows} == {(p, o) for p in range(3) for o in range(50)}
    finally:
        query.stop()


def test_starting_offsets_json_and_timestamps(spark, broker, topic_name, tmp_path):
    old, new = 1_000_000_000_000, 1_600_000_000_000
    make_topic(broker, topic_name, 2)
    fill(broker, topic_name, 2, 10, timestamp_ms=old)  # offsets 0..9
    fill(broker, topic_name, 2, 10, start=10, timestamp_ms=new)  # offsets 10..19

    def offsets(**options):
        name = f"q{abs(hash(json.dumps(options, sort_keys=True)))}"
        query = start_query(
            reader(spark, broker, subscribe=topic_name, **options)
            .writeStream.format("memory").queryName(name).trigger(availableNow=True)
            .option("checkpointLocation", str(tmp_path / name))
            .start
        )
        assert query.awaitTermination(120) and query.exception() is None
        return {(r.partition, r.offset) for r in spark.table(name).collect()}

    by_json = offsets(startingOffsets=json.dumps({topic_name: {"0": 15, "1": -2}}))
    assert by_json == {(0, o) for o in range(15, 20)} | {(1, o) for o in range(20)}
    # Kafka answers a timestamp with the first offset whose timestamp is at or after it:
    # offset 10, where the newer records begin, in both partitions.
    assert _offsets_for_timestamp(broker, topic_name, new - 1) == {0: 10, 1: 10}
    by_timestamp = offsets(startingTimestamp=new - 1, startingOffsets="earliest")
    assert by_timestamp == {(p, o) for p in range(2) for o in range(10, 20)}
    per_partition = offsets(startingOffsetsByTimestamp=json.dumps({topic_name: {"0": old, "1": new - 1}}))
    assert per_partition == {(0, o) for o in range(20)} | {(1, o) for o in range(10, 20)}


def _offsets_for_timestamp(broker, topic, timestamp):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.for_timestamp(timestamp) for p in range(2)})
    return {tp.partition: f.result(timeout=10).offset for tp, f in futures.items()}


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_when_a_topic_is_recreated(spark, broker, topic_name, tmp_path, fail_on_data_loss):
    make_topic(broker, topic_name, 1, per_partition=300)
    table = f"loss_{fail_on_data_loss}_{topic_name.replace('-', '_')}"
    query = start_query(
        reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", failOnDataLoss=str(fail_on_data_loss).lower())
        .writeStream.format("memory").queryName(table)
        .trigger(processingTime="200 milliseconds")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start
    )
    try:
        wait_for(lambda: spark.table(table).count() == 300, 120, "the first records")
        delete_topic(broker.bootstrap_servers, topic_name)
        wait_for(lambda: topic_name not in _topics(broker), 30, "the topic deletion")
        make_topic(broker, topic_name, 1, per_partition=20)  # offsets start again at 0
        if fail_on_data_loss:
            wait_for(lambda: query.exception() is not None, 120, "the query to fail")
            message = str(query.exception())
            assert "DataLossError" in message
            # Which rule reports it depends on whether a trigger ran while the topic was gone
            # ("partition ... no longer exist") or only after it was re-created (its topic id
            # changed); on a loaded machine either happens. Both name the topic.
            assert (f"{topic_name}-0 (next offset 300" in message
                    or f"topic(s) {topic_name} (topic id" in message and "re-created" in message), message
        else:
            wait_for(lambda: spark.table(table).count() == 300 + 20, 120, "records of the re-created topic")
            assert query.exception() is None
    finally:
        query.stop()


def _topics(broker):
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10).topics)


def trigger_started_s(progress) -> float:
    """When a progress event's trigger started (wall-clock seconds, Spark's clock)."""
    return datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()
