import pytest

from backlog_source.core.tracing.context import SpanContextIds, derived_span_id, ms_to_ns, new_span_id, new_trace_id


def test_traceparent_round_trips_and_is_always_sampled():
    ids = SpanContextIds(trace_id=0xABC, span_id=0x12)
    assert ids.traceparent == "00-00000000000000000000000000000abc-0000000000000012-01"
    assert SpanContextIds.parse(ids.traceparent) == ids
    assert SpanContextIds.parse("  00-00000000000000000000000000000ABC-0000000000000012-00 ") == ids


@pytest.mark.parametrize("text", [None, "", "garbage", "01-00000000000000000000000000000abc-0000000000000012-01",
                                  "00-00000000000000000000000000000000-0000000000000012-01",
                                  "00-00000000000000000000000000000abc-0000000000000000-01"])
def test_a_missing_or_invalid_traceparent_starts_no_trace(text):
    assert SpanContextIds.parse(text) is None


def test_derived_span_ids_are_the_same_in_every_process_and_differ_by_input():
    assert derived_span_id(1, "orders", 0, 5000) == derived_span_id(1, "orders", 0, 5000)
    assert derived_span_id(1, "orders", 0, 5000) != derived_span_id(1, "orders", 1, 5000)
    assert derived_span_id(2, "orders", 0, 5000) != derived_span_id(1, "orders", 0, 5000)
    assert 0 < derived_span_id(1, "x") < 2**64


def test_new_ids_are_never_zero_and_fit_their_width():
    assert all(0 < new_trace_id() < 2**128 and 0 < new_span_id() < 2**64 for _ in range(100))
    assert ms_to_ns(1.5) == 1_500_000
