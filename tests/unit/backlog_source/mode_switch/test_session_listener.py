"""The session's one listener: routing by query id, attach and detach, registering once,
and why it is never removed (issue 33, item 4: a stop that hung for good on Spark Connect).

The Connect hazard is reproduced on :class:`tests.fakes.FakeConnectListenerBus`, which keeps
PySpark Connect's locking (the first test checks that the installed PySpark still has it).
Every wait has a timeout and waits for a condition (an event, a count), never a sleep."""

from __future__ import annotations

import ast
import inspect
import textwrap
import threading
from types import SimpleNamespace

import pytest
from pyspark.sql.connect.streaming.query import StreamingQueryListenerBus

from backlog_source.core.errors import ModeSwitchError
from backlog_source.mode_switch import BacklogModeListener
from backlog_source.mode_switch.controller import BacklogAwareQuery, ModeController
from backlog_source.mode_switch.query_switch import mode_intervals
from backlog_source.mode_switch.listener import BatchCommitted, QueryTerminated, TriggerIdle
from backlog_source.mode_switch.session_listener import SessionListener
from tests.fakes import (
    ChosenPolicy,
    FakeConnectSession,
    FakeConnectWriter,
    FakeSpark,
    RecordingReceiver,
    WaitingReceiver,
    idle_event,
    progress_event,
    source,
    terminated_event,
)

WAIT_S = 10.0  # bound of every wait for something that must happen


def _with_lock_bodies(function) -> list[list[ast.stmt]]:
    """The bodies of ``with self._lock:`` blocks in ``function``'s source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return [node.body for node in ast.walk(tree) if isinstance(node, ast.With)
            and any(ast.unparse(item.context_expr) == "self._lock" for item in node.items)]


def test_installed_pyspark_connect_bus_joins_its_event_thread_holding_the_lock_that_delivery_needs():
    """What the fake copies, read from the installed PySpark: remove() joins the event thread
    inside ``with self._lock``, and post_to_all delivers inside ``with self._lock``. If a
    PySpark release changes this, this test says the fake (and the reason for never removing
    the listener) needs another look."""
    removes = _with_lock_bodies(StreamingQueryListenerBus.remove)
    joins = [node for body in removes for stmt in body for node in ast.walk(stmt)
             if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("_execution_thread.join")]
    assert joins, "remove() no longer joins the event thread while holding the bus lock"
    assert _with_lock_bodies(StreamingQueryListenerBus.post_to_all), "post_to_all no longer takes the bus lock"


def test_installed_pyspark_connect_bus_starts_its_event_thread_without_choosing_daemon():
    """Also copied by the fake, and the reason the listener is registered from a daemon
    thread: append() makes its event thread with ``Thread(target=..., args=...)``, so the
    thread is a daemon only if the thread calling addListener is."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(StreamingQueryListenerBus.append)))
    (thread,) = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) == "Thread"]
    assert "daemon" not in {keyword.arg for keyword in thread.keywords}


class Listening:
    """A Connect-like session, its client-side bus (PySpark's locking), and a writer on it."""

    def __init__(self):
        self.session = FakeConnectSession()
        self.bus = self.session.streams._sqlb
        self.writer = FakeConnectWriter(self.session)
        self.writer.trigger(processingTime="0 milliseconds")


def test_the_old_shape_hangs_stop_and_removelistener_after_query_stop_deadlocks_on_a_connect_bus():
    """The shape of the old ``BacklogAwareQuery``: the controller thread stopped the query and
    then called ``removeListener`` on its own listener (the session's last), while the run's
    ``QueryTerminatedEvent`` was still on its way. remove() holds the bus lock and joins the
    event thread; the event thread waits for that lock to deliver the event: neither ever
    returns. (Bounded here: the bus is abandoned at the end so the test's threads can exit.)"""
    s = Listening()
    listener = BacklogModeListener(RecordingReceiver())
    s.session.streams.addListener(listener)
    query = s.writer.start()
    s.bus.hold()  # the terminated event will be read but still on its way when remove() runs
    finished = threading.Event()

    def old_stop():  # controller.py before the fix: handle(Stop) -> query.stop(); _finish() -> removeListener
        try:
            query.stop()
            s.session.streams.removeListener(listener)
        except Exception:  # the bus abandoned by the test
            pass
        finally:
            finished.set()

    stopper = threading.Thread(target=old_stop, name="old-controller-thread", daemon=True)
    try:
        stopper.start()
        assert s.bus.joining.wait(WAIT_S)  # remove() holds the bus lock and joins the event thread...
        s.bus.release()
        assert s.bus.event_thread_waiting.wait(WAIT_S)  # ...which waits for that lock: a deadlock
        assert not finished.wait(1.0), "the old shape should hang (it cannot proceed from here)"
    finally:
        s.bus.abandon()
        stopper.join(WAIT_S)
    assert not stopper.is_alive()


