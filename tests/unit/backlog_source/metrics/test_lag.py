"""Lag figures with Spark's Kafka source definitions, from a progress event's source."""

import json

from backlog_source import lag_metrics


def test_lag_metrics_follow_sparks_definitions():
    source = {
        "endOffset": json.dumps({"v": 1, "source_id": "x", "positions": {"t": {"0": 10, "1": 50}}}),
        "latestOffset": json.dumps({"t": {"0": 40, "1": 50}}),
    }
    assert lag_metrics(source) == {
        "minOffsetsBehindLatest": 0.0,
        "maxOffsetsBehindLatest": 30.0,
        "avgOffsetsBehindLatest": 15.0,
    }


def test_lag_metrics_absent_before_the_first_latest_offset():
    assert lag_metrics({"endOffset": None, "latestOffset": None}) is None
