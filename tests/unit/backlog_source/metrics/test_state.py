"""The backlog metrics' values, from committed batches of a known backlog (pure: no OTEL)."""

from types import SimpleNamespace

from backlog_source.core.buckets import Bucket
from backlog_source.core.tracing.context import SpanContextIds
from backlog_source.enumerator.state import BacklogState, BatchPlan, BoundedBy, PhaseTrace, SourceOffset
from backlog_source.metrics import names
from backlog_source.metrics.state import BacklogMetrics, SourceReport, source_reports
from tests.fakes import source

A0, A1 = Bucket("orders", 0), Bucket("orders", 1)
MODES = ("high-throughput", "low-latency")
TRACE = PhaseTrace(SpanContextIds(1, 2), started_ms=1_000_000)


def metrics(now_ms=1_030_000):
    return BacklogMetrics(MODES, clock_ms=lambda: now_ms)


def values(m, instrument):
    return {_key(attrs): value for value, attrs in m.observe(instrument)}


def _key(attrs):
    return (attrs.get(names.TOPIC), attrs.get(names.PARTITION), attrs.get(names.MODE_ATTRIBUTE))


def catch_up_batch():
    """A catch-up batch from offsets 0 to 100 on both partitions, 8,000 bytes planned
    (40 bytes per offset), boundaries at 1,000 and 500; latest 1,000 and 500."""
    start = SourceOffset("src", {A0: 0, A1: 0}, backlog=BacklogState(pending={A0: 1000, A1: 500}), trace=TRACE)
    end = SourceOffset("src", {A0: 100, A1: 100}, backlog=BacklogState(pending={A0: 1000, A1: 500}), trace=TRACE,
                       plan=BatchPlan(BoundedBy.BYTES, bytes=8000, budget_bytes=8000))
    return SourceReport(end=end, start=start, latest={A0: 1000, A1: 500}, rows=200)


def test_pending_records_and_bytes_per_partition_from_the_latest_and_measured_offsets():
    m = metrics()
    m.committed("q", "orders-job", 3, (catch_up_batch(),))
    assert values(m, names.PENDING_RECORDS) == {("orders", "0", None): 900.0, ("orders", "1", None): 400.0}
    assert values(m, names.PENDING_BYTES) == {("orders", "0", None): 36_000.0, ("orders", "1", None): 16_000.0}
    [(_, attrs)] = [o for o in m.observe(names.PENDING_RECORDS) if o[1][names.PARTITION] == "0"]
    assert attrs == {names.QUERY_ID: "q", names.QUERY_NAME: "orders-job", names.SOURCE_ID: "src",
                     names.MESSAGING_SYSTEM: "kafka", names.TOPIC: "orders", names.PARTITION: "0"}


def test_backlog_state_duration_batches_records_and_bytes_per_query():
    m = metrics(now_ms=1_030_000)
    m.committed("q", None, 3, (catch_up_batch(),))
    m.committed("q", None, 4, (catch_up_batch(),))
    assert values(m, names.PROCESSING_BACKLOG) == {(None, None, None): 1.0}
    assert values(m, names.BACKLOG_DURATION) == {(None, None, None): 30.0}
    assert values(m, names.CATCH_UP_BATCHES) == {(None, None, None): 2.0}
    assert values(m, names.RECORDS_IN) == {(None, None, None): 400.0}
    assert values(m, names.BYTES_IN) == {(None, None, None): 16_000.0}
    assert names.QUERY_NAME not in m.observe(names.RECORDS_IN)[0][1]


def test_a_replayed_batch_counts_once_and_caught_up_reports_no_backlog():
    m = metrics()
    m.committed("q", None, 3, (catch_up_batch(),))
    m.committed("q", None, 3, (catch_up_batch(),))  # the same batch again after a restart
    assert values(m, names.RECORDS_IN) == {(None, None, None): 200.0}
    live = SourceOffset("src", {A0: 1000, A1: 500}, trace=TRACE)
    m.committed("q", None, 4, (SourceReport(end=live, latest={A0: 1010, A1: 500}, rows=10),))
    assert values(m, names.PROCESSING_BACKLOG) == {(None, None, None): 0.0}
    assert values(m, names.BACKLOG_DURATION) == {(None, None, None): 0.0}
    assert values(m, names.CATCH_UP_BATCHES) == {(None, None, None): 1.0}
    assert values(m, names.PENDING_RECORDS) == {("orders", "0", None): 10.0, ("orders", "1", None): 0.0}
    # bytes per offset stay those last measured (a live batch measures none)
    assert values(m, names.PENDING_BYTES) == {("orders", "0", None): 400.0, ("orders", "1", None): 0.0}


