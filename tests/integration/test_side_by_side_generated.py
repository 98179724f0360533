"""Generated side-by-side runs: hypothesis draws a topic's shape (partitions, records, null
keys and values, headers, timestamps) and the options both sources take (every
``startingOffsets`` form, the timestamp options, ``maxOffsetsPerTrigger``, ``minPartitions``,
``maxRecordsPerPartition``, ``includeHeaders``) and an ending trigger (``AvailableNow`` or
``Once``); ``format("kafka")`` and ``format("backlog")`` must deliver the same rows, every
column, in the same batches, or fail alike.

CI runs a fixed number of examples on a fixed seed (``derandomize``), so a red run is
reproducible. A longer search: ``BACKLOG_SOURCE_SIDE_BY_SIDE_EXAMPLES=200 pytest
tests/integration/test_side_by_side_generated.py`` (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backlog_source.demo.topics import create_topic
from tests.integration.differential import SourceFailed, outcome

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("BACKLOG_SOURCE_SIDE_BY_SIDE_EXAMPLES", "6"))
BASE_TS = 1_700_000_000_000


@st.composite
def topic_shapes(draw):
    partitions = draw(st.integers(1, 3))
    counts = [draw(st.integers(0, 30)) for _ in range(partitions)]
    null_keys = draw(st.booleans())
    headers = draw(st.sampled_from([None, [("h", b"1")], [("h", None), ("h", b"2")]]))
    # Records of each partition get timestamps BASE_TS + 1000 * n: timestamp options can land
    # between, on, and past them.
    return {"partitions": partitions, "counts": counts, "null_keys": null_keys, "headers": headers}


@st.composite
def source_options(draw, shape):
    options: dict[str, str] = {}
    start = draw(st.sampled_from(["earliest", "latest", "json", "timestamp", "by-timestamp", "default"]))
    partitions = range(shape["partitions"])
    if start in ("earliest", "latest"):
        options["startingOffsets"] = start
    elif start == "json":
        chosen = {}
        for p in partitions:
            chosen[str(p)] = draw(st.sampled_from([-2, -1, *range(0, shape["counts"][p] + 1)]))
        options["startingOffsets"] = json.dumps({"TOPIC": chosen})
    elif start == "timestamp":
        options["startingTimestamp"] = str(BASE_TS + draw(st.integers(0, 32)) * 1000 - draw(st.sampled_from([0, 1])))
        options["startingOffsetsByTimestampStrategy"] = draw(st.sampled_from(["error", "latest"]))
    elif start == "by-timestamp":
        chosen = {str(p): BASE_TS + draw(st.integers(0, 32)) * 1000 for p in partitions}
        options["startingOffsetsByTimestamp"] = json.dumps({"TOPIC": chosen})
        options["startingOffsetsByTimestampStrategy"] = draw(st.sampled_from(["error", "latest"]))
    if draw(st.booleans()):
        options["maxOffsetsPerTrigger"] = str(draw(st.integers(1, 40)))
    if draw(st.booleans()):
        options["minPartitions"] = str(draw(st.integers(1, 5)))
    if draw(st.booleans()):
        options["maxRecordsPerPartition"] = str(draw(st.integers(1, 20)))
    options["includeHeaders"] = draw(st.sampled_from(["true", "false"]))
    return options


@st.composite
def cases(draw):
    shape = draw(topic_shapes())
    return shape, draw(source_options(shape)), draw(st.sampled_from(["availableNow", "once"]))


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=cases())
def test_generated_options_and_shapes_read_alike(spark, broker, tmp_path, case):
    shape, options, trigger = case
    topic = f"g-{uuid.uuid4().hex[:10]}"
    create_topic(broker.bootstrap_servers, topic, shape["partitions"])
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    for p, count in enumerate(shape["counts"]):
        for n in range(count):
            key = None if shape["null_keys"] and n % 2 == 0 else f"k{n}".encode()
            producer.produce(topic, partition=p, key=key, value=None if n % 7 == 3 else f"{p}-{n}".encode(),
                             headers=shape["headers"], timestamp=BASE_TS + n * 1000)
    assert producer.flush(30) == 0
    options = {key: value.replace('"TOPIC"', json.dumps(topic)) for key, value in options.items()}
    options["subscribe"] = topic
    results = outcome(spark, broker.bootstrap_servers, options, tmp_path / topic,
                      trigger={"availableNow": True} if trigger == "availableNow" else {"once": True})
    kafka, backlog = results["kafka"], results["backlog"]
    if isinstance(kafka, SourceFailed) or isinstance(backlog, SourceFailed):
        assert isinstance(kafka, SourceFailed) and isinstance(backlog, SourceFailed), (
            f"only one source failed for {options} ({trigger}): kafka={kafka!r} backlog={backlog!r}")
        return
    assert backlog.rows() == kafka.rows(), f"rows differ for {options} ({trigger})"
    assert backlog.non_empty_batch_sizes() == kafka.non_empty_batch_sizes(), f"batches differ for {options} ({trigger})"
