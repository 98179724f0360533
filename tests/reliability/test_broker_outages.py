"""Broker outages (SIGSTOP/SIGCONT of the broker process) against a real Spark query: short
ones are ridden out within the retry settings; a long one fails the query with a clear
error, and a restart resumes without loss."""

from __future__ import annotations

import time

import pytest

from backlog_source.demo.traffic import LiveProducer
from tests.integration.helpers import (
    caught_up,
    log_end_offsets,
    make_topic,
    reader,
    start_aware,
    start_query,
    wait_for,
    written_pairs,
)

pytestmark = pytest.mark.integration

OUTAGE_S = 15


def last_batch(handle) -> int:
    """The last batch id the current run reported (-1 before its first)."""
    progress = handle.query.lastProgress
    return -1 if progress is None else progress["batchId"]


def alive(handle) -> bool:
    """True while the query runs; raises with its error once it failed, so a wait below ends
    at once and says why (CI printed only "timed out" when it failed here)."""
    if handle.query.exception() is not None:
        raise AssertionError(f"the query failed: {handle.query.exception()}")
    return True


def outage(broker, seconds: float) -> None:
    broker.pause()
    try:
        time.sleep(seconds)
    finally:
        broker.resume()


def test_fifteen_second_outages_mid_backlog_and_in_low_latency_are_ridden_out(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 2, per_partition=100_000)
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=2_000,
                **{"backlog.maxOffsetsPerTrigger": 25_000})
    out = tmp_path / "out"
    writer = df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(tmp_path / "c"))
    live = LiveProducer(broker.bootstrap_servers, topic_name, 2, rate=100).start()
    handle = start_aware(writer, "0 seconds", "500 milliseconds")
    try:
        wait_for(lambda: handle.query.lastProgress is not None and handle.query.lastProgress["batchId"] >= 1,
                 120, "a first high-throughput batch")
        assert handle.mode == "high-throughput"
        outage(broker, OUTAGE_S)  # mid-backlog
        wait_for(lambda: alive(handle) and handle.mode == "low-latency", 180,
                 "the switch to low latency after the outage")
        wait_for(lambda: alive(handle) and last_batch(handle) >= 0, 60, "a first low-latency batch")
        outage(broker, OUTAGE_S)  # in low-latency mode
        batches_before = last_batch(handle)
        wait_for(lambda: alive(handle) and last_batch(handle) >= batches_before + 3, 120, "batches after the outage")
        live.stop()
        wait_for(lambda: alive(handle) and caught_up(handle.query, broker, topic_name), 120, "catching up")
        assert handle.query.exception() is None and handle.query.isActive
    finally:
        live.stop()
        handle.stop()
    assert live.failed == 0
    pairs = written_pairs(out)
    expected = sum(log_end_offsets(broker, topic_name).values())
    assert len(pairs) == len(set(pairs)) == expected


def test_a_longer_outage_fails_with_a_clear_error_and_a_restart_loses_nothing(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 2, per_partition=50_000)
    out = tmp_path / "out"

    def start():
        df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=5_000,
                    **{"kafkaConsumer.pollTimeoutMs": 4_000, "kafka.default.api.timeout.ms": 4_000,
                       "fetchOffset.numRetries": 1, "fetchOffset.retryIntervalMs": 200})
        return start_query(df.writeStream.format("parquet").option("path", str(out))
                           .option("checkpointLocation", str(tmp_path / "c")).trigger(processingTime="200 milliseconds")
                           .start)

    query = start()
    wait_for(lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 1, 120, "a first batch")
    from pyspark.errors import StreamingQueryException

    broker.pause()
    try:
        with pytest.raises(StreamingQueryException) as failure:
            # Returns False (failing the test) if the query rides out 90 s with both waits bounded at 4 s.
            assert not query.awaitTermination(90), "the query stopped without an error"
        message = str(failure.value)
    finally:
        broker.resume()
    # The error says what happened and which setting bound the wait (no stack spelunking). Whichever side waits
    # first fails the query: a reader names kafkaConsumer.pollTimeoutMs, the driver's offset and metadata
    # requests name kafka.default.api.timeout.ms; both name the servers they tried.
    assert "KafkaUnavailableError" in message, message[:2000]
    assert ("kafkaConsumer.pollTimeoutMs" in message or "kafka.default.api.timeout.ms" in message), message[:2000]
    assert broker.bootstrap_servers in message, message[:2000]

    again = start()
    try:
        wait_for(lambda: caught_up(again, broker, topic_name), 120, "the restarted query to catch up")
    finally:
        again.stop()
    pairs = written_pairs(out)
    assert len(pairs) == len(set(pairs)) == sum(log_end_offsets(broker, topic_name).values())
