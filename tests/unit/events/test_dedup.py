"""Reader-side deduplication: one event per source, bucket and boundary per worker process."""

from backlog_source.events import dedup


def test_the_first_sight_of_a_key_is_the_only_one_until_forgotten():
    key = ("src-dedup", "t", 0, 42)
    assert dedup.first_time(*key) is True
    assert dedup.first_time(*key) is False  # a retried task or a replayed batch in this worker
    assert dedup.first_time("src-dedup", "t", 0, 43) is True  # a new boundary (re-entry) is a new event
    dedup.forget(*key)  # its publish failed: a later attempt may publish
    assert dedup.first_time(*key) is True


def test_memory_stays_bounded_and_forgetting_only_risks_a_duplicate(monkeypatch):
    monkeypatch.setattr(dedup, "_LIMIT", 3)
    monkeypatch.setattr(dedup, "_published", set())
    for boundary in range(3):
        assert dedup.first_time("src-bound", "t", 0, boundary)
    assert dedup.first_time("src-bound", "t", 0, 3) and len(dedup._published) == 1
    assert dedup.first_time("src-bound", "t", 0, 0)  # forgotten: published again, which the driver ignores
