"""``format("kafka")`` (Spark's own connector, the exact Spark version under test) and
``format("backlog")`` side by side on the same Apache Kafka topics with the same options:
what a user's sink sees must be identical, every column of every row and the rows of every
batch. Where the two legitimately differ, README's "Differences" table lists it and a test
here pins it.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from backlog_source.demo.topics import produce
from tests.integration.differential import run_to_end, start
from tests.integration.helpers import make_topic, wait_for

pytestmark = pytest.mark.integration


def test_process_all_available_waits_for_records_already_in_kafka(spark, broker, topic_name, tmp_path):
    """`StreamingQuery.processAllAvailable()`: "Blocks until all available data in the source
    has been processed and committed to the sink". A query at startingOffsets=latest, then
    records produced and flushed, then processAllAvailable(): both sources have them all, on
    every round (the idle-poll cache once answered "nothing new" here: 0 rows, 10 of 10)."""
    make_topic(broker, topic_name, 2)
    queries = {source: start(spark, source, broker.bootstrap_servers, {"subscribe": topic_name},
                             tmp_path / source, trigger={"processingTime": "0 seconds"})
               for source in ("backlog", "kafka")}  # ours first: nothing to wait for before it
    try:
        for query, _ in queries.values():
            query.processAllAvailable()
        # One producer kept open, as a user's test has it: produce and flush take a few
        # milliseconds, well inside the 100 ms the idle-poll cache used to answer from.
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
        produced = 0
        for round_ in range(10):
            for partition in (0, 1, 1):
                producer.produce(topic_name, value=f"r{round_}-{partition}".encode(), partition=partition)
            assert producer.flush(30) == 0
            produced += 3
            for source, (query, collected) in queries.items():
                query.processAllAvailable()
                assert len(collected.rows()) == produced, (source, round_, collected.rows())
        assert queries["kafka"][1].rows() == queries["backlog"][1].rows()
    finally:
        for query, _ in queries.values():
            query.stop()


def test_every_column_of_every_row_is_spark_s(spark, broker, topic_name, tmp_path):
    """`KafkaRecordToRowConverter`: keys and values (null ones too), topic, partition,
    offset, timestamp (CreateTime as produced), timestampType and headers (null without)."""
    make_topic(broker, topic_name, 3)
    produce(broker.bootstrap_servers, topic_name,
            [(p, None if n % 3 == 0 else f"k{n}".encode(), None if n % 5 == 0 else f"v{n}".encode())
             for n in range(30) for p in range(3)], timestamp_ms=1_700_000_000_123)
    produce(broker.bootstrap_servers, topic_name, [(1, b"h", b"with headers")],
            headers=[("a", b"1"), ("b", None), ("a", b"2")])
    for include_headers in ("false", "true"):
        results = run_to_end(spark, broker.bootstrap_servers, {"subscribe": topic_name, "startingOffsets": "earliest",
                                                               "includeHeaders": include_headers},
                             tmp_path / include_headers)
        assert results["kafka"].rows() == results["backlog"].rows()
        assert len(results["backlog"].rows()) == 91


def test_min_offsets_per_trigger_and_max_trigger_delay_batch_alike(spark, broker, topic_name, tmp_path):
    """`KafkaMicroBatchStream.delayBatch`: under minOffsetsPerTrigger a run's first batch runs
    at once; later, fewer records than the minimum wait for maxTriggerDelay, and enough run at
    once. Both sources make the same batches of the same rows: [10], [10] (delayed), [30]."""
    make_topic(broker, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    options = {"subscribe": topic_name, "minOffsetsPerTrigger": 20, "maxTriggerDelay": "3s"}
    queries = {source: start(spark, source, broker.bootstrap_servers, options, tmp_path / source,
                             trigger={"processingTime": "200 milliseconds"}) for source in ("backlog", "kafka")}
    try:
        for query, _ in queries.values():
            wait_for(lambda q=query: q.lastProgress is not None, 120, "the queries to run")
        total = 0
        for count in (10, 10, 30):
            for n in range(count):
                producer.produce(topic_name, value=f"{total + n}".encode(), partition=0)
            assert producer.flush(30) == 0
            total += count
            for source, (query, collected) in queries.items():
                wait_for(lambda q=query, c=collected: len(c.rows()) == total or q.exception(), 120,
                         f"{source} to read {total} records")
                assert query.exception() is None, query.exception()
        sizes = {source: collected.non_empty_batch_sizes() for source, (_, collected) in queries.items()}
        assert sizes["backlog"] == sizes["kafka"] == [10, 10, 30]
        assert queries["backlog"][1].rows() == queries["kafka"][1].rows()
    finally:
        for query, _ in queries.values():
            query.stop()