def test_no_pending_bytes_before_anything_was_measured():
    m = metrics()
    end = SourceOffset("src", {A0: 5}, backlog=BacklogState(pending={A0: 10}))
    m.committed("q", None, 0, (SourceReport(end=end, latest={A0: 10}, rows=5),))
    assert m.observe(names.PENDING_BYTES) == []
    assert values(m, names.PENDING_RECORDS) == {("orders", "0", None): 5.0}


def test_mode_and_switches_once_a_switch_follows_the_query():
    m = metrics()
    m.committed("q", None, 0, (catch_up_batch(),))
    assert m.observe(names.MODE) == [] and m.observe(names.MODE_SWITCHES) == []
    m.adopted("q", None, "high-throughput")
    assert values(m, names.MODE) == {(None, None, "high-throughput"): 1.0, (None, None, "low-latency"): 0.0}
    m.switched("q", None, "low-latency")
    m.switched("q", None, "high-throughput")
    m.switched("q", None, "low-latency")
    assert values(m, names.MODE) == {(None, None, "high-throughput"): 0.0, (None, None, "low-latency"): 1.0}
    assert values(m, names.MODE_SWITCHES) == {(None, None, "high-throughput"): 1.0, (None, None, "low-latency"): 2.0}


def test_queries_are_kept_apart_and_a_terminated_query_ends_its_series():
    m = metrics()
    m.committed("q1", None, 0, (catch_up_batch(),))
    m.committed("q2", None, 0, (catch_up_batch(),))
    assert sorted(attrs[names.QUERY_ID] for _, attrs in m.observe(names.RECORDS_IN)) == ["q1", "q2"]
    m.terminated("q1")
    assert [attrs[names.QUERY_ID] for _, attrs in m.observe(names.RECORDS_IN)] == ["q2"]


def test_a_restart_switch_continues_the_querys_series_whichever_event_comes_first():
    for terminated_first in (True, False):
        m = metrics()
        m.committed("q", None, 3, (catch_up_batch(),))
        m.adopted("q", None, "high-throughput")
        if terminated_first:
            m.terminated("q")  # the old run's termination, then the switch is reported
            assert m.observe(names.RECORDS_IN) == []
            m.switched("q", None, "low-latency")
        else:
            m.switched("q", None, "low-latency")
            m.terminated("q")
            m.committed("q", None, 3, (catch_up_batch(),))  # the new run replays the last batch
        m.committed("q", None, 4, (catch_up_batch(),))
        assert values(m, names.RECORDS_IN) == {(None, None, None): 400.0}
        assert values(m, names.MODE_SWITCHES) == {(None, None, "low-latency"): 1.0}
        assert values(m, names.MODE)[(None, None, "low-latency")] == 1.0


def test_only_the_most_recently_ended_queries_are_remembered():
    from backlog_source.metrics.state import MAX_ENDED

    m = metrics()
    for n in range(MAX_ENDED + 5):
        m.committed(f"q{n}", None, 0, (catch_up_batch(),))
        m.terminated(f"q{n}")
    m.committed("q0", None, 1, (catch_up_batch(),))  # forgotten: starts again
    m.committed(f"q{MAX_ENDED + 4}", None, 1, (catch_up_batch(),))  # remembered: continues
    assert {a[names.QUERY_ID]: v for v, a in m.observe(names.RECORDS_IN)} == {"q0": 200.0, f"q{MAX_ENDED + 4}": 400.0}


def test_a_query_is_named_by_each_report_that_makes_it_live_from_its_start():
    """A mode switch adopts a query at its start, before any batch: the mode series carry
    the name from their first export, and every series after (a restart switch's new run
    included)."""
    m = metrics()
    m.adopted("q", "orders-job", "high-throughput")
    assert {attrs.get(names.QUERY_NAME) for _, attrs in m.observe(names.MODE)} == {"orders-job"}
    m.committed("q", "orders-job", 0, (catch_up_batch(),))
    m.switched("q", "orders-job", "low-latency")
    m.committed("q", "orders-job", 1, (catch_up_batch(),))
    observed = {instrument: [attrs for _, attrs in m.observe(instrument)] for instrument in names.ALL}
    assert all(observed.values())  # every metric has series
    assert {attrs.get(names.QUERY_NAME) for found in observed.values() for attrs in found} == {"orders-job"}


def test_a_missing_or_malformed_latest_offset_costs_that_figure_only():
    for latest in ("None", None, "not json", '{"t": "x"}'):
        [report] = source_reports(SimpleNamespace(sources=[SimpleNamespace(
            endOffset=source(True).endOffset, startOffset="None", latestOffset=latest, numInputRows=3)]))
        assert report.latest == {} and report.start is None and report.rows == 3 and report.end.processing_backlog


def test_a_progress_reports_its_backlog_sources_only():
    assert source_reports(None) == ()
    assert source_reports({"sources": [{"endOffset": '{"kafka": {"0": 5}}'}]}) == ()  # not ours
