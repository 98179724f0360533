"""The backlog phase's trace: which spans finish when, with which ids, across restarts."""

import json
from dataclasses import replace

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import OffsetFormatError
from backlog_source.core.tracing import names
from backlog_source.core.tracing.context import SpanContextIds
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.phase_trace import advance
from backlog_source.enumerator.state import BacklogState, Finish, FinishedBy, SourceOffset, bucket_traceparent
from backlog_source.split.planning import ReadBudget
from tests.unit.enumerator.test_boundaries import event, make

A0, A1, B0 = Bucket("a", 0), Bucket("a", 1), Bucket("b", 0)


def started():
    trace, spans = advance(None, "src", {A0: 100, A1: 50}, {}, {A0: 0, A1: 10}, now_ms=1_000)
    assert spans == []
    return trace


def test_recording_boundaries_opens_a_phase_with_one_open_span_per_bucket():
    trace = started()
    assert trace.open and set(trace.buckets) == {A0, A1}
    assert (trace.topics, trace.bucket_count, trace.records) == (("a",), 2, 140)
    assert trace.buckets[A1].start_offset == 10 and trace.buckets[A1].boundary == 50


def test_a_finished_bucket_exports_its_span_as_a_child_of_the_phase():
    trace = started()
    trace, spans = advance(trace, "src", {A1: 50}, {A0: Finish(FinishedBy.EVENT, 104)}, {}, now_ms=4_000)
    [span] = spans
    assert span.name == names.BUCKET
    assert span.parent == trace.ids and span.ids == trace.bucket_ids(A0, 100)
    assert (span.start_ns, span.end_ns) == (1_000_000_000, 4_000_000_000)
    assert span.attributes == {
        names.MESSAGING_SYSTEM: "kafka", names.DESTINATION_NAME: "a", names.DESTINATION_PARTITION: "0",
        names.START_OFFSET: 0, names.BOUNDARY_OFFSET: 100, names.REACHED_OFFSET: 104,
        names.FINISHED_BY: FinishedBy.EVENT,
    }
    assert trace.open and set(trace.buckets) == {A1}


def test_the_last_bucket_ends_the_phase_and_the_trace_stays_for_the_mode_switch():
    trace = started()
    trace, _ = advance(trace, "src", {A1: 50}, {A0: Finish(FinishedBy.EVENT, 100)}, {}, now_ms=2_000)
    ended, spans = advance(trace, "src", {}, {A1: Finish(FinishedBy.POSITION, 50)}, {}, now_ms=3_000)
    assert [s.name for s in spans] == [names.BUCKET, names.PHASE]
    phase = spans[1]
    assert phase.parent is None and phase.ids == trace.ids
    assert phase.attributes == {
        names.SOURCE_ID: "src", names.MESSAGING_SYSTEM: "kafka", names.TOPICS: ("a",),
        names.BUCKET_COUNT: 2, names.BACKLOG_RECORDS: 140, names.CATCH_UP_BATCHES: 0,
    }
    assert spans[0].attributes[names.FINISHED_BY] == FinishedBy.POSITION
    assert not ended.open and ended.ids == trace.ids
    # Nothing pending and nothing new: no more spans.
    assert advance(ended, "src", {}, {}, {}, now_ms=9_000) == (ended, [])


def test_backlog_after_a_finished_phase_is_a_new_trace():
    trace = started()
    ended, _ = advance(trace, "src", {}, {}, {}, now_ms=2_000)
    again, spans = advance(ended, "src", {B0: 900}, {}, {B0: 500}, now_ms=5_000)
    assert spans == []
    assert again.ids.trace_id != trace.ids.trace_id
    assert (again.started_ms, again.topics, again.bucket_count, again.records) == (5_000, ("b",), 1, 400)


def test_a_bucket_added_mid_phase_joins_the_open_phase():
    trace = started()
    joined, spans = advance(trace, "src", {A0: 100, A1: 50, B0: 7}, {}, {B0: 0}, now_ms=2_000)
    assert spans == [] and joined.ids == trace.ids
    assert (joined.topics, joined.bucket_count, joined.records) == (("a", "b"), 3, 147)


