"""Backlog boundaries and BacklogFinishEvents on Apache Kafka and real Spark."""

from __future__ import annotations

import json
import uuid

import pytest

from backlog_source.demo.topics import produce
from backlog_source.events.finish_event import BacklogFinishEvent
from tests.integration.helpers import (
    fill,
    log_end_offsets,
    make_topic,
    published_events,
    reader,
    start_noop,
    wait_for_progress,
)
from tests.support.topics import delete_topic

pytestmark = pytest.mark.integration


def offsets_of(progress) -> dict:
    return json.loads(progress.sources[0].endOffset)


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
        (batch,) = query.recentProgress  # the whole backlog fits one batch: no extra batch drops the flag
        boundaries = {topic_name: {"0": log_end[0], "1": log_end[1]}}  # no boundary for the empty p2
        # The batch that reaches every boundary carries them (its readers publish the events)
        # and already reports that no backlog is left.
        assert offsets_of(batch)["backlog"]["finishing"] == boundaries and offsets_of(batch)["backlog"]["pending"] == {}
        # The next batch with data records how the buckets left backlog.
        fill(broker, topic_name, 1, 1, start=3_000)
        wait_for_progress(query, lambda p: offsets_of(p)["backlog"]["finishing"] == {} and p.batchId >= 1,
                          what="the next batch")
        counts = offsets_of(query.recentProgress[-1])["backlog"]["event_counts"]
        assert counts["handled"] == 2 and counts["finished_by_position"] == 0
        events = published_events(broker, control, offsets_of(batch)["source_id"])
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
    assert before["processing_backlog"] and before["backlog"]["pending"][topic_name] == boundaries
    fill(broker, topic_name, 2, 5_000, start=20_000)  # the log grows while the query is down
    restarted = start()
    try:
        wait_for_progress(restarted, lambda p: True, what="the first batch after the restart")
        after = offsets_of(restarted.recentProgress[0])
        assert after["source_id"] == before["source_id"] and after["trace"]["traceparent"] == before["trace"]["traceparent"]
        tracked = {**after["backlog"]["pending"].get(topic_name, {}), **after["backlog"]["finishing"].get(topic_name, {})}
        assert tracked == boundaries  # not moved
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
        def tracked(p):
            offset = offsets_of(p)
            return {**offset["backlog"]["pending"].get(second, {}), **offset["backlog"]["finishing"].get(second, {})}

        def found(p):
            return second in offsets_of(p)["starts"]

        # Waits on the discovery itself, not on a boundary: make_topic creates the topic before
        # it produces, so discovery may fall in between, and a partition still empty then has
        # nothing to catch up and gets no boundary (if both are, no boundary ever comes).
        wait_for_progress(query, found, what="the batch that discovers the new topic")
        discovered = next(p for p in query.recentProgress if found(p))
        # The batch that discovers the topic reads every partition of it from its earliest
        # offset; a boundary is the log end at discovery, so never past what was produced.
        assert set(offsets_of(discovered)["starts"][second]) == {"0", "1"}
        assert set(tracked(discovered)) <= {"0", "1"}
        for partition, boundary in tracked(discovered).items():
            assert 0 < boundary <= second_end[partition]
        assert first in offsets_of(discovered)["backlog"]["pending"]  # still mid-backlog
    finally:
        query.stop()
    # Tansu's DeleteTopics can hang while a consumer fetches the topic (docs/broker-gaps.md),
    # so the topic is deleted while the query is stopped; the restarted query finds it gone.
    delete_topic(broker.bootstrap_servers, first)
    restarted = start()
    try:
        wait_for_progress(
            restarted, lambda p: first not in offsets_of(p)["backlog"]["pending"] and first not in offsets_of(p)["positions"]
            and first not in offsets_of(p)["backlog"]["finishing"], what="the deleted topic to leave backlog",
        )
        wait_for_progress(restarted, lambda p: not offsets_of(p)["processing_backlog"], what="the end of the backlog")
    finally:
        restarted.stop()


