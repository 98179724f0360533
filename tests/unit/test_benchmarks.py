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
