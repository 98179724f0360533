"""Where a user can tell `format("backlog")` from Spark's `format("kafka")`, it must not
differ: behaviours of Spark's Kafka source (`connector/kafka-0-10-sql`, and its
`KafkaMicroBatchSourceSuite`), checked on Apache Kafka and real Spark. Each test names the
Spark class and method it matches. The cases the embedded broker of earlier rounds could not
stage (transactions, added partitions, deleted records, timestamp starts, a topic deleted
mid-read) are in `test_kafka_semantics.py`, side by side with Spark's own `format("kafka")`;
`test_side_by_side*.py` compare the two sources row for row.
Spark's custom metrics (`minOffsetsBehindLatest`...) are a documented difference: PySpark's
Python data source API has no way to report them (README, "Differences from format("kafka")").
"""

from __future__ import annotations

import json
import math

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql.utils import AnalysisException

from backlog_source.demo.topics import create_topic, produce
from tests.integration.differential import start
from tests.integration.helpers import fill, log_end_offsets, make_topic, reader, start_query, wait_for
from tests.support.topics import delete_topic

pytestmark = pytest.mark.integration


def run_available_now(df, tmp_path, sink=None, name="ckpt"):
    """Run ``df`` with Trigger.AvailableNow into ``sink`` (a foreachBatch function, default:
    count and ignore); returns the query after it ended (failed or not)."""
    query = start_query(df.writeStream.foreachBatch(sink or (lambda batch, _: batch.count())).trigger(availableNow=True)
                        .option("checkpointLocation", str(tmp_path / name)).start)
    try:
        query.awaitTermination(300)
    except StreamingQueryException:
        pass  # the caller reads query.exception()
    assert not query.isActive, "the AvailableNow run did not end within 300 s"
    return query


def batch_rows(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress]


def collect(spark, df, tmp_path, table):
    """Every row ``df`` yields up to the current log end (AvailableNow into memory)."""
    query = start_query(df.writeStream.format("memory").queryName(table).trigger(availableNow=True)
                        .option("checkpointLocation", str(tmp_path / table)).start)
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return spark.table(table).collect()


# ---------------------------------------------------------------- data loss and wrong values


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_available_now_fails_when_its_planned_end_is_gone(spark, broker, topic_name, tmp_path, fail_on_data_loss):
    """`KafkaMicroBatchStream.verifyEndOffsetForTriggerAvailableNow`: offsets recorded at the
    start of an AvailableNow run that no longer exist fail the query, whatever
    failOnDataLoss says (it never ends "successfully" short of what it promised)."""
    make_topic(broker, topic_name, 2, per_partition=200)

    def recreate_shorter(batch_df, batch_id):
        batch_df.count()  # the batch's read is over: no consumer holds the topic
        if batch_id == 0:
            delete_topic(broker.bootstrap_servers, topic_name)
            create_topic(broker.bootstrap_servers, topic_name, 2)
            fill(broker, topic_name, 2, 5)

    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=100,
                failOnDataLoss=fail_on_data_loss)
    query = run_available_now(df, tmp_path, recreate_shorter)
    assert query.exception() is not None, "the AvailableNow run ended short of its planned end without an error"
    assert "AvailableNow" in str(query.exception())


def test_a_timestamp_that_overflows_microseconds_fails_naming_the_record(spark, broker, topic_name, tmp_path):
    """`KafkaRecordToRowConverter` converts with `DateTimeUtils.fromJavaTimestamp`, whose
    exact arithmetic fails on a timestamp that does not fit in microseconds; the record is
    never wrapped into a wrong date."""
    # Kafka refuses a CreateTime further than message.timestamp.after.max.ms (1 hour) in the
    # future; a topic may allow any, as this one does.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic_name, 1, config={"message.timestamp.after.max.ms": str(2**63 - 1)})]
                        )[topic_name].result(30)
    produce(broker.bootstrap_servers, topic_name, [(0, b"k", b"v")], timestamp_ms=1_712_345_678_123_456_789)
    query = run_available_now(reader(spark, broker, subscribe=topic_name, startingOffsets="earliest"), tmp_path)
    assert query.exception() is not None
    message = str(query.exception())
    for part in (topic_name, "partition 0", "offset 0", "1712345678123456789"):
        assert part in message, message[-2000:]


