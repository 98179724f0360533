"""The backlog metrics over OTLP: from a progress event on the session's listener to data
points at a real OTLP/HTTP receiver (names, units, kinds, attributes, values)."""

import json
import socket
import sys
from types import SimpleNamespace

import pytest

from backlog_source.core.errors import ConfigError
from backlog_source.core.tracing import exporter as tracing_exporter
from backlog_source.metrics import exporter, names
from backlog_source.mode_switch import disable_metrics, enable_metrics
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.session_metrics import session_metrics
from tests.fakes import FakeSpark, iso_timestamp, terminated_event

TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "started_ms": 1_000,
         "topics": ["orders"], "bucket_count": 2, "records": 1500}


def offset(positions, backlog=None, plan=None):
    value = {"v": 2, "source_id": "src", "positions": {"orders": {str(p): o for p, o in positions.items()}},
             "backlog": {"orders": {str(p): o for p, o in (backlog or {}).items()}}, "trace": TRACE}
    if plan:
        value["plan"] = plan
    return json.dumps(value)


def progress(batch_id, start, end, latest, rows, name="orders-job"):
    source = SimpleNamespace(startOffset=start, endOffset=end, latestOffset=json.dumps({"orders": latest}),
                             numInputRows=rows)
    return SimpleNamespace(kind="progress", progress=SimpleNamespace(
        id="q1", runId="r1", name=name, batchId=batch_id, timestamp=iso_timestamp(2_000), sources=[source]))


