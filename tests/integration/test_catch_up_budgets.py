"""Catch-up batches bounded in bytes, on Apache Kafka beside Spark's own ``format("kafka")``:
the same rows, in batches whose bytes the byte budget bounds (measured from the rows the
sink received), and the plan of each batch in the progress' ``endOffset``.

Spark's Kafka source counts records only; the test shows what that means on a backlog of
mixed record sizes: its batches under a record cap vary in bytes by the record mix, ours stay
within the budget.
"""

from __future__ import annotations

import json
import random

import pytest

from backlog_source.demo.topics import produce
from backlog_source.events.sizes_report import split_size_reports
from tests.integration.differential import start
from tests.integration.helpers import control_messages, make_topic

pytestmark = pytest.mark.integration

BUDGET = 200_000  # bytes per catch-up batch


def mixed_records(partitions: int, per_partition: int, seed: int = 7):
    """Nine in ten values of 200 B, one in ten of 16-64 KB, keys of 8 B."""
    rng = random.Random(seed)
    for n in range(per_partition):
        for p in range(partitions):
            size = rng.randint(16_000, 64_000) if rng.random() < 0.1 else 200
            yield p, f"k{n:07d}".encode(), bytes([65 + p]) * size


def small_records(partitions: int, per_partition: int):
    """Values of 100 B, keys of 8 B."""
    for n in range(per_partition):
        for p in range(partitions):
            yield p, f"k{n:07d}".encode(), bytes([65 + p]) * 100


#: workload -> (records per partition, its generator, format("kafka")'s record cap: about a
#: budget's worth of the mix's average record, as a user would size it).
WORKLOADS = {"mixed": (300, mixed_records, 40), "small": (3_000, small_records, 1_500)}


def batch_bytes(rows) -> int:
    return sum(len(r[0] or b"") + len(r[1] or b"") for r in rows)


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_a_catch_up_reads_the_same_rows_in_batches_the_byte_budget_bounds(spark, broker, topic_name, tmp_path,
                                                                          workload):
    per_partition, records, kafka_cap = WORKLOADS[workload]
    make_topic(broker, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, records(2, per_partition))
    options = {"subscribe": topic_name, "startingOffsets": "earliest"}
    queries = {
        "backlog": start(spark, "backlog", broker.bootstrap_servers, options, tmp_path / "backlog",
                         trigger={"availableNow": True}, backlog_only={"backlog.maxBytesPerTrigger": BUDGET}),
        "kafka": start(spark, "kafka", broker.bootstrap_servers, {**options, "maxOffsetsPerTrigger": kafka_cap},
                       tmp_path / "kafka", trigger={"availableNow": True}),
    }
    for query, _ in queries.values():
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    ours, spark_rows = queries["backlog"][1], queries["kafka"][1]
    assert ours.rows() == spark_rows.rows() and len(ours.rows()) == 2 * per_partition

    largest_record = max(batch_bytes([r]) for r in ours.rows())
    sizes = [batch_bytes(b) for b in ours.batches if b]
    assert len(sizes) > 2  # the backlog (~3.6 MB mixed, ~650 kB small) is read in bounded batches, not one
    # Within the budget, but for one record per partition (the sizes were measured where each
    # batch starts; a sample is a fetch, so a batch can hold a few more large records than
    # the sample saw: allow two of the largest per partition).
    assert max(sizes) <= BUDGET + 2 * 2 * largest_record, (sizes, largest_record)
    # Not far below it either: the budget is what the batches are sized to.
    assert max(sizes) >= BUDGET / 2, sizes

    plans = [json.loads(p["sources"][0]["endOffset"])["plan"] for p in queries["backlog"][0].recentProgress
             if p["numInputRows"]]
    assert plans and all(p["budget_bytes"] == BUDGET for p in plans[:-1])
    assert {p["bounded_by"] for p in plans[:-1]} == {"bytes"}
    if workload == "mixed":
        # Spark's record cap: the same number of records per batch, whatever they weigh.
        spark_sizes = [batch_bytes(b) for b in spark_rows.batches if b]
        assert max(spark_sizes) > 2 * min(spark_sizes)


