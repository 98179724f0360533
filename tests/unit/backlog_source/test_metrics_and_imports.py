import json
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize(
    "module", ["reader.kafka_reader", "enumerator.enumerator", "events", "backlog_source.datasource", "backlog_source"]
)
def test_every_package_imports_first_in_a_fresh_interpreter(module):
    # Executors unpickle splits and readers in fresh workers; import order must not matter.
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)


def test_the_driver_runner_imports_neither_the_read_path_nor_the_mode_switch():
    # Spark starts a fresh Python process per query start (and per restart switch) that
    # unpickles BacklogDataSource; what it imports is start-up every query pays.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, backlog_source.datasource; print(' '.join(sorted(sys.modules)))"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    heavy = {"reader.kafka_reader", "reader.snapshot_reader", "pyarrow.compute", "backlog_source.mode_switch",
             "backlog_source.metrics"}
    assert heavy.isdisjoint(loaded), sorted(heavy.intersection(loaded))


def test_the_package_still_exports_everything_it_lists():
    import backlog_source

    for name in backlog_source.__all__:
        assert getattr(backlog_source, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        backlog_source.no_such_name  # noqa: B018
