"""Exporting with the OpenTelemetry SDK, configured only by OTEL_* variables, to a real
OTLP/HTTP receiver on loopback."""

import logging

import pytest

from backlog_source.core.errors import ConfigError
from backlog_source.core.tracing import exporter
from backlog_source.core.tracing.context import SpanContextIds, SpanEventRecord, SpanRecord

ROOT = SpanContextIds(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
CHILD = SpanContextIds(ROOT.trace_id, 0x00F067AA0BA902B7)


def records():
    return [
        SpanRecord("backlog.bucket", CHILD, ROOT, 1_000, 5_000, {"messaging.destination.partition.id": "3"},
                   (SpanEventRecord("backlog.boundary_reached", 2_000, {"backlog.reached_offset": 10}),)),
        SpanRecord("backlog.phase", ROOT, None, 500, 6_000, {"backlog.topics": ("a", "b")}, error="DataLossError"),
    ]


@pytest.mark.parametrize("env, expected", [
    ({}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, []),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, []),
])
def test_which_exporters_the_environment_asks_for(env, expected):
    assert exporter.exporter_names(env) == expected


@pytest.mark.parametrize("env, message", [
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER='zipkin' names unknown exporter"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
     "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported; use one of http/protobuf, grpc"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"},
     "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='udp'"),
])
def test_a_bad_setting_is_an_error_naming_the_variable(env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        exporter.exporter_names(env)


def test_records_arrive_with_their_ids_parents_times_events_and_status(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    assert exporter.enabled()
    exporter.export(records())
    assert exporter.flush()
    spans = {s["name"]: s for s in receiver.spans}
    bucket, phase = spans["backlog.bucket"], spans["backlog.phase"]
    assert (bucket["trace_id"], bucket["span_id"], bucket["parent_span_id"]) == (
        "0af7651916cd43dd8448eb211c80319c", "00f067aa0ba902b7", "b7ad6b7169203331")
    assert (phase["span_id"], phase["parent_span_id"]) == ("b7ad6b7169203331", None)
    assert (bucket["start_ns"], bucket["end_ns"]) == (1_000, 5_000)
    assert bucket["events"] == [
        {"name": "backlog.boundary_reached", "at_ns": 2_000, "attributes": {"backlog.reached_offset": 10}}
    ]
    assert phase["attributes"] == {"backlog.topics": ["a", "b"]}
    assert (bucket["status"], phase["status"]) == ("unset", "error")
    assert bucket["resource"]["service.name"] == "backlog-source"
    assert bucket["scope"] == "backlog_source"


def test_service_name_comes_from_the_standard_variable(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    otel_env.setenv("OTEL_SERVICE_NAME", "orders-ingest")
    exporter.export(records()[:1])
    exporter.flush()
    assert receiver.spans[0]["resource"]["service.name"] == "orders-ingest"


def test_nothing_is_exported_without_configuration(otel_env, receiver):
    assert not exporter.enabled()
    exporter.export(records())
    assert exporter.flush()
    otel_env.setenv("OTEL_TRACES_EXPORTER", "none")
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    exporter.reset()
    assert not exporter.enabled()
    exporter.export(records())
    assert receiver.requests == 0


def test_a_bad_setting_disables_export_in_a_worker_instead_of_failing_it(otel_env, caplog):
    otel_env.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    assert not exporter.enabled()
    exporter.export(records())  # does not raise
    assert "tracing disabled in this process: OTEL_TRACES_EXPORTER='zipkin'" in caplog.text
    with pytest.raises(ConfigError, match="zipkin"):
        exporter.validate_environment()  # the driver's check fails load() instead


def test_grpc_protocol_uses_the_grpc_exporter(otel_env):
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
                        reason="the otlp-grpc extra is not installed")
    otel_env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    exporter.validate_environment()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    assert isinstance(exporter._exporter("otlp"), OTLPSpanExporter)


def test_an_unreachable_collector_costs_spans_not_the_caller(otel_env, caplog):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused
    otel_env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    assert exporter.enabled()  # the real OTLP exporter, not the no-op path
    with caplog.at_level(logging.WARNING):
        exporter.export(records())  # does not raise
        assert exporter.flush(timeout_ms=3_000) is True  # the flush ends; the export failed
    assert any(r.name.startswith("opentelemetry.exporter.otlp") and "Failed to export" in r.getMessage()
               for r in caplog.records)


def test_sigterm_exports_queued_spans_before_the_process_ends(receiver, tmp_path):
    # Spark ends the enumerator's worker with SIGTERM; spans still queued must get out first.
    import signal
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import os, sys, time
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = "{receiver.endpoint}"
        os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "60000"  # never on its own during this test
        sys.path.insert(0, {str(tmp_path.parent)!r})
        from backlog_source.core.tracing import exporter
        from backlog_source.core.tracing.context import SpanContextIds, SpanRecord
        exporter.export([SpanRecord("backlog.phase", SpanContextIds(1, 2), None, 1, 2)])
        print("queued", flush=True)
        time.sleep(60)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "queued"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM  # still ends as terminated
    assert [s["name"] for s in receiver.spans] == ["backlog.phase"]