def test_headers_are_null_for_a_record_without_headers(spark, broker, topic_name, tmp_path):
    """`KafkaRecordToRowConverter.toInternalRowWithHeaders`: no headers -> NULL, not []."""
    create_topic(broker.bootstrap_servers, topic_name, 1)
    produce(broker.bootstrap_servers, topic_name, [(0, b"plain", b"v")])
    produce(broker.bootstrap_servers, topic_name, [(0, b"with", b"v")], headers=[("h", b"1"), ("h", None)])
    rows = collect(spark, reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", includeHeaders="true"),
                   tmp_path, topic_name.replace("-", "_"))
    by_key = {bytes(r.key): r.headers for r in rows}
    assert by_key[b"plain"] is None
    assert [(h.key, None if h.value is None else bytes(h.value)) for h in by_key[b"with"]] == [("h", b"1"), ("h", None)]


def test_null_keys_and_values_are_null(spark, broker, topic_name, tmp_path):
    """KafkaMicroBatchSourceSuite, "SPARK-27494: read kafka record containing null key/values"."""
    create_topic(broker.bootstrap_servers, topic_name, 1)
    produce(broker.bootstrap_servers, topic_name, [(0, None, None), (0, None, b"v"), (0, b"k", None)])
    rows = collect(spark, reader(spark, broker, subscribe=topic_name, startingOffsets="earliest"), tmp_path,
                   topic_name.replace("-", "_"))
    pairs = {(r.offset, r.key and bytes(r.key), r.value and bytes(r.value)) for r in rows}
    assert {(0, None, None), (1, None, b"v"), (2, b"k", None)} <= pairs


# ---------------------------------------------------------------- stalls and extra batches


def test_available_now_runs_exactly_the_batches_the_limit_needs(spark, broker, topic_name, tmp_path):
    """KafkaMicroBatchSourceSuite, "Trigger.AvailableNow": 15 records, maxOffsetsPerTrigger 5
    -> 3 batches of 5, no empty batch (the backlog state travels with the data batches)."""
    create_topic(broker.bootstrap_servers, topic_name, 5)
    assert produce(broker.bootstrap_servers, topic_name, [(0, None, f"foo-{n}".encode()) for n in range(15)]) == 15
    query = run_available_now(reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
                                     maxOffsetsPerTrigger=5), tmp_path)
    assert query.exception() is None
    assert batch_rows(query) == [5, 5, 5]


