"""The switch policy: in place or restart, and whether a restart is allowed, decided once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from backlog_source.core.errors import ConfigError, ModeSwitchError
from backlog_source.mode_switch.listener import Mode
from backlog_source.mode_switch.policy import AskedMethod, SwitchPolicy
from backlog_source.mode_switch.switchers import InPlaceSwitcher, RestartSwitcher
from backlog_source.mode_switch.writer_info import WriterInfo
from tests.fakes import JavaField, JavaStreamExecution, java_query

INTERVALS = {Mode.HIGH_THROUGHPUT: 0, Mode.LOW_LATENCY: 1000}


@pytest.mark.parametrize("execution, reason", [
    (lambda: JavaStreamExecution(JavaField(0), loadable=()),
     "no ProcessingTimeExecutor class beside .*MicroBatchExecution: java.lang.ClassNotFoundException"),
    (lambda: JavaStreamExecution(None), "intervalMs is not reachable: java.lang.NoSuchFieldException"),
    (lambda: JavaStreamExecution(JavaField(0, refuse=True)),
     "not reachable: java.lang.reflect.InaccessibleObjectException"),
    (lambda: JavaStreamExecution(JavaField(0, kind="int")), "intervalMs is a int, not a long"),
])
def test_where_in_place_is_impossible_at_start_the_restart_method_is_chosen_and_says_why(execution, reason):
    with pytest.raises(ModeSwitchError, match=reason):
        InPlaceSwitcher.prepare(java_query(execution()), INTERVALS)
    restart = RestartSwitcher(java_query(execution()), INTERVALS, start=lambda ms: None)
    switcher, why = SwitchPolicy().choose(java_query(execution()), INTERVALS, lambda: restart)
    assert switcher is restart and why.startswith("in place is impossible: ")
    # Unless a restart is not allowed: then starting fails, saying why.
    for refusing in (SwitchPolicy(restart_refused="the memory sink cannot restart"),
                     SwitchPolicy(asked=AskedMethod.IN_PLACE)):
        with pytest.raises(ModeSwitchError, match=f"in place is impossible on this Spark runtime \\(.*{reason}"):
            refusing.choose(java_query(execution()), INTERVALS, lambda: restart)


def test_spark_connect_and_a_forced_restart_choose_the_restart_method():
    restart = RestartSwitcher(SimpleNamespace(), INTERVALS, start=lambda ms: None)
    connect_query = SimpleNamespace(id="q")  # no _jsq: a Spark Connect client's query
    assert SwitchPolicy(connect=True).choose(connect_query, INTERVALS, lambda: restart) == (
        restart, "a Spark Connect query has no JVM objects in this process to change in place")
    forced = SwitchPolicy(asked=AskedMethod.RESTART)
    assert forced.choose(java_query(JavaStreamExecution(JavaField(0))), INTERVALS, lambda: restart) == (
        restart, "the restart method was asked for")


def writer_info(sink_format=None, output_mode=None, connect=False):
    return WriterInfo("/checkpoint", sink_format, output_mode, connect=connect)


@pytest.mark.parametrize("switch_method, writer, error", [
    ("sometimes", writer_info(), "switch_method must be one of auto, in-place, restart, got 'sometimes'"),
    ("in-place", writer_info(connect=True), "switch_method='in-place' is impossible under Spark Connect"),
    ("restart", writer_info(sink_format="memory"), "the memory sink cannot restart from its checkpoint"),
    ("auto", writer_info(connect=True, sink_format="memory"), "switches under Spark Connect restart the query"),
])
def test_the_policy_refuses_what_cannot_work_saying_what_to_change(switch_method, writer, error):
    with pytest.raises(ConfigError, match=error):
        SwitchPolicy.decide(switch_method, writer)


def test_the_policy_remembers_what_forbids_a_fallback_to_restarts():
    assert SwitchPolicy.decide("auto", writer_info()).why_no_restart is None
    assert "memory sink" in SwitchPolicy.decide("auto", writer_info(sink_format="memory")).why_no_restart
    assert SwitchPolicy.decide("auto", writer_info(sink_format="memory", output_mode="complete")).why_no_restart is None
    assert "'in-place' was asked for" in SwitchPolicy.decide("in-place", writer_info()).why_no_restart


def test_a_jvm_refusing_the_final_field_write_falls_back_to_restarts_naming_the_flag(caplog):
    """JEP 500: a JDK that refuses writes to final fields makes attach fail; under "auto"
    the policy falls back to restarts with a log line that says how to keep in place."""
    switcher = InPlaceSwitcher.prepare(java_query(JavaStreamExecution(JavaField(0, final_refused=True))), INTERVALS)
    restart = RestartSwitcher(SimpleNamespace(), INTERVALS, start=lambda ms: None)
    with pytest.raises(ModeSwitchError) as refused:
        switcher.attach(Mode.HIGH_THROUGHPUT)
    assert SwitchPolicy().fall_back(refused.value, lambda: restart) is restart
    assert "mode switches are by restart after all" in caplog.text
    assert "--enable-final-field-mutation=ALL-UNNAMED" in caplog.text