def test_the_handle_stops_where_the_old_shape_hangs_and_never_removes_the_listener():
    """The same moment with the handle: events of the stopped run still on their way, and
    stop() returns in time, because it detaches instead of removing the listener; the event
    thread then delivers them to nobody and is never stuck."""
    s = Listening()
    controller = ModeController(s.writer, mode_intervals("0 seconds", "1 second"), ChosenPolicy("restart", connect=True))
    handle = BacklogAwareQuery(controller, s.session).start()
    query = handle.query
    s.bus.hold()
    s.bus.server_post(idle_event(query, 1000))  # low-latency events keep coming
    done = threading.Event()
    stopper = threading.Thread(target=lambda: (handle.stop(timeout=WAIT_S), done.set()), daemon=True)
    stopper.start()
    try:
        assert done.wait(WAIT_S + 5), "stop() did not return"
    finally:
        s.bus.release()
    assert query.stopped and handle.await_termination(0)
    assert s.session.streams.removed == 0 and s.bus.removals == 0
    probe = WaitingReceiver()  # the event thread still delivers: everything queued before the probe went through
    attachment = SessionListener.of(s.session).attach(s.session, probe)
    attachment.follow("probe")
    s.bus.server_post(idle_event(SimpleNamespace(id="probe", runId="p"), 2000))
    assert probe.wait_messages(1, WAIT_S) and not s.bus.event_thread_waiting.is_set()
    attachment.detach()


# -- routing ---------------------------------------------------------------------------------


def test_messages_go_to_the_followed_query_and_to_receivers_following_none():
    spark = FakeSpark()
    routes = SessionListener.of(spark)
    one, two, everything = RecordingReceiver(), RecordingReceiver(), RecordingReceiver()
    routes.attach(spark, one).follow("q1")
    routes.attach(spark, two).follow("q2")
    routes.attach(spark, everything)
    (listener,) = spark.listeners
    listener.onQueryProgress(progress_event("q1", "r", 0, source(True)))
    listener.onQueryIdle(idle_event(SimpleNamespace(id="q2", runId="r"), 1000))
    listener.onQueryTerminated(terminated_event(SimpleNamespace(id="q3", runId="r")))
    assert [type(m) for m in one.messages] == [BatchCommitted]
    assert [type(m) for m in two.messages] == [TriggerIdle]
    assert [type(m) for m in everything.messages] == [BatchCommitted, TriggerIdle, QueryTerminated]


def test_a_detached_receiver_gets_nothing_and_unfollowed_queries_are_not_parsed():
    spark = FakeSpark()
    routes = SessionListener.of(spark)
    receiver = RecordingReceiver()
    attachment = routes.attach(spark, receiver)
    attachment.follow("q1")
    attachment.detach()
    attachment.detach()  # idempotent
    attachment.follow("q1")  # a detached attachment stays detached
    assert not routes.follows("q1")
    # Not parsed: a progress event without sources would fail the parser if it were read.
    spark.listeners[0].onQueryProgress(SimpleNamespace(progress=SimpleNamespace(id="q1")))
    assert receiver.messages == []


def test_one_registration_per_session_however_many_attach_and_detach():
    spark = FakeSpark()
    for _ in range(5):
        SessionListener.of(spark).attach(spark, RecordingReceiver()).detach()
    assert len(spark.listeners) == 1
    other = FakeSpark()
    SessionListener.of(other).attach(other, RecordingReceiver())
    assert SessionListener.of(other) is not SessionListener.of(spark) and len(other.listeners) == 1


