import gc

from backlog_source.reader import worker_heap


def test_the_first_read_of_a_worker_freezes_what_exists_and_later_reads_do_nothing(monkeypatch):
    freezes = []
    monkeypatch.setattr(worker_heap, "_frozen", False)
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(1))

    worker_heap.freeze_once()
    worker_heap.freeze_once()

    assert freezes == [1]

