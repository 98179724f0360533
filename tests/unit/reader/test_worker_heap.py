import ctypes
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

from backlog_source.reader import worker_heap

ROOT = Path(__file__).resolve().parents[3]


def test_the_first_read_of_a_worker_prepares_its_heap_and_later_reads_do_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(worker_heap, "_prepared", False)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(worker_heap, "pin_malloc_thresholds", lambda: calls.append("pin"))

    worker_heap.prepare_once()
    worker_heap.prepare_once()

    assert calls == ["freeze", "pin"]


def test_a_workers_first_batch_imports_nothing_after_the_freeze_and_never_pandas():
    # A fresh interpreter: this test session has imported everything long ago. Every shape of
    # batch a split reads: one bucket or several, headers, null keys and values; a split of
    # several topics imports pyarrow.compute to count bytes per topic (said in worker_heap).
    script = """
import json, sys
from backlog_source.reader import worker_heap
from backlog_source.reader.arrow import data_bytes, data_bytes_by_topic, to_record_batch
from tests.fakes import Msg
worker_heap.prepare_once()
before = set(sys.modules)
messages = [Msg(0, key=None, headers=[("h", b"1"), ("h", None)]), Msg(1, value=None), Msg(2, b"v" * 4096)]
for bucket in (("t", 0), (None, None)):
    for headers in (False, True):
        data_bytes(to_record_batch(messages, *bucket, headers))
imported_by_one_topic = sorted(set(sys.modules) - before)
data_bytes_by_topic(to_record_batch(messages + [Msg(0, topic="u")], None, None, True))
print(json.dumps({"one_topic": imported_by_one_topic, "pandas": "pandas" in sys.modules}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120,
                          cwd=ROOT)
    imported = json.loads(done.stdout)
    assert imported["one_topic"] == []
    assert imported["pandas"] is False  # installed here (PySpark's workers have it), and never imported


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
