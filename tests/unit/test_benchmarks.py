"""The benchmarks are one package with one harness: each runs as ``python -m benchmarks.<name>``
and has a make target; no benchmark edits ``sys.path`` or imports another."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in ("__init__", "harness"))


def test_every_benchmark_has_a_make_target():
    listed = re.search(r"^BENCHMARKS := (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    assert sorted(listed) == BENCHMARKS


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_imports_only_the_harness_and_answers_help(name):
    source = (ROOT / "benchmarks" / f"{name}.py").read_text()
    assert "sys.path" not in source
    others = set(BENCHMARKS) - {name}
    imported = set(re.findall(r"^(?:from|import) (?:benchmarks\.)?(\w+)", source, re.M))
    assert not imported & others, f"{name} imports {sorted(imported & others)}: shared code belongs in the harness"
    result = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-2000:]


def test_step_medians_and_table_read_sparks_duration_fields():
    from benchmarks.harness import BATCH_STEPS, step_medians, step_table

    progress = [{"durationMs": {"latestOffset": ms, "addBatch": 10 * ms, "triggerExecution": 20 * ms}} for ms in (1, 3, 2)]
    medians = step_medians(progress)
    assert medians["latestOffset"] == 2 and medians["addBatch"] == 20 and medians["walCommit"] is None
    lines = step_table({"a": [{"steps": medians}], "b": [{"steps": None}]}, "steps")
    assert lines[0] == "| configuration | " + " | ".join(BATCH_STEPS) + " |"
    assert lines[2] == "| a | 2 | n/a | n/a | n/a | 20 | n/a | 40 |"
    assert lines[3] == "| b | " + " | ".join(["n/a"] * len(BATCH_STEPS)) + " |"