@pytest.mark.parametrize("env, expected", [
    ({}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:1/v1/metrics"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, []),
    ({"OTEL_METRICS_EXPORTER": "console"}, ["console"]),
    ({"OTEL_METRICS_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, []),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_METRICS_EXPORTER": "otlp"}, []),
])
def test_metrics_are_off_unless_the_environment_asks_for_them(env, expected):
    assert exporter.exporter_names(env) == expected


def test_a_bad_metrics_setting_is_an_error_naming_the_variable():
    with pytest.raises(ConfigError, match="OTEL_METRICS_EXPORTER='statsd' names unknown exporter.*prometheus"):
        exporter.exporter_names({"OTEL_METRICS_EXPORTER": "statsd"})
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_PROMETHEUS_PORT='http' is not a port"):
        exporter.exporter_names({"OTEL_METRICS_EXPORTER": "prometheus", "OTEL_EXPORTER_PROMETHEUS_PORT": "http"})


def test_prometheus_is_a_metrics_exporter_only_and_says_which_extra_it_needs(monkeypatch):
    assert exporter.exporter_names({"OTEL_METRICS_EXPORTER": "prometheus"}) == ["prometheus"]
    assert exporter.prometheus_address({}) == ("localhost", 9464)  # the specification's defaults
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER='prometheus' names unknown exporter"):
        tracing_exporter.exporter_names({"OTEL_TRACES_EXPORTER": "prometheus"})
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.prometheus", None)  # the extra not installed
    with pytest.raises(ConfigError, match=r"pip install 'backlog-source\[prometheus\]'"):
        exporter.exporter_names({"OTEL_METRICS_EXPORTER": "prometheus"})


def test_a_prometheus_port_already_taken_is_an_error_naming_the_variable(otel_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        otel_env.setenv("OTEL_METRICS_EXPORTER", "prometheus")
        otel_env.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
        otel_env.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(taken.getsockname()[1]))
        with pytest.raises(ConfigError, match="cannot serve on 127.0.0.1:.*OTEL_EXPORTER_PROMETHEUS_PORT"):
            enable_metrics(FakeSpark())


def test_with_metrics_off_nothing_is_attached_or_built(otel_env):
    spark = FakeSpark()
    assert enable_metrics(spark) is False
    assert spark.listeners == []


def test_a_known_backlog_arrives_as_named_points_with_units_and_attributes(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{receiver.endpoint}/v1/metrics")
    otel_env.setenv("OTEL_SERVICE_NAME", "orders-job")
    spark = FakeSpark()
    assert enable_metrics(spark) is True
    metrics = session_metrics(spark)
    try:
        # batch 0 (Spark reports no start): offsets 0 -> 50; batch 1: 50 -> 100 of both
        # partitions, 3,000 bytes planned (30 per offset). Kafka had 1,000 and 500; the
        # boundaries are 1,000 and 500.
        first = offset({0: 50, 1: 50}, {0: 1000, 1: 500}, {"bounded_by": "bytes", "bytes": 3000, "budget_bytes": 3000})
        spark.post(progress(0, None, first, {"0": 1000, "1": 500}, rows=100))
        spark.post(progress(1, first, offset({0: 100, 1: 100}, {0: 1000, 1: 500},
                                             {"bounded_by": "bytes", "bytes": 3000, "budget_bytes": 3000}),
                            {"0": 1000, "1": 500}, rows=100))
        metrics.metrics.adopted("q1", "orders-job", Mode.HIGH_THROUGHPUT.value)  # as a mode switch reports it
        assert metrics.export.flush()
        points = receiver.wait_for_points(lambda p: {i.name for i in names.ALL} - {names.MODE_SWITCHES.name}
                                          <= {x["name"] for x in p}, timeout=30)
    finally:
        disable_metrics(spark)
    latest = {}
    for point in points:
        latest[(point["name"], point["attributes"].get(names.PARTITION), point["attributes"].get(names.MODE_ATTRIBUTE))] = point
    pending = latest[(names.PENDING_RECORDS.name, "0", None)]
    assert (pending["value"], pending["unit"], pending["kind"]) == (900.0, "{record}", "gauge")
    assert pending["attributes"] == {names.QUERY_ID: "q1", names.QUERY_NAME: "orders-job", names.SOURCE_ID: "src",
                                     names.MESSAGING_SYSTEM: "kafka", names.TOPIC: "orders", names.PARTITION: "0"}
    assert pending["resource"]["service.name"] == "orders-job" and pending["scope"] == names.METER
    assert latest[(names.PENDING_BYTES.name, "1", None)]["value"] == 400 * 30.0
    assert latest[(names.PENDING_BYTES.name, "1", None)]["unit"] == "By"
    assert latest[(names.PROCESSING_BACKLOG.name, None, None)]["value"] == 1.0
    assert latest[(names.BACKLOG_DURATION.name, None, None)]["unit"] == "s"
    assert latest[(names.BACKLOG_DURATION.name, None, None)]["value"] > 0
    records = latest[(names.RECORDS_IN.name, None, None)]
    assert (records["value"], records["kind"]) == (200.0, "sum")
    assert latest[(names.BYTES_IN.name, None, None)]["value"] == 6000.0
    assert latest[(names.CATCH_UP_BATCHES.name, None, None)]["value"] == 2.0
    assert latest[(names.MODE.name, None, "high-throughput")]["value"] == 1.0
    assert latest[(names.MODE.name, None, "low-latency")]["value"] == 0.0


def test_a_terminated_query_ends_its_series_and_disable_leaves_nothing_running(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", f"{receiver.endpoint}/v1/metrics")
    spark = FakeSpark()
    enable_metrics(spark)
    metrics = session_metrics(spark)
    spark.post(progress(0, None, offset({0: 10}, {0: 20}), {"0": 20}, rows=10))
    assert metrics.metrics.observe(names.RECORDS_IN)
    spark.post(terminated_event(SimpleNamespace(id="q1", runId="r1")))
    assert metrics.metrics.observe(names.RECORDS_IN) == []
    disable_metrics(spark)
    disable_metrics(spark)  # idempotent
    assert vars(spark).get("_backlog_source_session_metrics") is None
    spark.post(progress(1, None, offset({0: 20}), {"0": 20}, rows=10))  # detached: nothing recorded
    assert metrics.metrics.observe(names.RECORDS_IN) == []
