"""Traces of a real Spark run: driver (enumerator), executors (readers) and the driver
program (mode switch) export to a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

from collections import Counter

import pytest

from backlog_source import start_backlog_aware
from backlog_source.core.tracing import exporter
from backlog_source.datasource import set_worker_environment
from backlog_source.demo.otlp_receiver import OtlpReceiver
from tests.integration.helpers import fill, make_topic, reader, wait_for

pytestmark = pytest.mark.integration

PARTITIONS = 3
#: Where an OpenTelemetry SDK exports over OTLP/HTTP when no endpoint is configured.
DEFAULT_OTLP_PORT = 4318


def run_backlog_aware(spark, broker, topic, tmp_path, name, before_stop=lambda: None):
    make_topic(broker, topic, PARTITIONS, per_partition=2_000)
    df = reader(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=500,
                **{"backlog.maxOffsetsPerTrigger": 2_500})
    writer = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / name))
    handle = start_backlog_aware(writer, "0 seconds", "300 milliseconds")
    try:
        wait_for(lambda: handle.mode == "low-latency", 180, "the switch to low latency")
        # Live records give the low-latency run its first batch, which ends the switch span.
        fill(broker, topic, PARTITIONS, 5, start=2_000)
        wait_for(lambda: handle.query.lastProgress is not None and handle.query.lastProgress["numInputRows"] > 0,
                 60, "a batch in low-latency mode")
        before_stop()
    finally:
        handle.stop()
    return handle


def test_one_backlog_phase_is_one_trace_across_driver_executors_and_listener(
    spark, broker, topic_name, tmp_path, otel_env, receiver
):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)  # this process: the listener
    otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
    workers = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "traced-job",
               "OTEL_BSP_SCHEDULE_DELAY": "200"}
    set_worker_environment(spark, workers)
    try:
        # The switch span ends at the new run's first batch, seen on the listener bus a little
        # after lastProgress shows it: stop only once it has been exported.
        handle = run_backlog_aware(
            spark, broker, topic_name, tmp_path, "traced",
            before_stop=lambda: receiver.wait_for(
                lambda spans: any(s["name"] == "backlog.mode_switch" for s in spans), timeout=30),
        )
    finally:
        set_worker_environment(spark, dict.fromkeys(workers))

    def complete(spans):
        names = Counter(s["name"] for s in spans)
        return (names["backlog.phase"] >= 1 and names["backlog.bucket"] >= PARTITIONS
                and names["backlog.read"] >= PARTITIONS and names["backlog.mode_switch"] >= 1)

    spans = [s for s in receiver.wait_for(complete, timeout=60)
             if s["attributes"].get("messaging.destination.name", topic_name) == topic_name]
    by_name: dict[str, list[dict]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    [phase] = by_name["backlog.phase"]
    buckets, reads, [switch] = by_name["backlog.bucket"], by_name["backlog.read"], by_name["backlog.mode_switch"]

    # One trace: phase -> bucket -> read, and the switch the phase caused.
    assert {s["trace_id"] for s in spans} == {phase["trace_id"]}
    assert phase["parent_span_id"] is None
    assert {b["parent_span_id"] for b in buckets} == {phase["span_id"]}
    assert sorted(b["attributes"]["messaging.destination.partition.id"] for b in buckets) == ["0", "1", "2"]
    bucket_ids = {b["span_id"]: b for b in buckets}
    assert sorted(r["parent_span_id"] for r in reads) == sorted(bucket_ids)  # one read per bucket
    assert switch["parent_span_id"] == phase["span_id"]

    catch_up = {k: v for k, v in phase["attributes"].items() if k.startswith("backlog.catch_up.")}
    assert {k: v for k, v in phase["attributes"].items() if k not in catch_up} == {
        "backlog.source_id": phase["attributes"]["backlog.source_id"], "messaging.system": "kafka",
        "backlog.topics": [topic_name], "backlog.bucket_count": PARTITIONS, "backlog.records": PARTITIONS * 2_000,
    }
    # 6,000 records at 2,500 per catch-up batch (backlog.maxOffsetsPerTrigger): three or more.
    assert catch_up["backlog.catch_up.batches"] >= 3 and "records" in catch_up["backlog.catch_up.bounded_by"], catch_up
    for bucket in buckets:
        attributes = bucket["attributes"]
        assert attributes["messaging.destination.name"] == topic_name
        assert attributes["backlog.start_offset"] == 0
        assert attributes["backlog.boundary_offset"] == 2_000  # 2,000 records
        assert attributes["backlog.reached_offset"] >= 2_000
        assert attributes["backlog.finished_by"] in ("event", "position")
    assert Counter(b["attributes"]["backlog.finished_by"] for b in buckets)["event"] >= 1
    for read in reads:
        bucket = bucket_ids[read["parent_span_id"]]
        assert [e["name"] for e in read["events"]] == ["backlog.boundary_reached"]
        assert read["attributes"]["messaging.destination.partition.id"] == (
            bucket["attributes"]["messaging.destination.partition.id"])
        assert read["start_ns"] >= bucket["start_ns"]
        assert read["resource"]["service.name"] == "traced-job"  # exported by an executor's worker
    assert phase["end_ns"] >= max(b["end_ns"] for b in buckets)

    transition = handle.transitions[0]
    assert switch["attributes"]["backlog.mode.from"] == "high-throughput"
    assert switch["attributes"]["backlog.mode.to"] == "low-latency"
    assert switch["attributes"]["backlog.batch_id"] == transition.batch_id
    assert switch["attributes"]["backlog.trigger.to_interval_seconds"] == pytest.approx(0.3)
    assert switch["attributes"]["backlog.mode_switch.method"] == transition.method == "in-place"
    assert switch["attributes"]["backlog.restart_seconds"] == 0.0
    # Decision -> the first trigger under the new interval (a batch, or an idle trigger).
    assert switch["attributes"]["backlog.mode_switch.ended_by"] in ("batch", "idle")
    assert (switch["end_ns"] - switch["start_ns"]) / 1e9 == pytest.approx(transition.effective_seconds, abs=0.002)


def test_nothing_is_exported_when_tracing_is_not_configured(spark, broker, topic_name, tmp_path, otel_env):
    # With nothing set, an SDK that exported anyway would send to its default endpoint.
    try:
        default_endpoint = OtlpReceiver(port=DEFAULT_OTLP_PORT).start()
    except OSError as exc:
        pytest.fail(f"port {DEFAULT_OTLP_PORT} is busy, so this check cannot listen there: {exc}")
    try:
        assert not exporter.enabled()
        run_backlog_aware(spark, broker, topic_name, tmp_path, "untraced")
        # Instead of waiting for an export that should not come: every executor Python worker
        # (the environment the readers ran in) says whether it exports, and flushes what it
        # would have queued, so anything queued has been sent by the time the job returns.
        def exports_spans_here(_) -> bool:  # nested: pickled by value, not imported by the worker
            from backlog_source.core.tracing import exporter as worker_exporter

            worker_exporter.flush()
            return worker_exporter.enabled()

        answers = spark.sparkContext.parallelize(range(8), 8).map(exports_spans_here).collect()
        assert answers == [False] * 8
        assert not exporter.enabled() and exporter.flush()
        assert default_endpoint.requests == 0
    finally:
        default_endpoint.stop()
