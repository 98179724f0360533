import ctypes
import gc
import importlib.util
import os
import subprocess
import sys

from backlog_source.reader import worker_heap


def test_the_first_read_of_a_worker_prepares_its_heap_and_later_reads_do_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(worker_heap, "_prepared", False)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(worker_heap, "pin_malloc_thresholds", lambda: calls.append("pin"))
    monkeypatch.setattr(worker_heap, "import_what_reading_imports", lambda: calls.append("import"))

    worker_heap.prepare_once()
    worker_heap.prepare_once()

    assert calls == ["import", "freeze", "pin"]


def test_what_a_reads_arrow_conversion_imports_is_imported_before_the_freeze():
    # A fresh interpreter: this test session has imported everything long ago.
    script = """
import gc, sys
import pyarrow as pa
from backlog_source.reader import worker_heap
worker_heap.prepare_once()
before = set(sys.modules)
pa.array([b"v"], pa.binary())
# gc.get_objects() leaves out the frozen generation: pandas' namespace must not be in it.
pandas = sys.modules.get("pandas")
walked = pandas is not None and any(o is pandas.__dict__ for o in gc.get_objects())
print(pandas is not None, walked, sorted(set(sys.modules) - before))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    has_pandas, walked, imported_later = done.stdout.strip().split(" ", 2)
    assert imported_later == "[]"
    assert walked == "False"
    # Where pandas is installed (PySpark's workers have it), the first read imported it, frozen.
    assert has_pandas == str(importlib.util.find_spec("pandas") is not None)


class FakeLibc:
    def __init__(self) -> None:
        self.settings: dict[int, int] = {}

    def mallopt(self, parameter: int, value: int) -> int:
        self.settings[parameter] = value
        return 1


def test_the_thresholds_are_pinned_where_glibcs_adaptive_rule_ends(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(worker_heap, "_glibc", lambda: True)
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: libc)

    assert worker_heap.pin_malloc_thresholds(environ={})
    assert libc.settings == {-3: 32 << 20, -1: 64 << 20}  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD


def test_a_user_who_set_glibcs_own_thresholds_keeps_them(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(worker_heap, "_glibc", lambda: True)
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: libc)

    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        assert not worker_heap.pin_malloc_thresholds(environ={name: "131072"})
    assert libc.settings == {}


def test_off_glibc_nothing_is_loaded(monkeypatch):
    monkeypatch.setattr(worker_heap, "_glibc", lambda: False)
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: (_ for _ in ()).throw(AssertionError("loaded libc")))

    assert not worker_heap.pin_malloc_thresholds(environ={})


def test_on_this_machine_the_real_call_succeeds_when_it_runs_glibc():
    # The real mallopt, in this test process: it must accept both parameters on glibc.
    if (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
        assert worker_heap.pin_malloc_thresholds(environ={})
    else:
        assert not worker_heap.pin_malloc_thresholds(environ={})
