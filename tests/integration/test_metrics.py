"""The backlog as OpenTelemetry metrics, on classic PySpark with Apache Kafka: a known
backlog read by a real query arrives at an in-process OTLP receiver with the values the
batch left (names, units, attributes, values)."""

from __future__ import annotations

import pytest

from backlog_source import disable_metrics, enable_metrics
from backlog_source.metrics import names
from backlog_source.mode_switch.session_metrics import session_metrics
from tests.integration.helpers import make_topic, reader, wait_for

pytestmark = pytest.mark.integration


def test_a_known_backlog_after_one_batch(spark, broker, topic_name, tmp_path, otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{receiver.endpoint}/v1/metrics")
    make_topic(broker, topic_name, 2, per_partition=3_000, value_size=100)
    assert enable_metrics(spark)
    # One batch of 2,000 records, then nothing for an hour: the metrics hold still.
    query = (reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
                    **{"backlog.maxOffsetsPerTrigger": 2_000})
             .writeStream.format("noop").queryName("metrics_known_backlog")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="1 hour").start())
    metrics = session_metrics(spark)
    try:
        def recorded() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"query failed: {query.exception()}")
            return bool(metrics.metrics.observe(names.RECORDS_IN))

        wait_for(recorded, 120, "the first batch's metrics")
        assert metrics.export.flush()
        points = receiver.wait_for_points(lambda p: any(x["name"] == names.RECORDS_IN.name for x in p), 30)
    finally:
        query.stop()
        disable_metrics(spark)

    def value(instrument, partition=None):
        # The last export's point (a periodic export may have come before the flush).
        *_, point = [p for p in points if p["name"] == instrument.name
                     and p["attributes"].get(names.PARTITION) == partition]
        assert point["unit"] == instrument.unit
        assert point["attributes"][names.QUERY_ID] == str(query.id)
        assert point["attributes"][names.QUERY_NAME] == "metrics_known_backlog"
        return point

    for partition in ("0", "1"):
        pending = value(names.PENDING_RECORDS, partition)
        assert pending["value"] == 2_000  # 6,000 records, 2,000 read (1,000 per partition)
        assert pending["attributes"][names.TOPIC] == topic_name
        assert pending["kind"] == "gauge"
    assert value(names.RECORDS_IN)["value"] == 2_000 and value(names.RECORDS_IN)["kind"] == "sum"
    assert value(names.PROCESSING_BACKLOG)["value"] == 1
    assert value(names.CATCH_UP_BATCHES)["value"] == 1
    assert value(names.BACKLOG_DURATION)["value"] > 0
    assert not [p for p in points if p["name"] == names.MODE.name]  # no mode switch follows this query
