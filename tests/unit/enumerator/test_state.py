"""The source's state as values: what a batch's end offset says about backlog and reads."""

from backlog_source.core.buckets import Bucket
from backlog_source.core.tracing.context import SpanContextIds
from backlog_source.enumerator.state import (
    BY_POSITION,
    BacklogState,
    EventCounts,
    EventOutcome,
    OpenBucket,
    PhaseTrace,
    SourceOffset,
    bucket_traceparent,
)

A0, A1, B0 = Bucket("a", 0), Bucket("a", 1), Bucket("b", 0)


def test_the_backlog_flag_is_the_state_once_the_batch_commits():
    reaching = SourceOffset("s", {A0: 10}, backlog=BacklogState(pending={}, finishing={A0: 10}))
    assert not reaching.processing_backlog  # the batch that reads the last backlog record already says so
    assert reaching.boundaries == {A0: 10}  # and its reads still carry the boundary (the reader reports it)
    both = SourceOffset("s", {A0: 5, A1: 3}, backlog=BacklogState(pending={A1: 8}, finishing={A0: 5}))
    assert both.boundaries == {A0: 5, A1: 8}


def test_a_batch_reads_a_bucket_from_the_previous_position_or_from_where_it_was_discovered_or_reset():
    previous = SourceOffset("s", {A0: 10})
    end = SourceOffset("s", {A0: 20, B0: 7}, starts={B0: 0})
    assert end.read_start(previous, A0) == 10 and end.read_start(previous, B0) == 0
    assert end.read_start(previous, A1) is None


def test_event_counts_add_up_per_kind_including_the_position_fallback():
    counts = EventCounts().add(EventOutcome.HANDLED).add(EventOutcome.HANDLED, 2).add(BY_POSITION)
    assert counts[EventOutcome.HANDLED] == 3 and counts[BY_POSITION] == 1 and counts[EventOutcome.STALE] == 0
    assert BY_POSITION == "finished_by_position"


def test_an_open_bucket_span_gives_its_splits_a_stable_context():
    trace = PhaseTrace(SpanContextIds(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331), started_ms=1,
                       buckets={A0: OpenBucket(start_offset=0, boundary=10, started_ms=1)})
    first = bucket_traceparent(trace, A0)
    assert first == bucket_traceparent(trace, A0) and first.startswith("00-0af7651916cd43dd8448eb211c80319c-")
    assert bucket_traceparent(trace, A1) is None and bucket_traceparent(None, A0) is None