def test_two_queries_starting_at_once_register_one_listener():
    session = FakeConnectSession()
    routes = SessionListener.of(session)
    barrier = threading.Barrier(2, timeout=WAIT_S)

    def attach():
        barrier.wait()
        routes.attach(session, RecordingReceiver())

    threads = [threading.Thread(target=attach, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert session.streams.added == 1 and len(session.streams._sqlb._listener_bus) == 1


def test_no_lock_of_ours_is_held_while_spark_delivers_during_addlistener():
    """Connect's ``writer.start()`` delivers a started event under the bus lock on the
    caller's thread, and a delivery may come on the thread that is in ``addListener``. If
    the routing lock were held around ``addListener``, such a delivery would wait for it
    forever."""
    spark = FakeSpark()

    def add_and_deliver(listener):  # a listener bus that delivers while registering
        spark.listeners.append(listener)
        listener.onQueryIdle(idle_event(SimpleNamespace(id="q1", runId="r"), 1000))

    spark.streams.addListener = add_and_deliver
    receiver, done = RecordingReceiver(), threading.Event()
    attach = lambda: (SessionListener.of(spark).attach(spark, receiver), done.set())  # noqa: E731
    threading.Thread(target=attach, daemon=True).start()
    assert done.wait(WAIT_S), "attach() held its routing lock during addListener"
    assert len(receiver.messages) == 1


def test_a_receiver_may_detach_itself_while_receiving():
    spark = FakeSpark()
    routes = SessionListener.of(spark)

    class Once(RecordingReceiver):
        def receive(self, message):
            super().receive(message)
            attachment.detach()  # on the listener thread: must not wait for the routing lock

    once = Once()
    attachment = routes.attach(spark, once)
    done = threading.Event()
    event = idle_event(SimpleNamespace(id="q", runId="r"), 1000)
    threading.Thread(target=lambda: (spark.post(event), spark.post(event), done.set()), daemon=True).start()
    assert done.wait(WAIT_S) and len(once.messages) == 1


def test_a_failing_receiver_does_not_cost_another_its_messages(caplog):
    spark = FakeSpark()
    routes = SessionListener.of(spark)

    class Broken:
        def receive(self, message):
            raise RuntimeError("receiver bug")

    good = RecordingReceiver()
    routes.attach(spark, Broken())
    routes.attach(spark, good)
    spark.post(idle_event(SimpleNamespace(id="q", runId="r"), 1000))
    assert len(good.messages) == 1 and "receiver failed" in caplog.text


def test_a_listener_the_connect_client_dropped_is_registered_again():
    """Connect's event thread clears the bus when the event stream fails; the next attach
    sees it and registers the listener again (as each handle used to, with its own)."""
    session = FakeConnectSession()
    routes = SessionListener.of(session)
    routes.attach(session, RecordingReceiver()).detach()
    bus = session.streams._sqlb
    event_thread = bus._execution_thread
    bus.fail_stream()  # the event thread forgets the listeners and ends
    event_thread.join(WAIT_S)
    assert not event_thread.is_alive() and bus._listener_bus == []
    receiver = WaitingReceiver()
    routes.attach(session, receiver).follow("q")
    assert session.streams.added == 2 and bus._listener_bus == [routes.listener]
    bus.server_post(idle_event(SimpleNamespace(id="q", runId="r"), 1000))
    assert receiver.wait_messages(1, WAIT_S)


def test_an_attach_whose_registration_fails_leaves_nothing_attached():
    spark = FakeSpark()

    def refuse(listener):
        raise RuntimeError("the session is gone")

    spark.streams.addListener = refuse
    routes = SessionListener.of(spark)
    with pytest.raises(RuntimeError, match="the session is gone"):
        routes.attach(spark, RecordingReceiver())
    assert not routes.follows("anything")


# -- registering ----------------------------------------------------------------------------


def test_the_connect_event_thread_of_the_session_listener_never_keeps_the_program_alive():
    """Registered from the program's main (non-daemon) thread, PySpark Connect's event thread
    would be a non-daemon thread; the old handle ended it with removeListener, the session
    listener keeps it, so it must be a daemon or a program that never calls spark.stop()
    would not exit."""
    assert not threading.current_thread().daemon
    direct = FakeConnectSession()
    direct.streams.addListener(BacklogModeListener(RecordingReceiver()))  # what the old handle did
    assert direct.streams._sqlb._execution_thread.daemon is False
    direct.streams._sqlb.abandon()  # let it end
    session = FakeConnectSession()
    SessionListener.of(session).attach(session, RecordingReceiver())
    assert session.streams._sqlb._execution_thread.daemon is True


def test_a_registration_that_does_not_return_fails_the_attach_in_time_and_is_not_repeated(monkeypatch):
    monkeypatch.setattr("backlog_source.mode_switch.session_listener.REGISTER_TIMEOUT_S", 0.2)
    spark = FakeSpark()
    release, calls = threading.Event(), []

    def slow_add(listener):  # a Connect server that does not confirm the listener
        calls.append(listener)
        release.wait(WAIT_S)
        spark.listeners.append(listener)

    spark.streams.addListener = slow_add
    routes = SessionListener.of(spark)
    with pytest.raises(ModeSwitchError, match=r"did not finish within 0\.2 s"):
        routes.attach(spark, RecordingReceiver())
    assert not routes.follows("anything")
    release.set()
    receiver = RecordingReceiver()
    routes.attach(spark, receiver).follow("q")  # waits for the same registration, makes no second one
    assert len(calls) == 1 and spark.listeners == [routes.listener]


def test_a_listener_the_connect_client_refuses_at_once_fails_the_attach():
    """Connect's append() warns and drops the listener when the server refuses it: the
    query would never switch, so the attach fails instead."""
    session = FakeConnectSession()
    session.streams._sqlb.append = lambda listener: None  # warned and dropped
    with pytest.raises(ModeSwitchError, match="did not keep the backlog listener"):
        SessionListener.of(session).attach(session, RecordingReceiver())
