"""Apache Kafka brokers that die: kill -9 and a restart on the same log dir, mid-backlog and
right after a mode switch; and on a three-broker cluster (replication factor 3,
min.insync.replicas=2), the leader of the partitions being read killed mid-backlog. The
query rides each out on its own (no restart by the test), and every record is delivered
exactly once to a file sink and to an idempotent ``foreachBatch``.

Bound stated (docs/reliability.md): the query is back to committing batches within
the broker's own recovery (a restart ~5 s here; a leader election ~3 s, the broker session
timeout the launcher sets) plus the client's reconnect back-off; the waits below allow 120 s
on a loaded machine and report the pause they saw.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from backlog_source.demo.apache_kafka import kafka
from backlog_source.demo.topics import produce
from tests.integration.helpers import (
    caught_up,
    describe_stuck,
    log_end_offsets,
    make_topic,
    reader,
    start_aware,
    wait_for,
    written_pairs,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3
#: Records per partition: 75,000 in all, eight backlog batches of 10,000 per query. Each
#: failure below lands after the first batch and waits for two more, so the backlog outlasts
#: it (it was 40,000, twelve batches; the two queries read beside each other on two cores).
PER_PARTITION = 25_000


class IdempotentBatches:
    """A ``foreachBatch`` that keeps each batch by id: a replayed batch replaces itself, as a
    user's idempotent sink (overwrite by batch id) would."""

    def __init__(self) -> None:
        self.by_batch: dict[int, list[tuple[int, int]]] = {}

    def __call__(self, batch_df, batch_id: int) -> None:
        self.by_batch[batch_id] = [(r.partition, r.offset) for r in batch_df.select("partition", "offset").collect()]

    def pairs(self) -> list[tuple[int, int]]:
        return [pair for rows in self.by_batch.values() for pair in rows]


def start_both(spark, cluster, topic, tmp_path):
    """The same source into a Parquet sink and into an idempotent foreachBatch, each with
    start_backlog_aware; returns the two handles and the foreachBatch collector."""
    def df():
        return reader(spark, cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=2_000,
                      **{"backlog.maxOffsetsPerTrigger": 10_000})

    files = (df().writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "c-files")))
    batches = IdempotentBatches()
    each = df().writeStream.foreachBatch(batches).option("checkpointLocation", str(tmp_path / "c-batches"))
    return [start_aware(files, "0 seconds", "500 milliseconds"),
            start_aware(each, "0 seconds", "500 milliseconds")], batches


def committed_batches(handle) -> int:
    progress = handle.query.lastProgress
    return -1 if progress is None else progress["batchId"]


def wait_for_queries(spark, handles, condition, timeout_s: float, what: str):
    """:func:`wait_for` ``condition``; a timeout also says where each query stands
    (:func:`describe_stuck`): a query that does not come back after a broker failure is the
    failure these tests look for, and the output must tell where it stopped."""
    try:
        return wait_for(condition, timeout_s, what)
    except TimeoutError as timeout:
        raise TimeoutError(f"{timeout}\n{describe_stuck(spark, [h.query for h in handles])}") from None


def catch_up(spark, handles, cluster, topic) -> None:
    """Wait until every query has read the topic to its log end; fail if one failed."""
    for handle in handles:
        wait_for_queries(spark, handles, lambda h=handle: caught_up(h.query, cluster, topic) or h.query.exception(),
                         180, "catching up")
        assert handle.query.exception() is None, handle.query.exception()


def stop_all(handles) -> None:
    for handle in handles:
        handle.stop()


def assert_exactly_once(cluster, topic, tmp_path, batches) -> None:
    expected = sum(log_end_offsets(cluster, topic).values())
    files = written_pairs(tmp_path / "out")
    assert len(files) == len(set(files)) == expected
    assert len(batches.pairs()) == len(set(batches.pairs())) == expected


def pause_after(spark, handles, what: str) -> float:
    """Seconds until every query has committed two more batches (the pause a failure caused,
    with the time of the batches themselves)."""
    started = time.monotonic()
    marks = [committed_batches(h) for h in handles]
    for handle, mark in zip(handles, marks):
        wait_for_queries(spark, handles, lambda h=handle, m=mark: h.query.exception() is None
                         and committed_batches(h) >= m + 2 or h.query.exception(), 120,
                         f"{what} (batches before: {marks})")
        assert handle.query.exception() is None, handle.query.exception()
    return time.monotonic() - started


def test_kill_minus_nine_and_restart_mid_backlog_and_after_a_switch(spark, topic_name, tmp_path):
    with kafka() as cluster:
        make_topic(cluster, topic_name, PARTITIONS, per_partition=PER_PARTITION, value_size=50)
        handles, batches = start_both(spark, cluster, topic_name, tmp_path)
        try:
            wait_for_queries(spark, handles, lambda: all(committed_batches(h) >= 1 for h in handles), 120,
                             "first backlog batches")
            assert all(h.mode == "high-throughput" for h in handles)
            cluster.kill()  # kill -9, mid-backlog
            restart_s = cluster.restart()
            pause = pause_after(spark, handles, "batches after the restart mid-backlog")
            print(f"mid-backlog: broker back in {restart_s:.1f} s, two more batches of each query {pause:.1f} s later")

            wait_for_queries(spark, handles, lambda: all(h.mode == "low-latency" for h in handles), 180,
                             "the switch to low latency")
            cluster.kill()  # right after the switch
            restart_s = cluster.restart()
            produce(cluster.bootstrap_servers, topic_name, [(p, None, b"after") for p in range(PARTITIONS)] * 100)
            # Caught up is the condition here: 300 new records may well be one batch.
            started = time.monotonic()
            catch_up(spark, handles, cluster, topic_name)
            print(f"after the switch: broker back in {restart_s:.1f} s, the new records read "
                  f"{time.monotonic() - started:.1f} s later")
        finally:
            stop_all(handles)
        assert_exactly_once(cluster, topic_name, tmp_path, batches)


def test_the_leader_of_the_partitions_read_is_killed_on_a_three_broker_cluster(spark, topic_name, tmp_path):
    with kafka(nodes=3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic(topic_name, PARTITIONS, replication_factor=3,
                                      config={"min.insync.replicas": "2"})])[topic_name].result(30)
        produce(cluster.bootstrap_servers, topic_name,
                ((n % PARTITIONS, None, b"x" * 50) for n in range(PARTITIONS * PER_PARTITION)))
        handles, batches = start_both(spark, cluster, topic_name, tmp_path)
        try:
            wait_for_queries(spark, handles, lambda: all(committed_batches(h) >= 1 for h in handles), 120,
                             "first backlog batches")
            leader = admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions[0].leader
            killed_at = time.monotonic()
            cluster.node_of(leader).kill()
            pause = pause_after(spark, handles, "batches after the leader died")
            moved = admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions[0].leader
            assert moved != leader
            print(f"leader {leader} killed: partition 0 led by {moved}; two more batches of each query "
                  f"{time.monotonic() - killed_at:.1f} s after the kill ({pause:.1f} s)")
            catch_up(spark, handles, cluster, topic_name)
        finally:
            stop_all(handles)
        assert_exactly_once(cluster, topic_name, tmp_path, batches)
        offsets = json.loads(handles[0].query.lastProgress["sources"][0]["endOffset"])
        assert not offsets["processing_backlog"]
        # Nothing is kept: kill -9 rather than the controlled shutdown the context ends with,
        # where the last node, its quorum gone, waits out the 30 s stop bound (measured).
        cluster.kill()
