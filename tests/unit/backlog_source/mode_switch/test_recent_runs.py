import pytest

from backlog_source.mode_switch.recent_runs import RecentRuns, ReplacedRuns


def test_keeps_the_newest_runs_only():
    runs: RecentRuns[str] = RecentRuns(limit=3)
    for run_id in ("a", "b", "c", "d"):
        runs[run_id] = f"why {run_id}"
    assert list(runs) == ["b", "c", "d"]
    assert "a" not in runs and runs["d"] == "why d"


def test_setting_a_run_again_makes_it_the_newest():
    runs: RecentRuns[None] = RecentRuns(limit=2)
    runs["a"] = None
    runs["b"] = None
    runs["a"] = None
    runs["c"] = None
    assert list(runs) == ["a", "c"]


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="limit must be at least 1"):
        RecentRuns(limit=0)


def test_replaced_runs_are_the_newest_only():
    replaced = ReplacedRuns(limit=2)
    for run_id in ("a", "b", "c"):
        replaced.add(run_id)
    assert "a" not in replaced and "b" in replaced and "c" in replaced
