"""install() at job bootstrap, on classic PySpark with Apache Kafka: every backlog query of the
session switches with its backlog, however and whenever it was started; other queries are
untouched; a query the user restarts is taken over again in its new run."""

from __future__ import annotations

import pytest

from backlog_source import install
from backlog_source.mode_switch import Mode
from tests.integration.helpers import fill, make_topic, reader, wait_for
from tests.integration.test_mode_switch import spark_trigger_interval_ms

pytestmark = pytest.mark.integration

LOW_MS = 700


def start(df, tmp_path, name, trigger="3 seconds"):
    return (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / name))
            .trigger(processingTime=trigger).start())


def backlog_frame(spark, broker, topic, **options):
    return reader(spark, broker, subscribe=topic, startingOffsets="earliest",
                  **{"backlog.maxOffsetsPerTrigger": 2_000, **options})


OWN_LOW_MS = 1_100  # a query's own low-latency interval (option backlog.lowLatencyInterval)


def test_every_backlog_query_switches_in_place_and_nothing_else_is_touched(spark, broker, topic_name, tmp_path):
    topics = [f"{topic_name}-{n}" for n in range(3)]
    for topic in topics:
        make_topic(broker, topic, 2, per_partition=3_000)  # 6,000 records at 2,000 a batch: a backlog
    before = start(backlog_frame(spark, broker, topics[0]), tmp_path, "before")  # started before install
    installation = install(spark, "0 seconds", f"{LOW_MS} milliseconds")
    queries = []
    try:
        after = start(backlog_frame(spark, broker, topics[1], **{"backlog.lowLatencyInterval": f"{OWN_LOW_MS}ms"}),
                      tmp_path, "after")
        other = start(spark.readStream.format("rate").option("rowsPerSecond", 5).load(), tmp_path, "other")
        queries = [before, after, other]

        def low_latency(query) -> bool:
            adopted = installation.adopted.get(str(query.id))
            if query.exception() is not None:
                raise AssertionError(f"query failed: {query.exception()}")
            return adopted is not None and adopted.mode is Mode.LOW_LATENCY

        for query, low_ms in ((before, LOW_MS), (after, OWN_LOW_MS)):
            wait_for(lambda q=query: low_latency(q), 180, "the backlog query to be switched to low latency")
            assert spark_trigger_interval_ms(query) == low_ms
            assert installation.adopted[str(query.id)].started_interval_ms in (3_000, 0)
        assert str(other.id) not in installation.adopted and spark_trigger_interval_ms(other) == 3_000

        # The user restarts a query on its checkpoint with its own trigger; records arrive (a
        # new run reports its backlog flag with its first batch).
        after.stop()
        restarted = start(backlog_frame(spark, broker, topics[1]), tmp_path, "after", trigger="2 seconds")
        queries.append(restarted)
        fill(broker, topics[1], 2, 10, start=3_000)
        wait_for(lambda: installation.adopted.get(str(restarted.id)) is not None
                 and installation.adopted[str(restarted.id)].run_id == str(restarted.runId)
                 and installation.adopted[str(restarted.id)].mode is Mode.LOW_LATENCY, 180,
                 "the restarted query to be taken over again")
        assert spark_trigger_interval_ms(restarted) == LOW_MS
    finally:
        installation.uninstall()
        for query in queries:
            query.stop()
    # Uninstalled: a new backlog query keeps the trigger it was started with.
    late = start(backlog_frame(spark, broker, topics[2]), tmp_path, "late")
    try:
        wait_for(lambda: late.lastProgress is not None and late.lastProgress["numInputRows"] > 0, 120, "a batch")
        assert spark_trigger_interval_ms(late) == 3_000 and str(late.id) not in installation.adopted
    finally:
        late.stop()
