"""tests.integration.helpers.start_query: a query that failed before its first batch because a
Python worker did not connect back in Spark's hard-coded 10 s is started once more, with a
warning; any other failure, or one after a batch, is handed to the test as it is."""

from __future__ import annotations

import pytest

from tests.integration import helpers
from tests.integration.helpers import SLOW_PYTHON_START, start_query


class FakeQuery:
    """What start_query reads of a StreamingQuery: ended or not, its failure, its progress."""

    def __init__(self, failure: str | None = None, *, progressed: bool = False, active: bool = False,
                 message: str = "Stopped") -> None:
        self.isActive = active
        self.lastProgress = {"batchId": 0} if progressed else None
        self.status = {"message": message}
        self._failure = failure
        self.stopped = False

    def exception(self):
        return None if self._failure is None else RuntimeError(self._failure)

    def stop(self) -> None:
        self.stopped = True


def starter(*queries):
    started = []

    def start():
        started.append(queries[len(started)])
        return started[-1]

    return start, started


SLOW = f"[STREAM_FAILED] Query [id = 1] terminated with exception: {SLOW_PYTHON_START}."


def test_a_slow_python_start_before_the_first_batch_starts_the_query_once_more():
    start, started = starter(FakeQuery(SLOW), FakeQuery(active=True, message="Waiting for data to arrive"))
    with pytest.warns(RuntimeWarning, match="started too slowly"):
        query = start_query(start)
    assert query is started[1] and started[0].stopped and len(started) == 2


def test_only_once():
    start, started = starter(FakeQuery(SLOW), FakeQuery(SLOW), FakeQuery())
    with pytest.warns(RuntimeWarning):
        query = start_query(start)
    assert query is started[1] and len(started) == 2  # the second failure is the test's to see


@pytest.mark.parametrize("first", [
    FakeQuery("KafkaUnavailableError: no broker answered"),  # another failure: the test's point
    FakeQuery(SLOW, progressed=True),  # after a batch: not a start any more
    FakeQuery(),  # an ending trigger that ended
    FakeQuery(active=True, message="Processing new data"),
], ids=["other failure", "after a batch", "ended", "running"])
def test_anything_else_is_handed_over_as_it_is(first, recwarn):
    start, started = starter(first, FakeQuery())
    assert start_query(start) is first and len(started) == 1 and not first.stopped
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_handle_is_stopped_through_its_own_stop_and_its_query_read(monkeypatch):
    class Handle:
        def __init__(self, query):
            self.query, self.stopped = query, False

        def stop(self):
            self.stopped = True

    first, second = Handle(FakeQuery(SLOW)), Handle(FakeQuery())
    start, _ = starter(first, second)
    with pytest.warns(RuntimeWarning):
        handle = start_query(start, query_of=lambda h: h.query, stop=lambda h: h.stop())
    assert handle is second and first.stopped and not first.query.stopped


def test_a_query_still_planning_when_the_wait_ends_is_handed_over(monkeypatch):
    monkeypatch.setattr(helpers, "FIRST_PLAN_WAIT_S", 0.1)
    planning = FakeQuery(active=True, message="Initializing sources")
    start, started = starter(planning, FakeQuery())
    assert start_query(start) is planning and len(started) == 1
