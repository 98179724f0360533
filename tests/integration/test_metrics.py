"""The backlog as OpenTelemetry metrics, on classic PySpark with Apache Kafka: a known
backlog read by a real query arrives at an in-process OTLP receiver with the values the
batch left (names, units, attributes, values), and each series keeps its attributes from
the query's start to its end."""

from __future__ import annotations

import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from backlog_source import disable_metrics, enable_metrics, start_backlog_aware
from backlog_source.demo.apache_kafka import free_port
from backlog_source.metrics import names
from backlog_source.mode_switch.session_metrics import session_metrics
from tests.integration.helpers import make_topic, reader, wait_for

pytestmark = pytest.mark.integration


def test_a_known_backlog_after_one_batch(spark, broker, topic_name, tmp_path, otel_env, receiver):
    """Over OTLP and, at once, to a Prometheus scraping the driver (``OTEL_METRICS_EXPORTER=otlp,prometheus``)."""
    otel_env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{receiver.endpoint}/v1/metrics")
    otel_env.setenv("OTEL_METRICS_EXPORTER", "otlp,prometheus")
    otel_env.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    otel_env.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(free_port()))
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
        host, port = metrics.export.prometheus_address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as scrape:
            scraped = scrape.read().decode()
    finally:
        query.stop()
        disable_metrics(spark)
    with pytest.raises(OSError):  # disable_metrics stopped the server
        urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5)

    # What a Prometheus sees: OpenTelemetry's names in Prometheus' form, one series per partition.
    pending = {sample.labels["messaging_destination_partition_id"]: sample
               for family in text_string_to_metric_families(scraped) for sample in family.samples
               if sample.name == "backlog_source_pending_records"}
    assert {p: s.value for p, s in pending.items()} == {"0": 2_000, "1": 2_000}, scraped
    assert pending["0"].labels["spark_streaming_query_name"] == "metrics_known_backlog"
    assert pending["0"].labels["messaging_destination_name"] == topic_name
    assert "backlog_source_records_in_total" in scraped and "backlog_source_processing_backlog" in scraped

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


def test_a_named_querys_series_carry_its_name_from_its_start(spark, broker, topic_name, tmp_path, otel_env,
                                                               receiver):
    """The mode series of a ``start_backlog_aware`` query are exported from its start: an
    export before its first batch commits (held in the sink) and every export after carry
    the name, so a metrics backend sees one series per attribute set, not two."""
    otel_env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{receiver.endpoint}/v1/metrics")
    make_topic(broker, topic_name, 2, per_partition=100)
    release = threading.Event()  # the first batch commits only once the first export was read

    def write(batch, batch_id):
        release.wait(120)
        batch.count()

    writer = (reader(spark, broker, subscribe=topic_name, startingOffsets="earliest").writeStream
              .foreachBatch(write).queryName("metrics_named_from_start")
              .option("checkpointLocation", str(tmp_path / "ckpt")))
    handle = start_backlog_aware(writer, "0 seconds", "1 hour")
    metrics = session_metrics(spark)
    query_id = str(handle.query.id)
    try:
        assert metrics.export.flush()
        before = receiver.wait_for_points(lambda p: any(x["name"] == names.MODE.name for x in p), 30)
        assert handle.query.lastProgress is None  # nothing committed yet: these came before the first batch
        release.set()

        def caught_up() -> bool:
            if handle.query.exception() is not None:
                raise AssertionError(f"query failed: {handle.query.exception()}")
            return handle.mode == "low-latency" and bool(metrics.metrics.observe(names.RECORDS_IN))

        wait_for(caught_up, 120, "the first batch and the switch to low-latency")
        assert metrics.export.flush()
        points = receiver.wait_for_points(lambda p: any(x["name"] == names.MODE_SWITCHES.name for x in p), 30)
    finally:
        release.set()
        handle.stop()
        disable_metrics(spark)

    ours = [p for p in points if p["attributes"].get(names.QUERY_ID) == query_id]
    assert {p["name"] for p in ours} >= {names.MODE.name, names.MODE_SWITCHES.name, names.RECORDS_IN.name,
                                         names.PENDING_RECORDS.name, names.PROCESSING_BACKLOG.name}
    unnamed = [(p["name"], p["attributes"]) for p in ours
               if p["attributes"].get(names.QUERY_NAME) != "metrics_named_from_start"]
    assert unnamed == []

    def mode_series(exported):
        return {frozenset(p["attributes"].items()) for p in exported
                if p["name"] == names.MODE.name and p["attributes"].get(names.QUERY_ID) == query_id}

    assert len(mode_series(before)) == 2  # one per backlog.mode
    assert mode_series(points) == mode_series(before)
