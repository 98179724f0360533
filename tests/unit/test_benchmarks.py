"""The benchmarks are one package with one harness (``benchmarks/harness/``, a module a
concern): each benchmark runs as ``python -m benchmarks.<name>`` and has a make target; no
benchmark edits ``sys.path`` or imports another."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")
HARNESS = sorted(p.stem for p in (ROOT / "benchmarks" / "harness").glob("*.py") if p.stem != "__init__")


def test_every_benchmark_has_a_make_target():
    listed = re.search(r"^BENCHMARKS := (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    assert sorted(listed) == BENCHMARKS


#: Run in one fresh interpreter: every benchmark's ``python -m benchmarks.<name> --help``
#: (``runpy``, as ``-m`` runs it), its exit code and output as JSON. One interpreter for all
#: of them: a process each cost ~3 s of CPU apiece, ~60 s a suite run, twice in ``make test``.
_HELP_ALL = """
import contextlib, io, json, runpy, sys
answers = {}
for name in sys.argv[1:]:
    out, err, code = io.StringIO(), io.StringIO(), None
    sys.argv = [f"benchmarks/{name}.py", "--help"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(f"benchmarks.{name}", run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:
            code, _ = "raised", err.write(repr(exc))
    answers[name] = {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
sys.__stdout__.write(json.dumps(answers))
"""


@pytest.fixture(scope="module")
def help_answers() -> dict:
    result = subprocess.run([sys.executable, "-c", _HELP_ALL, *BENCHMARKS], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_imports_only_the_harness_and_answers_help(name, help_answers):
    source = (ROOT / "benchmarks" / f"{name}.py").read_text()
    assert "sys.path" not in source
    others = set(BENCHMARKS) - {name}
    imported = set(re.findall(r"^(?:from|import) (?:benchmarks\.)?(\w+)", source, re.M))
    assert not imported & others, f"{name} imports {sorted(imported & others)}: shared code belongs in the harness"
    answer = help_answers[name]
    assert answer["code"] in (0, None) and "usage:" in answer["stdout"], answer["stderr"][-2000:]


def test_no_harness_module_is_named_like_a_benchmark():
    assert HARNESS and not set(HARNESS) & set(BENCHMARKS)


def test_step_medians_and_table_read_sparks_duration_fields():
    from benchmarks.harness.progress import BATCH_STEPS, step_medians, step_table

    progress = [{"durationMs": {"latestOffset": ms, "addBatch": 10 * ms, "triggerExecution": 20 * ms}} for ms in (1, 3, 2)]
    medians = step_medians(progress)
    assert medians["latestOffset"] == 2 and medians["addBatch"] == 20 and medians["walCommit"] is None
    lines = step_table({"a": [{"steps": medians}], "b": [{"steps": None}]}, "steps")
    assert lines[0] == "| configuration | " + " | ".join(BATCH_STEPS) + " |"
    assert lines[2] == "| a | 2 | n/a | n/a | n/a | 20 | n/a | 40 |"
    assert lines[3] == "| b | " + " | ".join(["n/a"] * len(BATCH_STEPS)) + " |"


def test_delivered_ends_are_the_offset_after_each_partitions_last_record():
    from benchmarks.harness.traffic import delivered_ends

    assert delivered_ends([(0, 4, 1), (1, 0, 1), (0, 9, 2), (0, 7, 3)]) == {0: 10, 1: 1}
    assert delivered_ends([]) == {}


def test_drain_batches_and_batch_timeline_read_progress_events():
    from benchmarks.harness.progress import drain_batches, timestamp_s
    from benchmarks.harness.results import batch_timeline

    def event(batch_id, second, ms, rows):
        return {"batchId": batch_id, "timestamp": f"2024-01-01T00:00:{second:02d}.000Z", "numInputRows": rows,
                "durationMs": {"triggerExecution": ms}, "sources": [{"endOffset": {"positions": {"t": {"0": batch_id}}}}]}

    progress = [event(0, 0, 1000, 5), event(1, 2, 500, 3), event(2, 4, 250, 0), event(3, 5, 2000, 1)]
    start = timestamp_s(progress[0]["timestamp"])
    # Batch 1 committed at start + 2.5 s; batch 2 read nothing, so it is no batch with data.
    assert drain_batches(progress, start + 2.5) == {"batches_to_drain": 2, "batches_after": 1}
    assert batch_timeline(progress, start) == [{"start": 0.0, "seconds": 1.0, "records": 5},
                                               {"start": 2.0, "seconds": 0.5, "records": 3},
                                               {"start": 4.0, "seconds": 0.25, "records": 0},
                                               {"start": 5.0, "seconds": 2.0, "records": 1}]


def test_the_recovery_less_the_floor_takes_off_only_what_a_python_source_pays_beyond_a_jvm_source():
    from benchmarks.catch_up_budgets import with_recovery_less_floor

    def run(load: float) -> dict:
        return {"round": 0, "kill_to_caught_up_s": 60.0, "restart_phases_s": {"load": load}}

    runs = {"mixed": {"kafka-cap-mixed-256m": [run(0.9)], "backlog-default": [run(3.4)]}}
    with_recovery_less_floor(runs, [{"first_trigger_s": 2.5, "load_s": 3.0}])
    assert runs["mixed"]["kafka-cap-mixed-256m"][0]["kill_to_caught_up_less_floor_s"] == 60.0
    # the first trigger's 2.5 s, and the one-row source's load() above format("kafka")'s: 3.0 - 0.9
    assert runs["mixed"]["backlog-default"][0]["kill_to_caught_up_less_floor_s"] == pytest.approx(60.0 - 2.5 - 2.1)

    alone = {"mixed": {"backlog-default": [run(3.4)]}}  # no format("kafka") restart to compare load() with
    with_recovery_less_floor(alone, [{"first_trigger_s": 2.5, "load_s": 3.0}])
    assert alone["mixed"]["backlog-default"][0]["kill_to_caught_up_less_floor_s"] == pytest.approx(57.5)


#: Every ``python -m benchmarks.<name> ARGS`` the docs quote (in backquotes), placeholders
#: (``<N>``) and elisions (``...``) left out. A command whose options a later change renamed or
#: dropped fails as its user would see it: once, 4457cfb (a revert of a Makefile change) took
#: partitions_scale's ``--idle-seconds`` out while benchmarks/README.md still quoted it.
DOCUMENTED = sorted({
    (name, args.strip())
    for doc in ("README.md", "benchmarks/README.md")
    for name, args in re.findall(r"`python -m benchmarks\.(\w+)([^`]*)`", (ROOT / doc).read_text())
    if "<" not in args and "..." not in args
})

#: Each documented command's arguments through its benchmark's own parser, in one fresh
#: interpreter: ``parse_args`` is wrapped to stop the benchmark right after parsing (every
#: ``main`` parses first), so nothing is started. Its exit code (None: parsed) and error, as JSON.
_PARSE_ALL = """
import argparse, contextlib, io, json, runpy, shlex, sys

class Parsed(BaseException):
    pass

parse_args = argparse.ArgumentParser.parse_args
def parse_then_stop(self, *args, **kwargs):
    parse_args(self, *args, **kwargs)
    raise Parsed
argparse.ArgumentParser.parse_args = parse_then_stop
answers = []
for name, args in json.loads(sys.argv[1]):
    err, code = io.StringIO(), None
    sys.argv = [f"benchmarks/{name}.py", *shlex.split(args)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(f"benchmarks.{name}", run_name="__main__", alter_sys=True)
            code = "did not parse its arguments"
        except Parsed:
            pass
        except SystemExit as exc:
            code = exc.code
        except BaseException as exc:
            code, _ = "raised", err.write(repr(exc))
    answers.append({"command": f"{name} {args}", "code": code, "stderr": err.getvalue()[-500:]})
sys.__stdout__.write(json.dumps(answers))
"""


def test_every_benchmark_command_the_docs_quote_parses():
    assert len(DOCUMENTED) >= 20 and any(n == "partitions_scale" and "--idle-seconds" in a for n, a in DOCUMENTED)
    result = subprocess.run([sys.executable, "-c", _PARSE_ALL, json.dumps(DOCUMENTED)], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    failed = [a for a in json.loads(result.stdout) if a["code"] is not None]
    assert not failed, failed
