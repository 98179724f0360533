"""The driver heap a planner runs under, read from a fake /proc, and the default byte budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from backlog_source.core.jvm_heap import (
    DEFAULT_MAX_BYTES_CEILING,
    DEFAULT_MAX_BYTES_FLOOR,
    default_catch_up_bytes,
    jvm_max_heap,
    max_heap_of,
)

GIB = 1 << 30
MIB = 1 << 20


def fake_proc(tmp_path: Path, processes: dict[int, tuple[int, list[str]]], mem_total_kb: int = 16 << 20) -> Path:
    """A /proc with ``pid -> (ppid, argv)`` and a meminfo."""
    for pid, (ppid, argv) in processes.items():
        folder = tmp_path / str(pid)
        folder.mkdir()
        name = Path(argv[0]).name if argv else "?"
        (folder / "stat").write_text(f"{pid} ({name} (odd) name) S {ppid} 1 1 0 -1\n")
        (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (tmp_path / "meminfo").write_text(f"MemTotal:       {mem_total_kb} kB\nMemFree: 1 kB\n")
    return tmp_path


@pytest.mark.parametrize(("args", "heap"), [
    (["java", "-cp", "x", "-Xmx1g", "org.apache.spark.deploy.SparkSubmit"], GIB),
    (["java", "-Xmx512m", "-Xmx2G", "Main"], 2 * GIB),  # the JVM takes the last
    (["java", "-XX:MaxHeapSize=3221225472", "Main"], 3 * GIB),
    (["java", "-Xmx768M"], 768 * MIB),
])
def test_the_heap_is_the_last_xmx_on_the_java_command_line(args, heap):
    assert max_heap_of(args, physical_memory=None) == heap


def test_a_jvm_without_xmx_gets_a_quarter_of_the_machine_and_a_garbled_xmx_counts_as_not_given():
    assert max_heap_of(["java", "Main"], physical_memory=16 * GIB) == 4 * GIB
    assert max_heap_of(["java", "-Xmxlots", "Main"], physical_memory=8 * GIB) == 2 * GIB
    assert max_heap_of(["java", "Main"], physical_memory=None) is None


def test_the_nearest_java_ancestor_is_found_through_pysparks_daemon(tmp_path):
    proc = fake_proc(tmp_path, {
        10: (1, ["/usr/bin/python", "user_job.py"]),
        20: (10, ["/usr/lib/jvm/bin/java", "-Xmx1g", "org.apache.spark.deploy.SparkSubmit", "pyspark-shell"]),
        30: (20, ["/venv/bin/python", "-m", "pyspark.daemon"]),
        40: (30, ["/venv/bin/python", "-m", "pyspark.daemon"]),
    })
    assert jvm_max_heap(40, proc) == GIB


def test_no_java_ancestor_or_no_proc_answers_none(tmp_path):
    proc = fake_proc(tmp_path, {10: (1, ["/usr/bin/python", "x.py"]), 20: (10, ["/usr/bin/python", "-m", "pytest"])})
    assert jvm_max_heap(20, proc) is None
    assert jvm_max_heap(20, tmp_path / "missing") is None


def test_the_default_budget_is_an_eighth_of_the_heap_within_its_floor_and_ceiling():
    assert default_catch_up_bytes(None) == 128 * MIB  # Spark's default 1 GiB driver, assumed
    assert default_catch_up_bytes(GIB) == 128 * MIB
    assert default_catch_up_bytes(512 * MIB) == 64 * MIB
    assert default_catch_up_bytes(2 * GIB) == 256 * MIB
    assert default_catch_up_bytes(32 * GIB) == DEFAULT_MAX_BYTES_CEILING
    assert default_catch_up_bytes(64 * MIB) == DEFAULT_MAX_BYTES_FLOOR
