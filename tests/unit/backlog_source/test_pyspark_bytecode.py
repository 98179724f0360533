"""The opt-in ``backlog-source pyspark-bytecode`` command, on a small stand-in for Spark's
home: compile keeps a backup and the workers' imports use the bytecode; undo restores the
original byte for byte; nothing is half-done or done twice."""

import subprocess
import sys
import zipfile

import pytest

from backlog_source import pyspark_bytecode
from backlog_source.cli import main


@pytest.fixture
def spark_home(tmp_path):
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    with zipfile.ZipFile(lib / "pyspark.zip", "w") as archive:
        archive.writestr("fakespark/__init__.py", "")
        archive.writestr("fakespark/runner.py", "ANSWER = 'compiled from the zip'\n")
        archive.writestr("fakespark/py2only.py", "print 'not python 3'\n")  # kept as source only
    return tmp_path / "spark"


def imported_answer(zip_path):
    code = f"import sys; sys.path.insert(0, {str(zip_path)!r}); import fakespark.runner as r; print(r.ANSWER)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_compile_writes_bytecode_the_workers_import_and_undo_restores_the_original(spark_home, capsys):
    path = spark_home / "python" / "lib" / "pyspark.zip"
    original = path.read_bytes()
    assert main(["pyspark-bytecode", "status", "--spark-home", str(spark_home)]) == 0
    assert "sources only" in capsys.readouterr().out

    assert main(["pyspark-bytecode", "compile", "--spark-home", str(spark_home)]) == 0
    out = capsys.readouterr().out
    assert "compiled 2 modules" in out and "holds bytecode" in out and "backlog-source-backup" in out
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    assert {"fakespark/__init__.pyc", "fakespark/runner.pyc"} <= names and "fakespark/py2only.pyc" not in names
    assert path.with_name("pyspark.zip.backlog-source-backup").read_bytes() == original

    # The import takes the bytecode: with the source in the zip changed, the compiled answer stays.
    tampered = path.with_name("tampered.zip")
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(tampered, "w") as target:
        for info in source.infolist():
            data = b"ANSWER = 'read from the source'\n" if info.filename == "fakespark/runner.py" else source.read(info)
            target.writestr(info, data)
    assert imported_answer(tampered) == "compiled from the zip"

    assert main(["pyspark-bytecode", "undo", "--spark-home", str(spark_home)]) == 0
    assert path.read_bytes() == original and pyspark_bytecode.state(path).backup is None


def test_nothing_is_done_twice_or_without_a_backup(spark_home, capsys):
    assert main(["pyspark-bytecode", "undo", "--spark-home", str(spark_home)]) == 1
    assert "no backup" in capsys.readouterr().err
    assert main(["pyspark-bytecode", "compile", "--spark-home", str(spark_home)]) == 0
    assert main(["pyspark-bytecode", "compile", "--spark-home", str(spark_home)]) == 1
    assert "already holds bytecode" in capsys.readouterr().err


def test_a_folder_without_pyspark_zip_is_named(tmp_path, capsys):
    assert main(["pyspark-bytecode", "status", "--spark-home", str(tmp_path)]) == 1
    assert f"no pyspark.zip at {tmp_path}/python/lib/pyspark.zip" in capsys.readouterr().err
