import json
import os

from backlog_source.core import step_timings


def test_off_unless_the_variable_names_a_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(step_timings.VARIABLE, raising=False)
    with step_timings.step("driver.latest_offsets"):
        pass
    step_timings.record("reader.create_consumer", 1.0)
    assert list(tmp_path.iterdir()) == []


def test_each_step_is_one_json_line_in_the_process_file(tmp_path, monkeypatch):
    monkeypatch.setenv(step_timings.VARIABLE, str(tmp_path))
    with step_timings.step("driver.latest_offsets"):
        pass
    step_timings.record("reader.create_consumer", 12.3456)
    lines = (tmp_path / f"{os.getpid()}.jsonl").read_text().splitlines()
    steps = [json.loads(line) for line in lines]
    assert [s["step"] for s in steps] == ["driver.latest_offsets", "reader.create_consumer"]
    assert steps[0]["ms"] >= 0 and steps[1]["ms"] == 12.346 and all("at" in s for s in steps)


def test_a_failing_step_is_still_timed(tmp_path, monkeypatch):
    monkeypatch.setenv(step_timings.VARIABLE, str(tmp_path))
    try:
        with step_timings.step("driver.settle"):
            raise ValueError("boom")
    except ValueError:
        pass
    assert json.loads((tmp_path / f"{os.getpid()}.jsonl").read_text())["step"] == "driver.settle"
