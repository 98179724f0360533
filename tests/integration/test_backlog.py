"""Backlog boundaries and BacklogFinishEvents with the embedded broker and real Spark."""

from __future__ import annotations

import json
import uuid

import pytest

from backlog_source.broker import delete_topic, produce
from events.model import BacklogFinishEvent, MalformedEvent
from tests.integration.helpers import fill, log_end_offsets, make_topic, reader, start_noop, wait_for_progress

pytestmark = pytest.mark.integration


def offsets_of(progress) -> dict:
    return json.loads(progress.sources[0].endOffset)


def published_events(broker, control_topic: str, source_id: str) -> list[BacklogFinishEvent]:
    """Every event on the control topic for ``source_id``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "t", "enable.partition.eof": True})
    consumer.assign([TopicPartition(control_topic, 0, 0)])
    found, done = [], False
    while not done:
        for message in consumer.consume(1000, 5.0) or [None]:
            if message is None or (message.error() and message.error().code() == -191):
                done = True
            elif message.error() is None:
                try:
                    event = BacklogFinishEvent.decode(message.value())
                except MalformedEvent:
                    continue
                if event.source_id == source_id:
                    found.append(event)
    consumer.close()
    return found


def test_each_bucket_with_backlog_finishes_once_by_its_event_even_with_task_retries(spark, broker, topic_name, tmp_path):
    control = f"ctl-{uuid.uuid4().hex[:8]}"
    make_topic(broker, topic_name, 3)
    fill(broker, topic_name, 2, 3_000)  # partitions 0 and 1; partition 2 stays empty
    log_end = log_end_offsets(broker, topic_name)

    last_offsets = {p: end - 1 for p, end in log_end.items()}

    def fail_first_attempt(partition, offset):
        # Fail each task's first attempt at its last record (the read has reached the
        # boundary by then); the retry reads the same split and crosses the boundary again.
        from pyspark import TaskContext

        if offset == last_offsets.get(partition) and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("forced task failure (test)")
        return offset

    from pyspark.sql.functions import col, udf

    check = udf(fail_first_attempt, "long", useArrow=False)
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", **{"backlog.eventsTopic": control})
    query = start_noop(df.select(check(col("partition"), col("offset")).alias("offset")), tmp_path)
    try:
        wait_for_progress(query, lambda p: not offsets_of(p)["processing_backlog"], what="the end of the backlog")
        progress = query.recentProgress
        first = offsets_of(progress[0])
        assert first["processing_backlog"] is True
        assert first["backlog"] == {topic_name: {"0": log_end[0], "1": log_end[1]}}  # no boundary for empty p2
        final = offsets_of(progress[-1])
        assert final["backlog"] == {}
        counts = final["event_counts"]
        assert counts["handled"] == 2 and counts["finished_by_position"] == 0
        events = published_events(broker, control, first["source_id"])
        assert sorted({(e.partition, e.boundary_offset) for e in events}) == [(0, log_end[0]), (1, log_end[1])]
        assert all(e.reached_offset >= e.boundary_offset for e in events)
        assert counts["duplicate"] == len(events) - 2  # retries that published again were ignored
    finally:
        query.stop()


def test_restore_mid_backlog_keeps_the_boundaries(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 2, per_partition=20_000)
    boundaries = {str(p): o for p, o in log_end_offsets(broker, topic_name).items()}

    def start():
        return start_noop(reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=4_000), tmp_path)

    query = start()
    wait_for_progress(query, lambda p: p.batchId >= 1, what="two batches")
    query.stop()
    before = offsets_of(query.recentProgress[-1])
    assert before["processing_backlog"] and before["backlog"][topic_name] == boundaries
    fill(broker, topic_name, 2, 5_000, start=20_000)  # the log grows while the query is down
    restarted = start()
    try:
        wait_for_progress(restarted, lambda p: True, what="the first batch after the restart")
        after = offsets_of(restarted.recentProgress[0])
        assert after["source_id"] == before["source_id"]
        assert after["backlog"][topic_name] == boundaries  # not the new log end
        wait_for_progress(restarted, lambda p: not offsets_of(p)["processing_backlog"], what="the end of the backlog")
    finally:
        restarted.stop()


def test_discovered_topics_get_boundaries_and_deleted_ones_leave_backlog(spark, broker, topic_name, tmp_path):
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    make_topic(broker, first, 1, per_partition=30_000)

    def start():
        return start_noop(
            reader(spark, broker, subscribePattern=f"{topic_name}-.*", startingOffsets="earliest",
                   maxOffsetsPerTrigger=1_000, failOnDataLoss="false"),
            tmp_path, trigger="200 milliseconds",
        )

    query = start()
    try:
        wait_for_progress(query, lambda p: offsets_of(p)["processing_backlog"], what="the backlog phase")
        make_topic(broker, second, 2, per_partition=50)
        second_end = {str(p): o for p, o in log_end_offsets(broker, second).items()}
        wait_for_progress(query, lambda p: second in offsets_of(p)["backlog"], what="a boundary for the new topic")
        discovered = next(offsets_of(p) for p in query.recentProgress if second in offsets_of(p)["backlog"])
        # The boundary is the log end when the topic was discovered, which may be mid-produce.
        for partition, boundary in discovered["backlog"][second].items():
            assert 0 < boundary <= second_end[partition]
        assert first in discovered["backlog"]  # still mid-backlog
    finally:
        query.stop()
    # Tansu's DeleteTopics can hang while a consumer fetches the topic (docs/broker-gaps.md),
    # so the topic is deleted while the query is stopped; the restarted query finds it gone.
    delete_topic(broker.bootstrap_servers, first)
    restarted = start()
    try:
        wait_for_progress(
            restarted, lambda p: first not in offsets_of(p)["backlog"] and first not in offsets_of(p)["positions"],
            what="the deleted topic to leave the pending set",
        )
        wait_for_progress(restarted, lambda p: not offsets_of(p)["processing_backlog"], what="the end of the backlog")
    finally:
        restarted.stop()


def test_garbage_foreign_and_stale_control_messages_are_ignored_and_counted(spark, broker, topic_name, tmp_path):
    control = f"ctl-{uuid.uuid4().hex[:8]}"
    make_topic(broker, topic_name, 1, per_partition=10)
    query = start_noop(reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", **{"backlog.eventsTopic": control}), tmp_path)
    try:
        wait_for_progress(query, lambda p: not offsets_of(p)["processing_backlog"], what="the end of the backlog")
        source_id = offsets_of(query.recentProgress[0])["source_id"]
        junk = [
            b"not json",
            json.dumps({"type": "SomethingElse"}).encode(),
            b"x" * 100_000,
            BacklogFinishEvent("another-source", topic_name, 0, 11, 11, 0).encode(),
            BacklogFinishEvent(source_id, topic_name, 0, 3, 3, 0).encode(),  # stale boundary
        ]
        produce(broker.bootstrap_servers, control, ((0, b"k", v) for v in junk))
        fill(broker, topic_name, 1, 5, start=10)  # new data: the next batch checkpoints the counts
        wait_for_progress(query, lambda p: offsets_of(p)["event_counts"]["malformed"] >= 3, what="the counts")
        counts = offsets_of(query.recentProgress[-1])["event_counts"]
        # The seal record produce() appends to the control topic is malformed too.
        assert (counts["malformed"], counts["foreign"], counts["duplicate"] + counts["stale"]) == (4, 1, 1)
        assert query.exception() is None
    finally:
        query.stop()


def test_a_burst_above_reenter_lag_enters_backlog_again_once(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 2, per_partition=100)
    query = start_noop(
        reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=500, **{"backlog.reenterLag": "2000"}),
        tmp_path,
    )
    try:
        wait_for_progress(query, lambda p: not offsets_of(p)["processing_backlog"], what="the first catch-up")
        fill(broker, topic_name, 2, 400, start=100)  # 802 records: below the re-entry lag
        fill(broker, topic_name, 2, 2_000, start=500)  # now well above it
        wait_for_progress(query, lambda p: p.batchId > 0 and offsets_of(p)["processing_backlog"] and
                          offsets_of(p)["positions"][topic_name]["0"] > 101, what="re-entry")
        end = log_end_offsets(broker, topic_name)
        wait_for_progress(
            query, lambda p: offsets_of(p)["positions"][topic_name] == {str(k): v for k, v in end.items()}
            and not offsets_of(p)["processing_backlog"], what="the second catch-up",
        )
        flags = [offsets_of(p)["processing_backlog"] for p in query.recentProgress]
        transitions = sum(1 for a, b in zip(flags, flags[1:]) if a != b)
        assert transitions == 3  # in -> out, out -> in (re-entry), in -> out
    finally:
        query.stop()
