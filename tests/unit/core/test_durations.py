"""Durations and trigger intervals: one parser, errors that say what is allowed."""

from __future__ import annotations

import pytest

from backlog_source.core.durations import duration_seconds, parsed_duration_ms, processing_time, trigger_interval_ms
from backlog_source.core.errors import ConfigError


@pytest.mark.parametrize(
    "text, seconds", [("0 seconds", 0), ("1 second", 1), ("500 milliseconds", 0.5), ("2 minutes", 120), ("1h", 3600)]
)
def test_intervals_parse(text, seconds):
    assert duration_seconds("x", text) == seconds


def test_bad_interval_says_what_is_allowed():
    with pytest.raises(ConfigError, match="low_latency_interval must be a duration such as '500ms'.*'0 seconds'"):
        duration_seconds("low_latency_interval", "soon")


def test_a_trigger_interval_needs_a_unit_and_its_text_parses_back():
    with pytest.raises(ConfigError, match="x must be a duration"):
        trigger_interval_ms("x", "500")
    for interval_ms in (0, 250, 60_000):
        assert trigger_interval_ms("x", processing_time(interval_ms)) == interval_ms


def test_parsed_duration_is_none_where_duration_ms_raises():
    assert parsed_duration_ms("2 minutes") == 120_000 and parsed_duration_ms("soon") is None
    assert parsed_duration_ms("5", bare_number_unit=None) is None
