"""The mode switch's span: what it carries, as plain values a collector stores."""

from backlog_source.core.tracing import exporter
from backlog_source.core.tracing.names import SwitchEndedBy
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.switch_span import SwitchSpan
from backlog_source.mode_switch.switchers import SwitchMethod

PHASE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_switch_span_records_modes_method_and_end_as_their_values_under_its_phase(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    span = SwitchSpan(phase_traceparent=PHASE, decided_at=100.0, from_mode=Mode.HIGH_THROUGHPUT,
                      to_mode=Mode.LOW_LATENCY, method=SwitchMethod.IN_PLACE, batch_id=7, from_interval_s=0.0,
                      to_interval_s=0.25, apply_seconds=0.002, restart_seconds=0.0, query_id="q", run_id="r")
    span.end(SwitchEndedBy.BATCH, 100.5)
    exporter.flush()
    [exported] = receiver.spans
    assert exported["name"] == "backlog.mode_switch"
    assert (exported["trace_id"], exported["parent_span_id"]) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    attributes = exported["attributes"]
    assert (attributes["backlog.mode.from"], attributes["backlog.mode.to"], attributes["backlog.mode_switch.method"],
            attributes["backlog.mode_switch.ended_by"]) == ("high-throughput", "low-latency", "in-place", "batch")
    assert attributes["backlog.batch_id"] == 7 and attributes["backlog.trigger.to_interval_seconds"] == 0.25


def test_a_switch_without_a_phase_is_the_root_of_its_own_trace(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    span = SwitchSpan(phase_traceparent=None, decided_at=100.0, from_mode=Mode.LOW_LATENCY,
                      to_mode=Mode.HIGH_THROUGHPUT, method=SwitchMethod.RESTART, batch_id=3, from_interval_s=0.25,
                      to_interval_s=0.0, apply_seconds=1.2, restart_seconds=1.2, query_id="q", run_id="r2")
    span.end(SwitchEndedBy.STOP, 101.0)
    exporter.flush()
    [exported] = receiver.spans
    assert not exported["parent_span_id"] and exported["attributes"]["backlog.mode_switch.ended_by"] == "stop"
