"""The default catch-up budget against a small driver and a sink that collects each batch
into the driver (``foreachBatch`` + ``toArrow()``): the batches are sized from the driver's
heap, and the whole backlog drains.

The job runs in a process of its own with ``spark.driver.memory=512m`` (the shared session's
driver is larger), through the same job as ``benchmarks/driver_heap.py``, which measures the
edge on Spark's default 1 GiB driver.
"""

from __future__ import annotations

import pytest

from backlog_source.core.jvm_heap import default_catch_up_bytes
from backlog_source.demo.topics import produce
from benchmarks.driver_heap import run_job
from tests.integration.helpers import make_topic

pytestmark = pytest.mark.integration

PARTITIONS = 4
VALUE_BYTES = 100_000
RECORDS = 2_000  # about 200 MB: a batch of it all (the old 256 MiB default) is more than a 512 MiB driver holds


def test_the_default_budget_follows_a_small_drivers_heap_and_drains_into_a_collecting_sink(broker, topic_name,
                                                                                          tmp_path):
    make_topic(broker, topic_name, PARTITIONS)
    produce(broker.bootstrap_servers, topic_name,
            ((i % PARTITIONS, b"k%07d" % i, b"v" * VALUE_BYTES) for i in range(RECORDS)))
    spec = {"bootstrap": broker.bootstrap_servers, "topic": topic_name, "sink": "arrow", "budget": "default",
            "driver_memory": "512m", "checkpoint": str(tmp_path / "checkpoint")}

    result = run_job(spec, tmp_path)

    assert result.get("failed") is None, result
    assert result["records"] == RECORDS
    budget = default_catch_up_bytes(512 << 20)
    assert budget == 64 << 20
    assert result["budget_bytes"] == budget  # sized from the job's driver heap, read under Spark
    record_bytes = VALUE_BYTES + 8
    assert result["largest_batch_records"] * record_bytes <= budget + PARTITIONS * record_bytes
    assert result["batches"] >= RECORDS * record_bytes // (budget + PARTITIONS * record_bytes)
