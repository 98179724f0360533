"""pyproject.toml's lowest versions of the libraries PySpark itself needs for the paths this
source takes are at least PySpark's own: pip would otherwise install a pyarrow or NumPy the
query then fails on inside PySpark (PySparkImportError), not at install. Read from the
installed PySpark's metadata (its ``sql`` extra: the Arrow paths of Python data sources)."""

from __future__ import annotations

import re
import sys
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def floors(requirements: list[str]) -> dict[str, Version]:
    """The lowest version each requirement allows (``>=`` only), by name."""
    found = {}
    for text in requirements:
        requirement = Requirement(text)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                found[requirement.name] = Version(spec.version)
    return found


def pysparks_sql_floors() -> dict[str, Version]:
    sql = [text for text in requires("pyspark") or [] if re.search(r"""extra\s*==\s*["']sql["']""", text)]
    return floors([text.split(";")[0] for text in sql])


@pytest.mark.parametrize("name", ["pyarrow", "numpy"])
def test_our_floor_is_at_least_pysparks(name):
    ours = floors(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    theirs = pysparks_sql_floors()
    assert name in theirs, f"the installed PySpark's sql extra no longer names {name}: {sorted(theirs)}"
    assert ours[name] >= theirs[name], f"pyproject.toml allows {name}>={ours[name]}, PySpark needs >={theirs[name]}"
