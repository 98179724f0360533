import ctypes
import gc
import os

from backlog_source.reader import worker_heap


def test_the_first_read_of_a_worker_prepares_its_heap_and_later_reads_do_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(worker_heap, "_prepared", False)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(worker_heap, "pin_malloc_thresholds", lambda: calls.append("pin"))

    worker_heap.prepare_once()
    worker_heap.prepare_once()

    assert calls == ["freeze", "pin"]


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
