"""The switchers: in place (the JVM seen through fake py4j objects) and by restart."""

from __future__ import annotations

import pytest

from backlog_source.core.errors import ModeSwitchError
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.policy import SwitchPolicy
from backlog_source.mode_switch.switchers import InPlaceSwitcher, RestartSwitcher, Switched
from tests.fakes import BackToBackQuery, FakeClock, JavaField, JavaStreamExecution, java_query, source

HIGH, LOW = Mode.HIGH_THROUGHPUT, Mode.LOW_LATENCY
INTERVALS = {HIGH: 0, LOW: 1000}


def test_in_place_is_prepared_without_the_running_executor_then_attached_and_reads_its_writes_back():
    field = JavaField(0)
    execution = JavaStreamExecution(field, executors=[None, None, "ready"])
    query = java_query(execution)
    switcher, why = SwitchPolicy().choose(query, INTERVALS, lambda: pytest.fail("no restart"))
    assert isinstance(switcher, InPlaceSwitcher) and "intervalMs is reachable" in why
    assert execution.asked == 0  # start() does not wait for the query's plan
    with pytest.raises(ModeSwitchError, match="not attached"):
        switcher.switch(LOW)
    clock = FakeClock(0.0)
    assert switcher.attach(HIGH, clock=clock, sleep=clock.sleep) is True
    assert execution.asked == 3 and clock.slept == [0.01, 0.01]  # waited for the stream thread to create it
    assert switcher.switch(LOW) == Switched(query, LOW)
    assert field.value == 1000


@pytest.mark.parametrize("execution, reason", [
    (lambda: JavaStreamExecution(JavaField(0), running="org.apache.spark.sql.execution.streaming.runtime.MultiBatchExecutor"),
     "the trigger executor is a .*MultiBatchExecutor, not a ProcessingTimeExecutor"),
    (lambda: JavaStreamExecution(JavaField(250)), "holds 250 ms, not the trigger's 0 ms"),
    (lambda: JavaStreamExecution(JavaField(0, drift=1)), "reads 1 ms after writing 0 ms"),
    (lambda: JavaStreamExecution(JavaField(0), executors=[None]), "did not appear within 30 s"),
    (lambda: JavaStreamExecution(JavaField(0, final_refused=True)),
     "IllegalAccessException: Can not set final long field .*; the JVM refuses to change a final field "
     "\\(JEP 500\\); to keep switching in place, start the driver JVM with --enable-final-field-mutation=ALL-UNNAMED"),
])
def test_the_running_executor_is_checked_when_attaching(execution, reason):
    clock = FakeClock(0.0)
    switcher = InPlaceSwitcher.prepare(java_query(execution()), INTERVALS)
    with pytest.raises(ModeSwitchError, match=reason):
        switcher.attach(HIGH, clock=clock, sleep=clock.sleep)


def test_attaching_gives_up_quietly_when_the_query_ends_or_the_handle_stops_first():
    ended = JavaStreamExecution(JavaField(0), executors=[None], active=False)
    assert InPlaceSwitcher.prepare(java_query(ended), INTERVALS).attach(HIGH) is False
    clock = FakeClock(0.0)
    waiting = JavaStreamExecution(JavaField(0), executors=[None])
    assert InPlaceSwitcher.prepare(java_query(waiting), INTERVALS).attach(HIGH, cancelled=lambda: clock.now > 1,
                                                                          clock=clock, sleep=clock.sleep) is False


@pytest.mark.parametrize("commits_after, waited_s", [(3, 0.03), (None, 5.0)])
def test_a_restart_under_back_to_back_batches_stops_once_the_running_batch_commits(commits_after, waited_s):
    clock = FakeClock(0.0)
    query = BackToBackQuery(commits_after)
    started = []
    switcher = RestartSwitcher(query, INTERVALS, start=lambda ms: started.append(ms) or "new run", settle_timeout_s=5.0,
                               clock=clock, sleep=clock.advance)
    assert switcher.switch(LOW) == Switched("new run", LOW) and query.stopped and started == [1000]
    # Stopped when batch 7 committed, not after the whole settle timeout; without a commit,
    # the timeout still bounds the wait.
    assert clock.now == pytest.approx(waited_s, abs=0.011)  # one 10 ms check of float drift


class FinishedQuery:
    """A query whose last committed batch calls for ``after_wait`` while the switcher waits,
    and for ``after_stop`` once stopped (a batch may commit during the stop)."""

    def __init__(self, after_wait, after_stop):
        self.after_wait, self.after_stop, self.stopped = after_wait, after_stop, False
        self.status = {"isTriggerActive": False}

    @property
    def lastProgress(self):
        """A dict, as PySpark's ``StreamingQueryProgress`` is one."""
        backlog = self.after_stop if self.stopped else self.after_wait
        return {"batchId": 9, "sources": [{"endOffset": source(processing_backlog=backlog).endOffset}]}

    @property
    def isActive(self):
        return not self.stopped

    def stop(self):
        self.stopped = True


def test_a_restart_is_not_made_when_the_batches_meanwhile_flipped_the_flag_back():
    query = FinishedQuery(after_wait=True, after_stop=True)  # still backlog: high-throughput is right
    switcher = RestartSwitcher(query, INTERVALS, start=lambda ms: pytest.fail("no restart"))
    assert switcher.switch(LOW) == Switched(query, None) and not query.stopped


def test_a_restart_starts_in_the_mode_the_stopped_runs_last_batch_calls_for():
    query = FinishedQuery(after_wait=False, after_stop=True)  # a burst committed during the stop
    started = []
    switcher = RestartSwitcher(query, INTERVALS, start=lambda ms: started.append(ms) or "new run")
    assert switcher.switch(LOW) == Switched("new run", HIGH) and started == [0]


def test_a_restart_never_starts_a_query_that_is_no_longer_active():
    """Stopped by its user (or failed) while the switch waited: starting it again would bring
    back a query its user ended."""
    query = FinishedQuery(after_wait=False, after_stop=False)
    query.stopped = True
    switcher = RestartSwitcher(query, INTERVALS, start=lambda ms: pytest.fail("a stopped query was started again"))
    assert switcher.switch(LOW) == Switched(query, None)


def test_a_restart_cancelled_while_it_waits_for_the_running_trigger_stops_nothing():
    """uninstall() meanwhile: a switch that has stopped nothing yet gives up at once."""
    clock = FakeClock(0.0)
    query = BackToBackQuery(None)  # its batch never commits: the wait would last the settle timeout
    switcher = RestartSwitcher(query, INTERVALS, start=lambda ms: pytest.fail("no restart"),
                               cancelled=lambda: clock.now >= 0.02, clock=clock, sleep=clock.advance)
    assert switcher.switch(LOW) == Switched(query, None) and not query.stopped
    assert clock.now == pytest.approx(0.02, abs=0.011)


def test_a_restart_whose_swap_says_the_user_stopped_the_query_stays_on_the_old_run_and_switches_nothing():
    query = FinishedQuery(after_wait=False, after_stop=False)
    swapped = []

    class StoppedByUser:
        def replace(self, running, start_next):
            swapped.append(running)
            return None

    switcher = RestartSwitcher(query, INTERVALS, start=lambda ms: pytest.fail("no restart"), swap=StoppedByUser())
    assert switcher.switch(LOW) == Switched(query, None) and switcher.query is query and swapped == [query]