def test_the_first_batch_does_not_wait_for_max_trigger_delay(spark, broker, topic_name, tmp_path):
    """`KafkaMicroBatchStream.delayBatch`: `lastTriggerMillis` starts at 0, so under
    minOffsetsPerTrigger the first trigger of a run runs whatever is available, without
    waiting the default 15-minute maxTriggerDelay."""
    records = make_topic(broker, topic_name, 2, per_partition=5)
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", minOffsetsPerTrigger=1_000)
    query = start_query(df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt")).start)
    try:
        wait_for(lambda: any(p["numInputRows"] == records for p in query.recentProgress), 120,
                 "the first batch (a 15-minute wait would time this out)")
    finally:
        query.stop()


def test_a_topic_found_by_the_pattern_is_read_in_the_batch_that_finds_it(spark, broker, topic_name, tmp_path):
    """`KafkaMicroBatchStream.latestOffset` plans a new partition from its earliest offset
    in the same batch (`rateLimit`'s `fromNew`), so there is no batch that only parks it."""
    first, later = f"{topic_name}-a", f"{topic_name}-b"
    make_topic(broker, first, 1, per_partition=10)
    query, sink = start(spark, "backlog", broker.bootstrap_servers,
                        {"subscribePattern": f"{topic_name}-.*", "startingOffsets": "earliest"}, tmp_path / "ckpt",
                        trigger={"processingTime": "200 milliseconds"})
    try:
        wait_for(lambda: any(p["numInputRows"] == 10 for p in query.recentProgress), 120, "the first topic")
        # A topic created empty and filled a moment later may be found in between (a batch
        # with nothing of it, as in Spark): create and fill it while a batch holds the query.
        sink.hold_next_batch()
        produce(broker.bootstrap_servers, first, [(0, None, b"one more")])
        sink.wait_held()
        records = make_topic(broker, later, 2, per_partition=10)
        sink.release()
        finder = wait_for(lambda: next((p for p in query.recentProgress
                                        if later in json.loads(p["sources"][0]["endOffset"])["positions"]), None),
                          120, "the batch that finds the new topic")
        assert finder["numInputRows"] == records
        assert all(p["numInputRows"] > 0 for p in query.recentProgress if p["batchId"] >= 0 and p["sources"][0]["startOffset"]
                   and p["sources"][0]["startOffset"] != p["sources"][0]["endOffset"])
    finally:
        query.stop()


# ---------------------------------------------------------------- same answers as Spark


def spark_rate_limit(limit: int, start: dict[int, int], end: dict[int, int]) -> dict[int, int]:
    """`KafkaMicroBatchStream.rateLimit`, transcribed: each partition gets `limit * lag /
    total lag`, rounded down, but up to 1 when below 1 (no partition starves)."""
    lags = {p: end[p] - start[p] for p in end if end[p] - start[p] > 0}
    total = sum(lags.values())
    out = {}
    for p, e in end.items():
        if p not in lags:
            out[p] = e
            continue
        prorate = limit * (lags[p] / total)
        out[p] = min(e, start[p] + (math.ceil(prorate) if prorate < 1 else math.floor(prorate)))
    return out


def test_max_offsets_per_trigger_is_shared_as_spark_shares_it(spark, broker, topic_name, tmp_path):
    """`KafkaMicroBatchStream.rateLimit`: the first batch's end offsets, partition by
    partition, are Spark's for lags 7, 13 and 80 under a limit of 10."""
    create_topic(broker.bootstrap_servers, topic_name, 3)
    for partition, count in enumerate((7, 13, 80)):
        produce(broker.bootstrap_servers, topic_name, [(partition, None, b"v")] * count)
    ends = log_end_offsets(broker, topic_name)
    query = run_available_now(reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
                                     maxOffsetsPerTrigger=10), tmp_path)
    assert query.exception() is None
    first = json.loads(query.recentProgress[0]["sources"][0]["endOffset"])["positions"][topic_name]
    assert {int(p): o for p, o in first.items()} == spark_rate_limit(10, {p: 0 for p in ends}, ends)


def test_min_partitions_splits_only_the_large_range(spark, broker, topic_name, tmp_path):
    """`KafkaOffsetRangeCalculator.getRanges` (SPARK-36576): with minPartitions=6 and ranges
    of 1, 1 and 10,000 records, the small ranges stay whole and the large one is cut in
    four: six Spark partitions, each small one alone."""
    create_topic(broker.bootstrap_servers, topic_name, 3)
    produce(broker.bootstrap_servers, topic_name, [(0, None, b"v"), (1, None, b"v")] + [(2, None, b"v")] * 10_000)
    assert log_end_offsets(broker, topic_name) == {0: 1, 1: 1, 2: 10_000}
    seen: list[tuple[int, list[int]]] = []

    def record(batch_df, batch_id):
        sizes = batch_df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
        seen.append((batch_df.rdd.getNumPartitions(), sorted(sizes)))

    query = run_available_now(reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", minPartitions=6),
                              tmp_path, record)
    assert query.exception() is None
    assert seen == [(6, [1, 1, 2_500, 2_500, 2_500, 2_500])]


def test_java_client_settings_spark_users_set_are_accepted(spark, broker, topic_name, tmp_path):
    """`KafkaSourceProvider` hands `kafka.*` options to the Java client, which uses the ones
    it knows and warns about the rest; here they are translated or dropped with a warning,
    never a failure after load() (issue 13.8)."""
    records = make_topic(broker, topic_name, 2, per_partition=10)
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
                **{"kafka.default.api.timeout.ms": 20_000, "kafka.request.timeout.ms": 15_000,
                   "kafka.max.poll.records": 500, "kafka.fetch.max.wait.ms": 100, "kafka.receive.buffer.bytes": 65_536})
    query = run_available_now(df, tmp_path)
    assert query.exception() is None
    assert sum(batch_rows(query)) == records


