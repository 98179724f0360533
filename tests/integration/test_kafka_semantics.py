"""What only Apache Kafka can stage, each beside Spark's own ``format("kafka")`` on the same
topic: transactions under both isolation levels, partitions added to a live topic, records
deleted before they were read, starting offsets picked by timestamp, and a topic deleted
while a read of it runs. Each test names the Spark behaviour it matches.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from backlog_source.demo.topics import create_topic, produce
from tests.integration.differential import SourceFailed, delete_records_before, outcome, run_to_end, start
from tests.integration.helpers import log_end_offsets, make_topic, reader, start_query, wait_for, wait_for_progress
from tests.support.topics import delete_topic

pytestmark = pytest.mark.integration


def transactional_producer(broker, name: str) -> Producer:
    # The open transaction must outlive the reads before its commit: the default 60 s timeout
    # let the broker abort it on a loaded machine (an abort marker moved the last stable
    # offset). 15 minutes is the broker's default transaction.max.timeout.ms.
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{name}",
                         "linger.ms": 5, "transaction.timeout.ms": 900_000})
    producer.init_transactions(30)
    return producer


def in_transaction(producer: Producer, topic: str, records, *, commit: bool | None) -> None:
    """Produce ``records`` (partition, value) in one transaction, then commit, abort, or
    (``commit=None``) leave it open."""
    producer.begin_transaction()
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition)
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def values(rows) -> list[bytes]:
    return sorted(r[1] for r in rows)


def test_transactions_under_both_isolation_levels_as_spark_reads_them(spark, broker, topic_name, tmp_path):
    """KafkaMicroBatchSourceSuite, "read Kafka transactional messages: read_committed" and
    "read_uncommitted": committed records in both, aborted ones only under read_uncommitted
    (Spark's default, the Java client's), never the transaction markers; an open transaction
    holds read_committed at the last stable offset, and read_uncommitted reads past it."""
    make_topic(broker, topic_name, 2)
    producer = transactional_producer(broker, topic_name)
    in_transaction(producer, topic_name, [(p, f"c1-{p}-{n}".encode()) for p in (0, 1) for n in range(5)], commit=True)
    in_transaction(producer, topic_name, [(p, f"ab-{p}-{n}".encode()) for p in (0, 1) for n in range(3)], commit=False)
    in_transaction(producer, topic_name, [(p, f"c2-{p}-{n}".encode()) for p in (0, 1) for n in range(2)], commit=True)
    in_transaction(producer, topic_name, [(0, f"open-{n}".encode()) for n in range(4)], commit=None)
    high_watermarks = log_end_offsets(broker, topic_name)
    committed = [f"c{t}-{p}-{n}".encode() for t, count in ((1, 5), (2, 2)) for p in (0, 1) for n in range(count)]
    aborted = [f"ab-{p}-{n}".encode() for p in (0, 1) for n in range(3)]
    open_ = [f"open-{n}".encode() for n in range(4)]

    options = {"subscribe": topic_name, "startingOffsets": "earliest", "maxOffsetsPerTrigger": 3}
    uncommitted = run_to_end(spark, broker.bootstrap_servers, options, tmp_path / "uncommitted")
    assert uncommitted["kafka"].rows() == uncommitted["backlog"].rows()
    assert values(uncommitted["backlog"].rows()) == sorted(committed + aborted + open_)

    read_committed = {**options, "kafka.isolation.level": "read_committed"}
    results = run_to_end(spark, broker.bootstrap_servers, read_committed, tmp_path / "committed")
    assert results["kafka"].rows() == results["backlog"].rows()
    assert values(results["backlog"].rows()) == sorted(committed)
    assert results["kafka"].non_empty_batch_sizes() == results["backlog"].non_empty_batch_sizes()

    # The boundary under read_committed is the last stable offset: p0 stops where the open
    # transaction begins (its first record), not at the high watermark. The first batch (of
    # one record, so that the boundaries are still ahead of it) says so; the ~20 batches
    # after it, one record each, have nothing to add.
    first_open_offset = high_watermarks[0] - len(open_)
    query, _ = start(spark, "backlog", broker.bootstrap_servers, {**read_committed, "maxOffsetsPerTrigger": 1},
                     tmp_path / "boundary", trigger={"availableNow": True})
    try:
        wait_for_progress(query, lambda progress: True, 180, "the first batch")
    finally:
        query.stop()
    assert query.exception() is None
    boundaries = json.loads(query.recentProgress[0]["sources"][0]["endOffset"])["backlog"]["pending"][topic_name]
    assert boundaries == {"0": first_open_offset, "1": high_watermarks[1]}

    # Committed at last: the same checkpoints read the rest, still identical to Spark's.
    producer.commit_transaction(30)
    results = run_to_end(spark, broker.bootstrap_servers, read_committed, tmp_path / "committed")
    assert results["kafka"].rows() == results["backlog"].rows()
    assert values(results["backlog"].rows()) == sorted(open_)


@pytest.mark.parametrize("subscription", ["subscribe", "subscribePattern"])
def test_partitions_added_to_a_live_topic_are_read_from_their_earliest_offset(spark, broker, topic_name, tmp_path,
                                                                            subscription):
    """`KafkaMicroBatchStream.planInputPartitions` (and KafkaMicroBatchSourceSuite, "added
    partition"): a partition found by a later batch is read from its earliest offset in the
    batch that finds it, exactly once; here it also gets a backlog boundary."""
    make_topic(broker, topic_name, 2, per_partition=10)
    value = topic_name if subscription == "subscribe" else f"{topic_name}.*"
    queries = {source: start(spark, source, broker.bootstrap_servers, {subscription: value, "startingOffsets": "earliest"},
                             tmp_path / source, trigger={"processingTime": "0 seconds"})
               for source in ("kafka", "backlog")}
    try:
        for query, _ in queries.values():
            query.processAllAvailable()
        # Partitions added empty and filled a moment later may be found in between (then they
        # are caught up, with no backlog to record): add and fill them while a batch of each
        # query holds it, so the next plan finds them with records.
        for _, collected in queries.values():
            collected.hold_next_batch()
        produce(broker.bootstrap_servers, topic_name, [(0, None, b"new-0-hold")])
        for _, collected in queries.values():
            collected.wait_held()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_partitions([NewPartitions(topic_name, 4)])[topic_name].result(30)
        wait_for(lambda: len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 4, 30,
                 "the new partitions")
        produce(broker.bootstrap_servers, topic_name, [(p, None, f"new-{p}-{n}".encode()) for p in range(4)
                                                       for n in range(7)])
        for _, collected in queries.values():
            collected.release()
        for query, _ in queries.values():
            query.processAllAvailable()
        kafka_rows, backlog_rows = queries["kafka"][1].rows(), queries["backlog"][1].rows()
        assert kafka_rows == backlog_rows
        assert {(r[3], r[4]) for r in backlog_rows} == (
            {(0, o) for o in range(18)} | {(1, o) for o in range(17)} | {(p, o) for p in (2, 3) for o in range(7)})
        backlog_query = queries["backlog"][0]
        tracked = set()
        for progress in backlog_query.recentProgress:
            offset = json.loads(progress["sources"][0]["endOffset"])
            for field in ("pending", "finishing"):
                tracked |= {int(p) for p in offset["backlog"].get(field, {}).get(topic_name, {})}
        assert {2, 3} <= tracked, "no boundary was recorded for the added partitions"
    finally:
        for query, _ in queries.values():
            query.stop()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_records_deleted_before_they_were_read(spark, broker, topic_name, tmp_path, fail_on_data_loss):
    """KafkaMicroBatchSourceSuite, "delete a topic when a Spark job is running" / the
    DeleteRecords cases of `KafkaDataConsumer.get`: with failOnDataLoss=true both sources
    fail, ours naming the partition and the offsets; with false both warn and go on from the
    earliest offset left, with the same rows."""
    make_topic(broker, topic_name, 2, per_partition=20)
    options = {"subscribe": topic_name, "startingOffsets": "earliest", "failOnDataLoss": fail_on_data_loss}
    first = run_to_end(spark, broker.bootstrap_servers, options, tmp_path)
    assert first["kafka"].rows() == first["backlog"].rows()
    produce(broker.bootstrap_servers, topic_name, [(p, None, f"later-{n}".encode()) for p in (0, 1) for n in range(30)])
    delete_records_before(broker, topic_name, {0: 35, 1: 20})  # p0 loses 20..34; p1 loses nothing unread
    second = outcome(spark, broker.bootstrap_servers, options, tmp_path)
    if fail_on_data_loss == "true":
        assert isinstance(second["kafka"], SourceFailed), "Spark's source did not fail"
        assert isinstance(second["backlog"], SourceFailed), second["backlog"]
        message = second["backlog"].message
        assert f"{topic_name}-0" in message and "20" in message and "35" in message, message[:3000]
    else:
        assert not isinstance(second["kafka"], SourceFailed), second["kafka"]
        assert not isinstance(second["backlog"], SourceFailed), second["backlog"]
        assert second["kafka"].rows() == second["backlog"].rows()
        assert {(r[3], r[4]) for r in second["backlog"].rows()} == (
            {(0, o) for o in range(35, 50)} | {(1, o) for o in range(20, 50)})


def test_starting_offsets_by_timestamp_pick_what_kafka_answers(spark, broker, topic_name, tmp_path):
    """`KafkaOffsetReaderAdmin.fetchSpecificTimestampBasedOffsets`: startingTimestamp,
    startingOffsetsByTimestamp and startingOffsetsByTimestampStrategy start where Kafka's
    ListOffsets(timestamp) answers, and a timestamp past every record fails under the
    strategy 'error' and starts at the latest offset under 'latest'."""
    make_topic(broker, topic_name, 2)
    base = 1_700_000_000_000
    for step in range(4):
        produce(broker.bootstrap_servers, topic_name, [(p, None, f"{step}-{p}-{n}".encode()) for p in (0, 1)
                                                       for n in range(3)], timestamp_ms=base + step * 1_000)
    after_all = base + 10_000
    cases = {
        "timestamp": {"startingTimestamp": base + 1_500},
        "exact": {"startingTimestamp": base + 2_000},
        "per-partition": {"startingOffsetsByTimestamp": json.dumps({topic_name: {"0": base, "1": base + 3_000}})},
        "latest-strategy": {"startingOffsetsByTimestamp": json.dumps({topic_name: {"0": base + 1_000, "1": after_all}}),
                            "startingOffsetsByTimestampStrategy": "latest"},
        "error-strategy": {"startingTimestamp": after_all},
    }
    rows = {}
    for name, starting in cases.items():
        options = {"subscribe": topic_name, **starting}
        results = outcome(spark, broker.bootstrap_servers, options, tmp_path / name)
        if name == "error-strategy":
            assert isinstance(results["kafka"], SourceFailed) and isinstance(results["backlog"], SourceFailed), name
            continue
        assert not isinstance(results["backlog"], SourceFailed), (name, results["backlog"])
        assert results["kafka"].rows() == results["backlog"].rows(), name
        rows[name] = results["backlog"].rows()
    # The rows themselves: 1.5 s after the base starts at the third step (offset 6).
    assert {(r[3], r[4]) for r in rows["timestamp"]} == {(p, o) for p in (0, 1) for o in range(6, 12)}


def test_a_topic_deleted_while_it_is_read_fails_the_task_cleanly(spark, broker, topic_name, tmp_path):
    """KafkaMicroBatchSourceSuite, "delete a topic when a Spark job is running": the read
    ends or the query fails with an error; never a crashed Python worker."""
    make_topic(broker, topic_name, 2, per_partition=30_000, value_size=100)
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=2_000,
                failOnDataLoss="false")
    rows_seen = []
    query = start_query(df.writeStream.foreachBatch(lambda batch, _: rows_seen.append(batch.count()))
                        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="0 seconds").start)
    try:
        wait_for(lambda: len(rows_seen) >= 2 or query.exception() is not None, 120, "reading to start")
        delete_topic(broker.bootstrap_servers, topic_name)
        # Either the query goes on (the topic is gone: nothing more to read) or it fails; the
        # failure must not be a crashed worker.
        wait_for(lambda: query.exception() is not None or topic_name not in
                 AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10).topics,
                 60, "the deletion to take effect")
        count = len(rows_seen)
        wait_for(lambda: query.exception() is not None or len(rows_seen) > count or
                 not query.status["isDataAvailable"], 120, "the query to react")
        if query.exception() is not None:
            message = str(query.exception())
            assert "Python worker exited unexpectedly" not in message and "SIGSEGV" not in message, message[:3000]
        else:
            assert query.isActive
    finally:
        query.stop()
    # The broker and the session are fine afterwards.
    create_topic(broker.bootstrap_servers, topic_name, 1)
