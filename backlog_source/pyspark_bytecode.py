"""An opt-in deployment step: a ``pyspark.zip`` that holds bytecode, so PySpark's fresh Python
workers stop compiling PySpark on every start.

Which process: the command line (``backlog-source pyspark-bytecode``), run by whoever
deploys Spark, never by a query. Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first
on every Python worker's path, and that zip holds sources only, so each fresh worker (the
driver-side process of every Python streaming query, and every restart of one) compiles the
PySpark modules it imports: about 0.55-0.67 s of a query's start here
(``benchmarks/pyspark_bytecode.py``). ``zipimport`` reads a ``module.pyc`` stored beside
``module.py`` in the zip; this module writes such a copy.

Contract: nothing changes unless asked. :func:`compile_zip` keeps the original as
``pyspark.zip.backlog-source-backup`` beside it and replaces the zip atomically;
:func:`undo` puts the backup back. The bytecode is unchecked-hash ``.pyc`` for *this*
interpreter's version: a worker on another Python version finds a wrong magic number, and
``zipimport`` then compiles the source as before (slower, never wrong). Raises
:class:`BytecodeError` saying what to do; never half-writes the zip.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

import pyspark

from backlog_source.core.errors import BacklogSourceError

BACKUP_SUFFIX = ".backlog-source-backup"


class BytecodeError(BacklogSourceError):
    """The zip cannot be compiled or restored; the message says why and what to do."""


@dataclass(frozen=True)
class ZipState:
    """``path``: the zip; ``compiled``: it holds ``.pyc`` entries; ``backup``: the original
    kept by :func:`compile_zip`, or None."""

    path: Path
    compiled: bool
    backup: Path | None


def locate(spark_home: str | Path | None = None) -> Path:
    """``pyspark.zip`` of ``spark_home``, else of ``$SPARK_HOME``, else of the installed
    pyspark package (which is Spark's home when none is set). Raises :class:`BytecodeError`
    when there is none."""
    if spark_home is None:
        spark_home = os.environ.get("SPARK_HOME")
    if spark_home is None:
        spark_home = Path(pyspark.__file__).resolve().parent
    found = Path(spark_home) / "python" / "lib" / "pyspark.zip"
    if not found.is_file():
        raise BytecodeError(f"no pyspark.zip at {found}; pass --spark-home (the folder Spark's workers use)")
    return found


def state(path: Path) -> ZipState:
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    with zipfile.ZipFile(path) as archive:
        compiled = any(name.endswith(".pyc") for name in archive.namelist())
    return ZipState(path, compiled, backup if backup.is_file() else None)


def write_compiled(source: Path, target: Path) -> int:
    """Write ``target``: every entry of ``source``, plus an unchecked hash-based ``.pyc``
    beside each ``.py`` (what ``zipimport`` reads). Returns the modules compiled. A module
    that does not compile (e.g. written for another Python) keeps its source only."""
    compiled = 0
    with zipfile.ZipFile(source) as reading, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as writing:
        names = set(reading.namelist())
        for info in reading.infolist():
            data = reading.read(info)
            writing.writestr(info, data)
            if info.filename.endswith(".py") and info.filename + "c" not in names:
                try:
                    code = compile(data, info.filename, "exec", dont_inherit=True)
                except SyntaxError:
                    continue
                writing.writestr(info.filename + "c", bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data), False)))
                compiled += 1
    return compiled


def compile_zip(path: Path) -> int:
    """Replace ``path`` with a copy holding bytecode, keeping the original as the backup.
    Returns the modules compiled. Raises :class:`BytecodeError` when it already holds
    bytecode, when a backup is already there, or when the folder is not writable."""
    current = state(path)
    if current.compiled:
        raise BytecodeError(f"{path} already holds bytecode; 'undo' first to compile it again")
    if current.backup is not None:
        raise BytecodeError(f"a backup is already at {current.backup}; remove it or run 'undo' first")
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".pyspark-", suffix=".zip", delete=False) as tmp:
            staged = Path(tmp.name)
        try:
            compiled = write_compiled(path, staged)
            shutil.copy2(path, backup)
            shutil.copymode(path, staged)
            os.replace(staged, path)
        finally:
            staged.unlink(missing_ok=True)
    except PermissionError as exc:
        raise BytecodeError(f"cannot write beside {path} ({exc.strerror}); run it as the user who installed Spark "
                            "(or build the image with it)") from None
    return compiled


def undo(path: Path) -> None:
    """Put the original back from the backup. Raises :class:`BytecodeError` when there is
    no backup."""
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if not backup.is_file():
        raise BytecodeError(f"no backup at {backup}: {path} was not compiled by this command")
    try:
        os.replace(backup, path)
    except PermissionError as exc:
        raise BytecodeError(f"cannot write {path} ({exc.strerror})") from None


def describe(current: ZipState) -> str:
    what = "holds bytecode" if current.compiled else "sources only (as Spark ships it)"
    backup = f"; original kept at {current.backup}" if current.backup else ""
    return f"{current.path}: {what}{backup}; this Python is {sys.version_info.major}.{sys.version_info.minor}"
