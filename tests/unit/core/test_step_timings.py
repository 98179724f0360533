import importlib
import json
import os

import pytest

from backlog_source.core import step_timings


@pytest.fixture(autouse=True)
def _timings_off_after(monkeypatch):
    monkeypatch.delenv(step_timings.VARIABLE, raising=False)
    step_timings.switch_off()
    yield
    step_timings.switch_off()


def test_off_by_default_a_step_is_one_shared_no_op_and_writes_nothing(tmp_path, monkeypatch):
    assert not step_timings.enabled()
    assert step_timings.step("driver.latest_offsets") is step_timings.step("reader.arrow")
    with step_timings.step("driver.latest_offsets"):
        pass
    step_timings.record("reader.create_consumer", 1.0)
    # Read once at import: setting the variable later does not turn this process's timings on.
    monkeypatch.setenv(step_timings.VARIABLE, str(tmp_path))
    with step_timings.step("driver.latest_offsets"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_process_that_imports_it_with_the_variable_set_records(tmp_path, monkeypatch):
    monkeypatch.setenv(step_timings.VARIABLE, str(tmp_path))
    importlib.reload(step_timings)
    try:
        assert step_timings.enabled()
    finally:
        monkeypatch.delenv(step_timings.VARIABLE)
        importlib.reload(step_timings)
    assert not step_timings.enabled()


def test_each_step_is_one_json_line_in_the_process_file(tmp_path):
    step_timings.switch_on(str(tmp_path))
    assert os.environ[step_timings.VARIABLE] == str(tmp_path)  # what the processes it starts read
    with step_timings.step("driver.latest_offsets"):
        pass
    step_timings.record("reader.create_consumer", 12.3456)
    lines = (tmp_path / f"{os.getpid()}.jsonl").read_text().splitlines()
    steps = [json.loads(line) for line in lines]
    assert [s["step"] for s in steps] == ["driver.latest_offsets", "reader.create_consumer"]
    assert steps[0]["ms"] >= 0 and steps[1]["ms"] == 12.346 and all("at" in s for s in steps)
    step_timings.switch_off()
    assert step_timings.VARIABLE not in os.environ and not step_timings.enabled()


def test_a_failing_step_is_still_timed(tmp_path):
    step_timings.switch_on(str(tmp_path))
    with pytest.raises(ValueError), step_timings.step("driver.settle"):
        raise ValueError("boom")
    assert json.loads((tmp_path / f"{os.getpid()}.jsonl").read_text())["step"] == "driver.settle"
