"""start_backlog_aware with the embedded broker and real Spark."""

from __future__ import annotations

import json
import threading
import time

import pytest

from backlog_source import ConfigError, start_backlog_aware
from tests.integration.helpers import fill, log_end_offsets, make_topic, reader, wait_for

pytestmark = pytest.mark.integration


def positions(query, topic):
    progress = query.lastProgress
    if not progress or not progress["sources"][0]["endOffset"]:
        return None
    return json.loads(progress["sources"][0]["endOffset"])["positions"].get(topic)


def wait_caught_up(handle, broker, topic, timeout=180):
    def done():
        end = {str(p): o for p, o in log_end_offsets(broker, topic).items()}
        return positions(handle.query, topic) == end

    wait_for(done, timeout, "the query to reach the log end")


@pytest.mark.parametrize("sink", ["parquet", "foreachBatch"])
def test_exactly_once_over_a_switch_under_live_traffic(spark, broker, topic_name, tmp_path, sink):
    make_topic(broker, topic_name, 2, per_partition=50_000)
    out, ckpt = tmp_path / "out", str(tmp_path / "ckpt")
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
                **{"backlog.maxOffsetsPerTrigger": 40_000, "maxOffsetsPerTrigger": 5_000})
    if sink == "parquet":
        writer = df.writeStream.format("parquet").option("path", str(out))
    else:
        def write_batch(batch_df, batch_id):
            # Idempotent per batch id, as foreachBatch functions must be for exactly-once.
            batch_df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        writer = df.writeStream.foreachBatch(write_batch)
    writer = writer.option("checkpointLocation", ckpt)

    stop_live = threading.Event()

    def live_traffic():
        n = 50_000
        while not stop_live.is_set() and n < 60_000:
            fill(broker, topic_name, 2, 100, start=n)
            n += 100
            time.sleep(0.05)

    handle = start_backlog_aware(writer, high_throughput_interval="0 seconds", low_latency_interval="500 milliseconds")
    producer = threading.Thread(target=live_traffic)
    producer.start()
    try:
        assert handle.mode == "high-throughput"
        wait_for(lambda: handle.mode == "low-latency", 180, "the switch to low latency")
        producer.join(timeout=120)
        wait_caught_up(handle, broker, topic_name)
        (transition,) = handle.transitions
        assert (transition.from_mode, transition.to_mode) == ("high-throughput", "low-latency")
        assert transition.restart_seconds < 30
    finally:
        stop_live.set()
        handle.stop()
    expected = sum(log_end_offsets(broker, topic_name).values())
    rows = spark.read.parquet(str(out)).select("partition", "offset")
    assert rows.count() == expected
    assert rows.distinct().count() == expected

    # A caught-up restart on the same checkpoint begins in low latency, with no restart.
    again = start_backlog_aware(writer, "0 seconds", "500 milliseconds")
    try:
        assert again.mode == "low-latency"
        fill(broker, topic_name, 2, 10, start=70_000)
        wait_caught_up(again, broker, topic_name)
        assert again.transitions == []
    finally:
        again.stop()


def test_reentry_switches_to_high_throughput_and_back_once_each(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 2, per_partition=10)
    writer = (
        reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
               **{"backlog.reenterLag": 5_000, "backlog.maxOffsetsPerTrigger": 4_000})
        .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    handle = start_backlog_aware(writer, "0 seconds", "300 milliseconds")
    try:
        wait_for(lambda: handle.mode == "low-latency", 120, "the end of the initial backlog")
        settled = len(handle.transitions)
        fill(broker, topic_name, 2, 20_000, start=10)  # 40k records > reenterLag
        wait_for(lambda: len(handle.transitions) == settled + 2, 180, "re-entry and exit")
        modes = [(t.from_mode, t.to_mode) for t in handle.transitions[settled:]]
        assert modes == [("low-latency", "high-throughput"), ("high-throughput", "low-latency")]
        wait_caught_up(handle, broker, topic_name)
        assert len(handle.transitions) == settled + 2
    finally:
        handle.stop()


def test_a_failed_query_surfaces_its_error_and_is_not_restarted(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 1, per_partition=100)

    def explode(batch_df, batch_id):
        raise ValueError(f"sink failure in batch {batch_id} (test)")

    writer = (
        reader(spark, broker, subscribe=topic_name, startingOffsets="earliest")
        .writeStream.foreachBatch(explode).option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    handle = start_backlog_aware(writer, "0 seconds", "1 second")
    with pytest.raises(Exception, match="sink failure in batch 0"):
        handle.await_termination(120)
    first = handle.query
    time.sleep(1)
    assert handle.query is first and handle.transitions == []
    assert all(q.id != first.id for q in spark.streams.active)


def test_validation_says_what_to_change(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 1)
    df = reader(spark, broker, subscribe=topic_name)
    with pytest.raises(ConfigError, match="set .option\\('checkpointLocation'"):
        start_backlog_aware(df.writeStream.format("noop"))
    with_ckpt = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c"))
    with pytest.raises(ConfigError, match="low_latency_interval must be > 0 seconds"):
        start_backlog_aware(with_ckpt, "0 seconds", "0 seconds")
    with pytest.raises(ConfigError, match="high_throughput_interval must be an interval"):
        start_backlog_aware(with_ckpt, "fast", "1 second")
    rate = spark.readStream.format("rate").load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="reads no format\\('backlog'\\) source"):
        start_backlog_aware(rate)
    assert spark.streams.active == [] or all("backlog" not in str(q.name) for q in spark.streams.active)


def test_the_writer_is_understood_after_transformations(spark, broker, topic_name, tmp_path):
    # A transformed DataFrame's source leaf is resolved (StreamingRelationV2), not the
    # unresolved one load() returns; both must be found, with their options.
    from pyspark.sql import functions as F

    from backlog_source.writer_info import describe_writer

    df = reader(spark, broker, subscribe=topic_name, maxOffsetsPerTrigger=7)
    rate = spark.readStream.format("rate").load()
    for transformed in (df, df.withColumn("at", F.current_timestamp()), df.select("value").where("value is not null")):
        info = describe_writer(transformed.writeStream.option("checkpointLocation", str(tmp_path / "c")))
        assert info.checkpoint_location == str(tmp_path / "c")
        [options] = info.backlog_sources
        options = {k.lower(): v for k, v in options.items()}  # Spark's options are case-insensitive
        assert options["subscribe"] == topic_name and options["maxoffsetspertrigger"] == "7"
    info = describe_writer(rate.select("value").writeStream)
    assert info.backlog_sources == [] and info.other_formats == ["rate"]
