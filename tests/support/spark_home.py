"""A Spark home whose ``pyspark.zip`` holds bytecode, for the test session's Spark processes.

Why: Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python
process it starts (the driver-side runner of each Python streaming query, every Python worker,
the data source lookups), and that zip ships sources only, so each fresh process compiles the
PySpark modules it imports. The suite starts hundreds of them: measured on the suite's
integration files, compiling PySpark was most of the source runners' CPU. The README's
opt-in deployment step (``backlog-source pyspark-bytecode compile``) removes that cost for
users; the suite takes the same step on a mirror, leaving the installed PySpark as it is.

The mirror links every entry of the installed Spark home but ``python/lib/pyspark.zip``,
which is rebuilt by :func:`backlog_source.pyspark_bytecode.write_compiled` (the product's own
code). It is kept under ``build/`` and reused while the installed PySpark and this Python are
the same (the folder's name holds both). Which process: the test session (pytest), before any
Spark process starts; the wheel check and the standalone-cluster test run Spark as installed.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mirror_with_bytecode(spark_home: Path, destination: Path) -> Path:
    """``destination``: a symlink to every entry of ``spark_home`` except ``python/lib/pyspark.zip``,
    which is a copy holding an unchecked hash-based ``.pyc`` beside each ``.py``."""
    from backlog_source.pyspark_bytecode import write_compiled

    _link_all_but(spark_home, destination, "python")
    _link_all_but(spark_home / "python", destination / "python", "lib")
    lib = destination / "python" / "lib"
    _link_all_but(spark_home / "python" / "lib", lib, "pyspark.zip")
    write_compiled(spark_home / "python" / "lib" / "pyspark.zip", lib / "pyspark.zip")
    return destination


def _link_all_but(source: Path, target: Path, excluded: str) -> None:
    """``target`` (created if missing) with a symlink to every entry of ``source`` but ``excluded``."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name != excluded:
            (target / entry.name).symlink_to(entry)


def bytecode_spark_home() -> Path:
    """The mirror for the installed PySpark and this Python, built once (under ``build/``)."""
    import pyspark

    installed = Path(pyspark.__file__).resolve().parent
    version = f"pyspark-{pyspark.__version__}-py{sys.version_info.major}{sys.version_info.minor}"
    mirror = ROOT / "build" / "spark-home-bytecode" / version
    if (mirror / "python" / "lib" / "pyspark.zip").is_file():
        return mirror
    staging = mirror.with_name(f"{mirror.name}.{os.getpid()}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    mirror_with_bytecode(installed, staging)
    try:
        os.replace(staging, mirror)
    except OSError:  # another session finished first: use its mirror
        shutil.rmtree(staging, ignore_errors=True)
    return mirror

