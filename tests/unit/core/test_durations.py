"""Durations and trigger intervals: one parser, errors that say what is allowed."""

from __future__ import annotations

import pytest

from backlog_source.core.durations import duration_seconds
from backlog_source.core.errors import ConfigError


@pytest.mark.parametrize(
    "text, seconds", [("0 seconds", 0), ("1 second", 1), ("500 milliseconds", 0.5), ("2 minutes", 120), ("1h", 3600)]
)
def test_intervals_parse(text, seconds):
    assert duration_seconds("x", text) == seconds


def test_bad_interval_says_what_is_allowed():
    with pytest.raises(ConfigError, match="low_latency_interval must be a duration such as '500ms'.*'0 seconds'"):
        duration_seconds("low_latency_interval", "soon")