def test_garbage_foreign_stale_and_forged_control_messages_are_ignored_and_counted(spark, broker, topic_name, tmp_path):
    """Trust the broker and the plan, not the control topic: a forged event with the query's
    real source id and the boundary of a partition still far from it changes nothing.

    The messages are published from inside the batch that carries p0 to its boundary (a UDF
    on p0's last record), so they are on the control topic exactly when the driver reads it.
    """
    control = f"ctl-{uuid.uuid4().hex[:8]}"
    make_topic(broker, topic_name, 2)
    fill(broker, topic_name, 1, 10)  # p0: 10 records
    produce(broker.bootstrap_servers, topic_name, ((1, b"k", b"v") for _ in range(100_000)))  # p1: 100,000
    p0_last = log_end_offsets(broker, topic_name)[0] - 1
    bootstrap = broker.bootstrap_servers
    first_offsets = {}

    def inject(partition, offset):
        if partition == 0 and offset == p0_last:
            from confluent_kafka import Producer

            source_id, boundary = first_offsets["source_id"], first_offsets["p1_boundary"]
            junk = [
                b"not json",
                json.dumps({"type": "SomethingElse"}).encode(),
                b"x" * 100_000,
                BacklogFinishEvent("another-source", topic_name, 0, 11, 11, 0).encode(),
                BacklogFinishEvent(source_id, topic_name, 0, 3, 3, 0).encode(),  # stale boundary
                BacklogFinishEvent(source_id, topic_name, 1, boundary, boundary, 0).encode(),  # forged
                None,
            ]
            producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000})
            for value in junk:
                producer.produce(control, value=value, partition=0)
            producer.flush(30)
        return offset

    from pyspark.sql.functions import col, udf

    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=1_000,
                **{"backlog.eventsTopic": control})
    # Batch 0 tells the UDF (pickled per batch) the source id and p1's boundary it needs.
    probe = start_noop(df, tmp_path, name="probe")
    wait_for_progress(probe, lambda p: True, what="the probe's first batch")
    probe.stop()
    first = offsets_of(probe.recentProgress[0])
    first_offsets.update(source_id=first["source_id"], p1_boundary=first["backlog"]["pending"][topic_name]["1"])
    boundary = first_offsets["p1_boundary"]
    query = start_noop(df.select(udf(inject, "long", useArrow=False)(col("partition"), col("offset"))),
                       tmp_path, trigger="0 seconds", name="probe")  # the same checkpoint: the same source id
    try:
        wait_for_progress(query, lambda p: offsets_of(p)["backlog"]["event_counts"]["malformed"] >= 3, what="the counts")
        latest = offsets_of(query.recentProgress[-1])
        counts = latest["backlog"]["event_counts"]
        assert (counts["malformed"], counts["foreign"], counts["stale"], counts["implausible"]) == (4, 1, 1, 1)
        assert counts["handled"] == 1  # p0's own event
        assert latest["processing_backlog"] and latest["backlog"]["pending"][topic_name]["1"] == boundary  # not finished early
        assert all(p.numInputRows <= 1_001 for p in query.recentProgress)  # still read at the backlog's pace
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
        # Now well above it, and more than one 500-record batch. One burst: records that
        # trickled in over several batches could be caught up with halfway and enter again.
        fill(broker, topic_name, 2, 2_000, start=500, burst=True)
        wait_for_progress(query, lambda p: p.batchId > 0 and offsets_of(p)["processing_backlog"] and
                          offsets_of(p)["positions"][topic_name]["0"] > 101, what="re-entry")
        end = log_end_offsets(broker, topic_name)
        wait_for_progress(
            query, lambda p: offsets_of(p)["positions"][topic_name] == {str(k): v for k, v in end.items()}
            and not offsets_of(p)["processing_backlog"], what="the second catch-up",
        )
        flags = [True] + [offsets_of(p)["processing_backlog"] for p in query.recentProgress]  # it started in backlog
        transitions = sum(1 for a, b in zip(flags, flags[1:]) if a != b)
        assert transitions == 3  # in -> out, out -> in (re-entry), in -> out
    finally:
        query.stop()


def finished(offset: dict) -> int:
    """Buckets that left backlog so far: by their event or by their committed position."""
    counts = offset["backlog"]["event_counts"]
    return counts["handled"] + counts["finished_by_position"]


def phase_buckets(progress) -> int:
    """The buckets of every backlog phase the progress shows (each phase by its trace)."""
    counts: dict[str, int] = {}
    for p in progress:
        trace = offsets_of(p).get("trace")
        if trace:
            counts[trace["traceparent"]] = max(counts.get(trace["traceparent"], 0), trace["bucket_count"])
    return sum(counts.values())


def test_a_control_topic_deleted_mid_run_is_re_created_and_the_query_goes_on(spark, broker, topic_name, tmp_path):
    """Issue 12.3: the control topic disappears while the query runs. Publishers never create
    it (they log and go on); the driver re-creates it with one partition when it next needs
    it. Each bucket of the next backlog phase then finishes once: by its event when the
    reader published after the re-creation, by its committed position when the event was
    lost (which of the two is a race between the driver and the readers)."""
    from confluent_kafka.admin import AdminClient

    control = f"ctl-{uuid.uuid4().hex[:8]}"
    make_topic(broker, topic_name, 2, per_partition=500)
    query = start_noop(reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=300,
                              **{"backlog.eventsTopic": control, "backlog.reenterLag": 400}), tmp_path)
    end = {str(p): o for p, o in log_end_offsets(broker, topic_name).items()}
    try:
        # The last batch of the phase leaves its buckets "finishing": with no more data, no
        # batch runs to carry the settled state (as in Spark), the next batch with data does.
        wait_for_progress(query, lambda p: offsets_of(p)["positions"][topic_name] == end
                          and not offsets_of(p)["processing_backlog"], what="the first phase to end")
        delete_topic(broker.bootstrap_servers, control)
        deleted_after = query.lastProgress.batchId
        fill(broker, topic_name, 2, 1_000, start=500)  # a burst above the re-entry lag and one batch
        wait_for_progress(query, lambda p: p.batchId > deleted_after and offsets_of(p)["processing_backlog"],
                          what="re-entry")
        end = {str(p): o for p, o in log_end_offsets(broker, topic_name).items()}
        wait_for_progress(query, lambda p: offsets_of(p)["positions"][topic_name] == end
                          and not offsets_of(p)["processing_backlog"], what="the second phase to end")
        fill(broker, topic_name, 2, 1, start=1_500)  # a batch with data carries the settled state
        # The first phase had two buckets. The burst lands one partition after the other, so
        # the driver may see it in parts: one re-entry phase of the buckets it had reached, or
        # two (a second once the rest of the burst is over the re-entry lag). Each bucket of
        # each phase finishes once, by its event or its position.
        wait_for_progress(query, lambda p: finished(offsets_of(p)) >= phase_buckets(query.recentProgress)
                          and not offsets_of(p)["backlog"]["finishing"] and not offsets_of(p)["backlog"]["pending"],
                          what="the second phase to settle")
        phases = phase_buckets(query.recentProgress)
        assert finished(offsets_of(query.lastProgress)) == phases and phases >= 3, [
            (p["batchId"], {k: offsets_of(p).get(k) for k in ("positions", "backlog", "trace")})
            for p in query.recentProgress]
        assert query.exception() is None
    finally:
        query.stop()
    topics = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10).topics
    assert control in topics and len(topics[control].partitions) == 1