def test_the_subscription_problem_is_reported_before_missing_servers(spark):
    """`KafkaSourceProvider.validateStreamOptions` checks the strategy (exactly one of
    subscribe, subscribePattern, assign) before `kafka.bootstrap.servers`."""
    with pytest.raises((AnalysisException, PySparkException)) as raised:
        spark.readStream.format("backlog").load()
    message = str(raised.value)
    assert "subscribe" in message and "assign" in message
    assert "kafka.bootstrap.servers" not in message.split("\n")[0]


def first_problem(spark, source: str, kind: str, options: dict, tmp_path) -> str:
    """What a read of ``source`` with ``options`` fails with, where Spark raises it: at
    ``load()``, when the query starts, or (a batch) when it is collected."""
    with pytest.raises((AnalysisException, PySparkException, StreamingQueryException)) as raised:
        reading = spark.readStream if kind == "stream" else spark.read
        df = reading.format(source).options(**options).load()
        if kind == "batch":
            df.collect()
        else:
            query = start_query(df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / source))
                                .trigger(availableNow=True).start)
            try:
                query.awaitTermination(120)
            finally:
                query.stop()
    return str(raised.value)


@pytest.mark.parametrize("kind, options, spark_says, ours", [
    ("stream", {"endingOffsets": "latest"}, "ending offset not valid in streaming queries",
     "option 'endingOffsets' is for batch queries only"),
    ("batch", {"endingOffsets": "latest"}, "One of the following options must be specified",
     "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set"),
    ("batch", {"startingOffsets": "latest"}, "starting offset can't be latest for batch queries",
     "option 'startingOffsets' can't be 'latest' for a batch read"),
])
def test_a_problem_a_stream_and_a_batch_read_order_differently_is_reported_as_spark_reports_it(
        spark, broker, tmp_path, kind, options, spark_says, ours):
    """`KafkaSourceProvider.validateStreamOptions` refuses the ending options, and
    `validateBatchOptions` checks the starting and ending options, before
    `validateGeneralOptions` looks for a subscription: with both problems, each kind of read
    is told the first one of its kind (issue 46, item 5)."""
    options = {"kafka.bootstrap.servers": broker.bootstrap_servers, **options}  # and no subscription
    assert spark_says in first_problem(spark, "kafka", kind, options, tmp_path)
    assert ours in first_problem(spark, "backlog", kind, options, tmp_path)


def test_option_names_are_case_insensitive(spark, broker, topic_name, tmp_path):
    """KafkaMicroBatchSourceSuite, "get offsets from case insensitive parameters"."""
    records = make_topic(broker, topic_name, 1, per_partition=4)
    df = (spark.readStream.format("backlog").option("KAFKA.BOOTSTRAP.SERVERS", broker.bootstrap_servers)
          .option("SubScribe", topic_name).option("STARTINGOFFSETS", "earliest").load())
    assert sum(batch_rows(run_available_now(df, tmp_path))) == records


def test_a_rate_limit_of_long_max_does_not_overflow(spark, broker, topic_name, tmp_path):
    """KafkaMicroBatchSourceSuite, "SPARK-26718 Rate limit set to Long.Max should not overflow integer"."""
    records = make_topic(broker, topic_name, 2, per_partition=5)
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=2**63 - 1)
    query = run_available_now(df, tmp_path)
    assert query.exception() is None and batch_rows(query) == [records]


def test_the_progress_reports_the_latest_offsets(spark, broker, topic_name, tmp_path):
    """`KafkaMicroBatchStream.reportLatestOffset`: the source progress's `latestOffset` is
    the log end the batch saw, in the offsets' shape, even when the limit read less."""
    make_topic(broker, topic_name, 2, per_partition=50)
    ends = {str(p): o for p, o in log_end_offsets(broker, topic_name).items()}
    query = run_available_now(reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
                                     maxOffsetsPerTrigger=20), tmp_path)
    first = query.recentProgress[0]["sources"][0]
    assert json.loads(first["latestOffset"])[topic_name] == ends  # Spark's shape: {topic: {partition: offset}}
    assert json.loads(first["endOffset"])["positions"][topic_name] != ends
