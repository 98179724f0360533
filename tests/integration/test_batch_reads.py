"""Batch reads, ``spark.read.format("backlog")``, beside ``spark.read.format("kafka")`` on the
same Apache Kafka topics with the same options: the same rows, every column, or both fail.

Hypothesis draws the offsets JSON (specific offsets, -2 and -1 where Spark allows them, and
where it refuses them), the timestamp forms, ``minPartitions`` / ``maxRecordsPerPartition``,
``includeHeaders`` and patterns with and without anchors; CI runs a fixed number of examples
on a fixed seed. ``BACKLOG_SOURCE_SIDE_BY_SIDE_EXAMPLES`` runs more.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backlog_source.demo.topics import create_topic
from tests.integration.differential import BASE_TS, both, fill_counts

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("BACKLOG_SOURCE_SIDE_BY_SIDE_EXAMPLES", "6"))


def test_a_batch_read_reads_what_sparks_batch_read_reads(spark, broker, topic_name):
    create_topic(broker.bootstrap_servers, topic_name, 3)
    fill_counts(broker.bootstrap_servers, topic_name, [20, 0, 7], headers=[("h", b"1")])
    cases = [
        {},
        {"startingOffsets": json.dumps({topic_name: {"0": 5, "1": -2, "2": -2}}),
         "endingOffsets": json.dumps({topic_name: {"0": 15, "1": -1, "2": -1}})},
        {"startingTimestamp": str(BASE_TS + 3_000), "endingTimestamp": str(BASE_TS + 10_000),
         "startingOffsetsByTimestampStrategy": "latest"},
        {"startingTimestamp": str(BASE_TS + 3_000)},  # partition 1 has no record: both fail (strategy error)
        {"minPartitions": "4", "includeHeaders": "true"},
    ]
    for options in cases:
        kafka, backlog = both(spark, broker, {"subscribe": topic_name, **options})
        if isinstance(kafka, str):
            assert isinstance(backlog, str), (options, kafka, backlog)
            continue
        assert backlog == kafka, options
    kafka, backlog = both(spark, broker, {"subscribe": topic_name})
    assert len(backlog) == 27


@pytest.mark.parametrize("options, ours", [
    ({"startingOffsets": "latest"}, "can't be 'latest' for a batch read"),
    ({"endingOffsets": "earliest"}, "can't be 'earliest' for a batch read"),
    ({"startingOffsets": "JSON:-1"}, "can't be -1 (latest) for a batch read"),
    ({"endingOffsets": "JSON:-2"}, "can't be -2 (earliest) for a batch read"),
])
def test_what_sparks_batch_read_refuses_is_refused(spark, broker, topic_name, options, ours):
    create_topic(broker.bootstrap_servers, topic_name, 1)
    fill_counts(broker.bootstrap_servers, topic_name, [3])
    options = {k: (json.dumps({topic_name: {"0": int(v[5:])}}) if v.startswith("JSON:") else v) for k, v in options.items()}
    kafka, backlog = both(spark, broker, {"subscribe": topic_name, **options})
    assert isinstance(kafka, str) and isinstance(backlog, str), (kafka, backlog)
    assert ours in backlog, backlog


def test_a_pattern_selects_the_topics_sparks_pattern_selects(spark, broker):
    prefix = f"p{uuid.uuid4().hex[:8]}"
    for suffix in ("_t1", "_t2", "_t1x", "_u1"):
        create_topic(broker.bootstrap_servers, prefix + suffix, 1)
        fill_counts(broker.bootstrap_servers, prefix + suffix, [2])
    for pattern in (f"{prefix}_t[0-9]+", f"^{prefix}_t[0-9]+$", f"{prefix}_(t|u)1"):
        kafka, backlog = both(spark, broker, {"subscribePattern": pattern})
        assert not isinstance(kafka, str), kafka
        assert backlog == kafka, pattern
        assert {r[2] for r in backlog} <= {prefix + s for s in ("_t1", "_t2", "_t1x", "_u1")}


@st.composite
def ranges(draw):
    counts = [draw(st.integers(0, 12)) for _ in range(draw(st.integers(1, 3)))]
    start = {str(p): draw(st.sampled_from([-2, *range(0, n + 1)])) for p, n in enumerate(counts)}
    end = {str(p): draw(st.sampled_from([-1, *range(0, n + 1)])) for p, n in enumerate(counts)}
    options = {"startingOffsets": start, "endingOffsets": end}
    if draw(st.booleans()):
        options["minPartitions"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        options["maxRecordsPerPartition"] = draw(st.integers(1, 5))
    return counts, options


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=ranges())
def test_generated_offset_ranges_read_alike_or_fail_alike(spark, broker, case):
    counts, drawn = case
    topic = f"b-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap_servers, topic, len(counts))
    fill_counts(broker.bootstrap_servers, topic, counts)
    options = {"subscribe": topic, **{k: (json.dumps({topic: v}) if isinstance(v, dict) else str(v))
                                      for k, v in drawn.items()}}
    kafka, backlog = both(spark, broker, options)
    if isinstance(kafka, str) or isinstance(backlog, str):
        assert isinstance(kafka, str) and isinstance(backlog, str), f"only one failed for {options}: {kafka} / {backlog}"
        return
    assert backlog == kafka, options