def test_a_time_target_reads_the_same_rows_bounded_by_the_byte_budget(spark, broker, topic_name, tmp_path):
    """``backlog.targetBatchDuration`` never lets a batch exceed ``backlog.maxBytesPerTrigger``
    (its first batch, before any throughput is known, is 16 MiB: above this budget)."""
    make_topic(broker, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, small_records(2, 3_000))
    options = {"subscribe": topic_name, "startingOffsets": "earliest"}
    queries = {
        "backlog": start(spark, "backlog", broker.bootstrap_servers, options, tmp_path / "backlog",
                         trigger={"availableNow": True},
                         backlog_only={"backlog.maxBytesPerTrigger": BUDGET, "backlog.targetBatchDuration": "1h"}),
        "kafka": start(spark, "kafka", broker.bootstrap_servers, options, tmp_path / "kafka",
                       trigger={"availableNow": True}),
    }
    for query, _ in queries.values():
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    ours, spark_rows = queries["backlog"][1], queries["kafka"][1]
    assert ours.rows() == spark_rows.rows() and len(ours.rows()) == 6_000
    largest_record = max(batch_bytes([r]) for r in ours.rows())
    sizes = [batch_bytes(b) for b in ours.batches if b]
    assert len(sizes) > 2 and max(sizes) <= BUDGET + 2 * 2 * largest_record, sizes
    plans = [json.loads(p["sources"][0]["endOffset"])["plan"] for p in queries["backlog"][0].recentProgress
             if p["numInputRows"]]
    assert {p["bounded_by"] for p in plans[:-1]} == {"bytes"}


def test_catch_up_tasks_report_exactly_the_bytes_they_read_for_the_next_plan(spark, broker, topic_name, tmp_path):
    """Each task of a catch-up batch publishes what it read on the control topic: the reports
    add up to the bytes and records the sink received in those batches, to the byte. (That
    the next batch is planned from them, not from a sample, is unit-tested in
    ``tests/unit/enumerator/test_enumerator.py``.)"""
    make_topic(broker, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, small_records(2, 3_000))
    control = f"{topic_name}-events"
    budget = 250_000  # about 2,300 records of 108 B: enough for a report to replace the sample
    query, ours = start(spark, "backlog", broker.bootstrap_servers, {"subscribe": topic_name, "startingOffsets": "earliest"},
                        tmp_path / "backlog", trigger={"availableNow": True},
                        backlog_only={"backlog.maxBytesPerTrigger": budget, "backlog.eventsTopic": control})
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    assert len(ours.rows()) == 6_000
    ends = {p["batchId"]: json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress if p["numInputRows"]}
    reporting = [batch for batch, end in ends.items() if end["plan"].get("bytes")]
    assert len(reporting) >= 2, ends
    _, reported = split_size_reports(control_messages(broker, control), next(iter(ends.values()))["source_id"])
    assert set(reported) == {topic_name}
    assert reported[topic_name].bytes == sum(batch_bytes(ours.batches[b]) for b in reporting)
    assert reported[topic_name].offsets == sum(len(ours.batches[b]) for b in reporting)
    sizes = [batch_bytes(b) for b in ours.batches if b]
    assert max(sizes) <= budget + 2 * 108, sizes


def test_tasks_reading_several_topics_report_each_topics_bytes(spark, broker, topic_name, tmp_path):
    """Two topics of different record sizes (108 B and 2,008 B) read by one query, often by
    the same task: each task's report splits what it read by topic, and the reports add up,
    per topic, to the bytes and records the sink received in the batches that carry them.
    The byte budget bounds every batch whatever its topics' mix."""
    small, large = f"{topic_name}-small", f"{topic_name}-large"
    make_topic(broker, small, 2)
    make_topic(broker, large, 2)
    produce(broker.bootstrap_servers, small, small_records(2, 2_000))
    produce(broker.bootstrap_servers, large, ((p, f"k{n:07d}".encode(), b"L" * 2_000) for n in range(150) for p in (0, 1)))
    control = f"{topic_name}-events"
    budget = 250_000
    query, ours = start(spark, "backlog", broker.bootstrap_servers,
                        {"subscribe": f"{small},{large}", "startingOffsets": "earliest"}, tmp_path / "backlog",
                        trigger={"availableNow": True},
                        backlog_only={"backlog.maxBytesPerTrigger": budget, "backlog.eventsTopic": control})
    try:
        assert query.awaitTermination(300), "the AvailableNow query did not end within 300 s"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    assert len(ours.rows()) == 4_000 + 300
    ends = {p["batchId"]: json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress if p["numInputRows"]}
    reporting = [batch for batch, end in ends.items() if end["plan"].get("bytes")]
    assert len(reporting) >= 2, ends
    _, reported = split_size_reports(control_messages(broker, control), next(iter(ends.values()))["source_id"])
    assert set(reported) == {small, large}, reported
    for topic in (small, large):
        rows = [r for b in reporting for r in ours.batches[b] if r[2] == topic]
        assert reported[topic].bytes == batch_bytes(rows), topic
        assert reported[topic].offsets == len(rows), topic
    sizes = [batch_bytes(b) for b in ours.batches if b]
    assert len(sizes) > 2 and max(sizes) <= budget + 2 * 2 * 2_008, sizes