def test_reset_and_vanished_buckets_say_so_and_a_reset_one_opens_a_new_span():
    trace = started()
    trace, spans = advance(trace, "src", {A0: 30}, {}, {A0: 0}, now_ms=2_000)  # a-0 reset; a-1 gone
    by = {s.attributes[names.DESTINATION_PARTITION]: s.attributes[names.FINISHED_BY] for s in spans}
    assert by == {"0": FinishedBy.RESET, "1": FinishedBy.VANISHED}
    assert trace.open and trace.buckets[A0].boundary == 30
    assert bucket_traceparent(trace, A0) == trace.bucket_ids(A0, 30).traceparent != trace.bucket_ids(A0, 100).traceparent


def test_the_trace_survives_the_offset_dict_and_splits_get_bucket_context():
    trace = started()
    offset = SourceOffset("src", {A0: 0, A1: 10}, backlog=BacklogState(pending={A0: 100, A1: 50}), trace=trace)
    restored = offset_codec.decode(json.loads(json.dumps(offset_codec.encode(offset))))
    assert restored.trace == trace
    parsed = SpanContextIds.parse(bucket_traceparent(restored.trace, A0))
    assert parsed == trace.bucket_ids(A0, 100)
    assert bucket_traceparent(restored.trace, B0) is None and bucket_traceparent(None, A0) is None


@pytest.mark.parametrize("bad", [
    "00-abc-def-01",
    {"traceparent": "nonsense", "started_ms": 1},
    {"traceparent": "00-" + "0" * 32 + "-" + "1" * 16 + "-01", "started_ms": 1},  # all-zero trace id
    {"traceparent": "00-" + "1" * 32 + "-" + "1" * 16 + "-01"},  # no start time
    {"traceparent": "00-" + "1" * 32 + "-" + "1" * 16 + "-01", "started_ms": 1, "buckets": {"a": {"0": [1]}}},
])
def test_a_malformed_trace_in_the_offset_is_a_clear_error(bad):
    with pytest.raises(OffsetFormatError, match="offset field 'trace"):
        offset_codec.decode({"v": 2, "source_id": "x", "positions": {}, "trace": bad})


# ----------------------------------------------------------------- the enumerator's spans


def test_the_enumerator_exports_bucket_and_phase_spans_once_the_boundary_batch_commits(monkeypatch):
    exported = []
    monkeypatch.setattr("backlog_source.core.tracing.exporter.export", lambda records: exported.extend(records))
    monkeypatch.setattr("backlog_source.core.tracing.exporter.enabled", lambda: True)  # tracing on: spans are built
    enumerator, client, control = make()
    start = enumerator.initial_offset()
    assert start.trace is not None and set(start.trace.buckets) == {A0, Bucket("a", 2)}
    first = enumerator.latest_offset(start, ReadBudget(max_records=10))  # reaches no boundary
    assert exported == [] and first.trace == replace(start.trace, batches=1, bounded_by=first.trace.bounded_by)
    second = enumerator.latest_offset(first, ReadBudget())  # reaches both; open until it commits
    assert exported == [] and second.trace.open and not second.processing_backlog
    control.values.append(event(second, A0))
    # The first poll after the commit ends the spans and the phase, even with no new data
    # (and so no batch): a trace shows the phase's end when it happened.
    assert enumerator.latest_offset(second, ReadBudget()) is second
    assert [(s.name, s.attributes.get(names.FINISHED_BY)) for s in exported] == [
        (names.BUCKET, "event"), (names.BUCKET, "position"), (names.PHASE, None)]
    assert exported[-1].ids == start.trace.ids and len({s.ids.trace_id for s in exported}) == 1
    # Later polls, and the batch that finally carries the change, export nothing again.
    assert enumerator.latest_offset(second, ReadBudget()) is second
    client.append("a", 1, 1)
    third = enumerator.latest_offset(second, ReadBudget())
    assert len(exported) == 3 and not third.trace.open


def test_without_tracing_the_trace_moves_the_same_and_no_span_is_built():
    trace = started()
    traced, spans = advance(trace, "src", {}, {A0: Finish(FinishedBy.EVENT, 100)}, {}, now_ms=3_000)
    untraced, none = advance(trace, "src", {}, {A0: Finish(FinishedBy.EVENT, 100)}, {}, now_ms=3_000, spans=False)
    assert [s.name for s in spans] == [names.BUCKET, names.BUCKET, names.PHASE] and none == []
    assert untraced == traced and not untraced.open
