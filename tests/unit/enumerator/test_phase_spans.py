"""The enumerator's phase and bucket spans: exported once per run."""

from backlog_source.core.tracing import exporter, names
from backlog_source.core.tracing.context import SpanContextIds, SpanRecord
from backlog_source.enumerator.phase_spans import PhaseSpans


def test_the_planners_finished_spans_are_exported_once_per_run(otel_env, receiver):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    ids = SpanContextIds(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
    phase = SpanRecord(names.PHASE, ids, None, 1_000, 2_000, {names.SOURCE_ID: "src"})
    spans = PhaseSpans()
    spans.export([phase])
    # A phase's end is flushed at once: it is out before any other flush.
    assert [s["name"] for s in receiver.spans] == ["backlog.phase"]
    spans.export([phase])  # the same transition computed again by the next poll
    exporter.flush()
    assert len(receiver.spans) == 1


def test_only_the_latest_phases_span_ids_are_kept(otel_env):
    # Nothing configured: nothing is exported, the ids are kept all the same.
    first, second = 0x0AF7651916CD43DD8448EB211C80319C, 0x1AF7651916CD43DD8448EB211C80319C
    spans = PhaseSpans()
    spans.export([SpanRecord(names.BUCKET, SpanContextIds(first, n), None, 1, 2) for n in range(1, 10_001)])
    assert spans.remembered == 10_000
    spans.export([SpanRecord(names.BUCKET, SpanContextIds(second, 1), None, 1, 2)])
    assert spans.remembered == 1  # a run through many phases keeps one phase's ids, not every phase's
