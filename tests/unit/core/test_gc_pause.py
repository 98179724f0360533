import gc
import threading

import pytest

from backlog_source.core import gc_pause


@pytest.fixture(autouse=True)
def collector_on():
    """Each test starts with the collector on and leaves it as it found it."""
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_is_off_inside_and_on_again_after():
    with gc_pause.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_switches_it_back_on():
    with pytest.raises(ValueError), gc_pause.paused():
        raise ValueError("plan failed")
    assert gc.isenabled()


def test_nested_blocks_switch_it_on_only_when_the_outer_one_ends():
    with gc_pause.paused():
        with gc_pause.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_application_that_switched_it_off_keeps_it_off():
    gc.disable()
    with gc_pause.paused():
        pass
    assert not gc.isenabled()


def test_overlapping_blocks_in_two_threads_switch_it_on_when_the_last_ends():
    first_inside, second_done, first_may_end = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with gc_pause.paused():
            first_inside.set()
            first_may_end.wait(10)
            seen["after the other thread's block ended"] = gc.isenabled()

    def second():
        first_inside.wait(10)
        with gc_pause.paused():
            pass
        second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    assert second_done.wait(10)
    first_may_end.set()
    for thread in threads:
        thread.join(10)
    assert seen == {"after the other thread's block ended": False}
    assert gc.isenabled()
