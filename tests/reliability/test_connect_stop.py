"""Spark Connect: ``handle.stop()`` never hangs (issue 33, item 4).

Four backlog-aware queries, one after another in one Connect session, each stopped at a
different point, in a seeded order: right after start, mid-backlog, right after the switch to
low latency (the restart's terminated and started events on their way), or in low latency
with idle and progress events streaming (records produced meanwhile). Each stop must
return within ``STOP_BOUND_S``; no query may be left active; the session keeps one backlog
listener on its client-side bus; and ``spark.stop()`` at the end returns too.

The client registers no listener of its own: the hang needed the backlog listener to be the
bus's *last* one (PySpark Connect's ``StreamingQueryListenerBus.remove`` joins its event
thread, holding the bus lock, only then); the older Connect test registered a recorder
first, which is why it never hung.

The client runs in a subprocess (as in test_spark_connect.py), started as
``python -m tests.reliability.test_connect_stop CONNECT_URL BOOTSTRAP TOPIC WORK_DIR SEED [MODE]``;
if a stop does not return in time it prints every thread's stack and exits 3 at once (a
deadlocked Connect event thread is not a daemon and would keep the process alive).

A second test runs the client in mode ``exit-without-session-stop``: one handle, stopped in
low latency, and the program returns without ``spark.stop()``. The session's listener stays
registered, so Connect's event thread lives on; it must not keep the program from exiting
(it is a daemon because the listener is registered from a daemon thread).

A third runs it in mode ``install-stop-at-switch`` (issue 46, item 2): ``install(spark, ...,
allow_restart=True)`` and a plain ``start()``, stopped at the start of the restart switch
that follows its backlog, ``INSTALL_ROUNDS`` times in a row: the user's
``spark.streams.get(id).stop()`` then ``installation.uninstall()``, or the other way round;
either as the deciding progress event reaches the client (0-0.2 s later, where the stop used
to lose to the restart) or just as the switch's stop of the old run has returned. Each round
is bounded; after each, no run of the query is active, and none is at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import make_topic

pytestmark = pytest.mark.integration

ROUNDS = 4  # each of the four POINTS once, in a seeded order (the suite's time budget: 8 took ~170 s)
STOP_BOUND_S = 60.0  # a restart-method switch in progress (settle, stop, start) finishes first
POINT_WAIT_S = 180.0  # how long a round may wait for its stop point (a Connect restart takes seconds)
POINTS = ("at-start", "mid-backlog", "right-after-switch", "low-latency")
PARTITIONS, PER_PARTITION, PER_TRIGGER = 2, 4_000, 1_000  # 8 backlog batches per round
INSTALL_ROUNDS = 4  # each of the four (point, order) pairs once, in a seeded order
INSTALL_PER_PARTITION = 1_000  # 2 backlog batches, then the switch
INSTALL_POINTS = ("at-decision", "between-runs")
INSTALL_ORDERS = ("stop-first", "uninstall-first")


def test_stop_returns_in_time_at_each_point_under_spark_connect(broker, topic_name, tmp_path,
                                                                             connect_server):  # noqa: F811
    make_topic(broker, topic_name, PARTITIONS, per_partition=PER_PARTITION)
    seed = 334
    result = subprocess.run(
        [sys.executable, "-m", "tests.reliability.test_connect_stop", connect_server, broker.bootstrap_servers,
         topic_name, str(tmp_path), str(seed)],
        capture_output=True, text=True, timeout=ROUNDS * (POINT_WAIT_S + STOP_BOUND_S) + 300,
        cwd=Path(__file__).parents[2])
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"exit {result.returncode}; stderr:\n{result.stderr[-6000:]}"
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert result.returncode == 0, f"seed {seed}: {json.dumps(report, indent=1)}\nstderr:\n{result.stderr[-6000:]}"
    assert report["session"].startswith("pyspark.sql.connect")
    rounds = report["rounds"]
    assert len(rounds) == ROUNDS
    for number, round_ in enumerate(rounds):
        assert round_["stopped_in_time"], f"round {number} ({round_['point']}): {round_}"
        assert round_["error"] is None, f"round {number} ({round_['point']}): {round_['error']}"
        assert round_["stop_seconds"] < STOP_BOUND_S and round_["active_after"] == 0, round_
        assert round_["reached"], f"round {number} never reached its stop point: {round_}"
    assert {r["point"] for r in rounds} == set(POINTS)
    # Events still reach the session's listener after every earlier stop: later rounds switched.
    assert sum(1 for r in rounds if r["switched"]) >= ROUNDS // 2
    assert report["backlog_listeners"] == 1  # one per session, kept registered
    assert report["session_stopped_in_time"], report


def test_a_program_that_stops_its_handle_but_not_its_session_exits(broker, topic_name, tmp_path,
                                                                    connect_server):  # noqa: F811
    make_topic(broker, topic_name, PARTITIONS, per_partition=PER_PARTITION)
    result = subprocess.run(
        [sys.executable, "-m", "tests.reliability.test_connect_stop", connect_server, broker.bootstrap_servers,
         topic_name, str(tmp_path), "1", "exit-without-session-stop"],
        capture_output=True, text=True, timeout=POINT_WAIT_S + STOP_BOUND_S + 180, cwd=Path(__file__).parents[2])
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert result.returncode == 0 and lines, f"exit {result.returncode}; stderr:\n{result.stderr[-6000:]}"
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert report["switched"] and report["stopped_in_time"], report
    assert report["event_thread_daemon"] is True, report


def test_a_users_stop_at_the_start_of_an_install_restart_switch_wins_every_time_under_spark_connect(
        broker, topic_name, tmp_path, connect_server):  # noqa: F811
    make_topic(broker, topic_name, PARTITIONS, per_partition=INSTALL_PER_PARTITION)
    result = subprocess.run(
        [sys.executable, "-m", "tests.reliability.test_connect_stop", connect_server, broker.bootstrap_servers,
         topic_name, str(tmp_path), "46", "install-stop-at-switch"],
        capture_output=True, text=True, timeout=INSTALL_ROUNDS * (POINT_WAIT_S + STOP_BOUND_S) + 300,
        cwd=Path(__file__).parents[2])
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"exit {result.returncode}; stderr:\n{result.stderr[-6000:]}"
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert result.returncode == 0, f"{json.dumps(report, indent=1)}\nstderr:\n{result.stderr[-6000:]}"
    rounds = report["rounds"]
    assert len(rounds) == INSTALL_ROUNDS
    for number, round_ in enumerate(rounds):
        where = f"round {number} ({round_['point']}, {round_['order']}): {round_}"
        assert round_["reached"], where
        assert round_["error"] is None, where
        assert round_["stopped_in_time"] and round_["active_after"] == [], where
        assert round_["got"] is not None, where  # spark.streams.get(id) found the query to stop
    assert {(r["point"], r["order"]) for r in rounds} == {(p, o) for p in INSTALL_POINTS for o in INSTALL_ORDERS}
    assert report["active_at_end"] == [], report


# -- the client (runs in the subprocess) -------------------------------------------------------


def main() -> None:
    import faulthandler
    import os
    import random
    import threading
    import time

    url, bootstrap, topic, work, seed = sys.argv[1:6]
    mode = sys.argv[6] if len(sys.argv) > 6 else "rounds"
    if mode == "install-stop-at-switch":
        install_rounds(url, bootstrap, topic, work, int(seed))
        return
    from backlog_source import BacklogDataSource, start_backlog_aware
    from backlog_source.demo.traffic import LiveProducer
    from backlog_source.mode_switch.session_listener import SessionListener
    from tests.reliability.connect_client import connect_session

    spark = connect_session(url)
    report: dict = {"session": type(spark).__module__, "seed": int(seed), "rounds": []}
    spark.dataSource.register(BacklogDataSource)
    if mode == "exit-without-session-stop":
        writer = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("backlog.maxOffsetsPerTrigger", str(PER_TRIGGER)).load()
                  .writeStream.format("parquet").option("path", f"{work}/out")
                  .option("checkpointLocation", f"{work}/ckpt"))
        handle = start_backlog_aware(writer, "0 seconds", "500 milliseconds")
        end = time.time() + POINT_WAIT_S
        while handle.mode != "low-latency" and time.time() < end:
            handle.await_termination(0.2)
        report["switched"] = handle.mode == "low-latency"
        started = time.monotonic()
        handle.stop(timeout=STOP_BOUND_S)
        report["stopped_in_time"] = time.monotonic() - started < STOP_BOUND_S
        event_thread = getattr(getattr(spark.streams, "_sqlb", None), "_execution_thread", None)  # private: report only
        report["event_thread_daemon"] = None if event_thread is None else event_thread.daemon
        print("REPORT " + json.dumps(report), flush=True)
        return  # no spark.stop(), no os._exit: the interpreter must be able to exit on its own
    rng = random.Random(int(seed))
    points = [POINTS[i % len(POINTS)] for i in range(ROUNDS)]
    rng.shuffle(points)

    def give_up(what: str) -> None:
        """A wait did not end: print the report and every thread's stack, and leave now."""
        report["hung"] = what
        print("REPORT " + json.dumps(report), flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(3)

    def last_batch(handle) -> int:
        progress = handle.query.lastProgress
        return -1 if progress is None else progress.get("batchId", -1)

    def wait_for(predicate, seconds: float) -> bool:
        end = time.time() + seconds
        while time.time() < end:
            if predicate():
                return True
            time.sleep(0.05)  # polling a remote query's state; the bound is what matters
        return False

    for number, point in enumerate(points):
        writer = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("backlog.maxOffsetsPerTrigger", str(PER_TRIGGER)).load()
                  .writeStream.format("parquet").option("path", f"{work}/out-{number}")
                  .option("checkpointLocation", f"{work}/ckpt-{number}"))
        handle = start_backlog_aware(writer, "0 seconds", "500 milliseconds")
        round_: dict = {"point": point, "reached": False, "switched": False, "error": None}
        producer = None
        try:
            if point == "at-start":
                round_["reached"] = True
            elif point == "mid-backlog":
                wanted = rng.randint(0, 3)
                round_["reached"] = wait_for(lambda: last_batch(handle) >= wanted, POINT_WAIT_S)
                round_["reached"] = round_["reached"] and handle.mode == "high-throughput"
            else:
                round_["reached"] = wait_for(lambda: handle.mode == "low-latency", POINT_WAIT_S)
                if point == "low-latency" and round_["reached"]:
                    producer = LiveProducer(bootstrap, topic, PARTITIONS, rate=50).start()
                    time.sleep(rng.uniform(0.5, 3.0))  # a random moment in low latency, events streaming
        except Exception as exc:
            round_["error"] = f"{type(exc).__name__}: {exc}"
        round_["mode_at_stop"] = str(handle.mode)
        finished, failure = threading.Event(), []

        def stop():
            try:
                handle.stop(timeout=STOP_BOUND_S)
            except BaseException as exc:
                failure.append(exc)
            finally:
                finished.set()

        started = time.monotonic()
        threading.Thread(target=stop, name=f"stop-{number}", daemon=True).start()
        round_["stopped_in_time"] = finished.wait(STOP_BOUND_S + 10)
        round_["stop_seconds"] = round(time.monotonic() - started, 3)
        if producer is not None:
            producer.stop()
        if not round_["stopped_in_time"]:
            report["rounds"].append(round_)
            give_up(f"round {number} ({point}): stop() did not return within {STOP_BOUND_S + 10:.0f} s")
        if failure:
            round_["error"] = f"{type(failure[0]).__name__}: {failure[0]}"
        round_["switched"] = any(t.to_mode == "low-latency" for t in handle.transitions)
        round_["active_after"] = len(spark.streams.active)
        report["rounds"].append(round_)
        print(f"round {number}: {round_}", file=sys.stderr, flush=True)

    bus = getattr(spark.streams, "_sqlb", None)  # the Connect client's bus (private; read for the report only)
    ours = SessionListener.of(spark).listener
    report["backlog_listeners"] = sum(1 for listener in getattr(bus, "_listener_bus", []) if listener is ours)
    stopped = threading.Event()
    threading.Thread(target=lambda: (spark.stop(), stopped.set()), name="session-stop", daemon=True).start()
    report["session_stopped_in_time"] = stopped.wait(STOP_BOUND_S)
    print("REPORT " + json.dumps(report), flush=True)
    sys.stdout.flush()
    os._exit(0 if report["session_stopped_in_time"] else 3)  # a stuck non-daemon thread must not keep us


def install_rounds(url: str, bootstrap: str, topic: str, work: str, seed: int) -> None:
    """The client of the third test: ``INSTALL_ROUNDS`` rounds of install, start, stop at the
    switch, uninstall (see the module docstring); prints one ``REPORT`` line."""
    import faulthandler
    import os
    import random
    import threading
    import time

    from backlog_source import BacklogDataSource, install
    from backlog_source.mode_switch.connect_starts import ConnectStarts
    from backlog_source.mode_switch.listener import BatchCommitted
    from backlog_source.mode_switch.session_listener import SessionListener
    from tests.reliability.connect_client import connect_session

    spark = connect_session(url)
    spark.dataSource.register(BacklogDataSource)
    rng = random.Random(seed)
    report: dict = {"session": type(spark).__module__, "rounds": []}

    class Moments:
        """When each query's backlog is done (its deciding progress event reaches the client, as
        it reaches the installation), and when a switch's stop of the old run has returned."""

        def __init__(self):
            self.changed = threading.Condition()
            self.done: set[str] = set()
            self.between: set[str] = set()

        def receive(self, message):  # the Connect event thread: never blocks
            if isinstance(message, BatchCommitted) and not message.processing_backlog:
                with self.changed:
                    self.done.add(message.query_id)
                    self.changed.notify_all()

        def wait(self, found, query_id) -> bool:
            with self.changed:
                return self.changed.wait_for(lambda: query_id in found, POINT_WAIT_S)

    moments = Moments()
    SessionListener.of(spark).attach(spark, moments)
    replace = ConnectStarts.replace

    def marking_replace(self, running, start_next):  # the test's hook: the old run has stopped
        def start():
            with moments.changed:
                moments.between.add(str(running.id))
                moments.changed.notify_all()
            return start_next()
        return replace(self, running, start)

    ConnectStarts.replace = marking_replace

    def give_up(what: str) -> None:
        report["hung"] = what
        print("REPORT " + json.dumps(report), flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(3)

    plan = [(point, order) for point in INSTALL_POINTS for order in INSTALL_ORDERS]
    plan = [plan[i % len(plan)] for i in range(INSTALL_ROUNDS)]
    rng.shuffle(plan)
    for number, (point, order) in enumerate(plan):
        installation = install(spark, "0 seconds", "500 milliseconds", allow_restart=True)
        query = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("backlog.maxOffsetsPerTrigger", str(PER_TRIGGER)).load()
                 .writeStream.format("parquet").option("path", f"{work}/install-out-{number}")
                 .option("checkpointLocation", f"{work}/install-ckpt-{number}")
                 .trigger(processingTime="0 seconds").start())
        query_id = str(query.id)
        round_: dict = {"point": point, "order": order, "error": None, "got": None}
        round_["reached"] = moments.wait(moments.done if point == "at-decision" else moments.between, query_id)
        if point == "at-decision":
            time.sleep(rng.uniform(0.0, 0.2))  # where the user's stop used to lose to the restart
        finished, failure, got = threading.Event(), [], []

        def stop_and_uninstall():
            try:
                if order == "uninstall-first":
                    installation.uninstall()
                running = spark.streams.get(query_id)
                got.append(None if running is None else running.runId)
                if running is not None:
                    running.stop()
                if order == "stop-first":
                    installation.uninstall()
            except BaseException as exc:
                failure.append(exc)
            finally:
                finished.set()

        started = time.monotonic()
        threading.Thread(target=stop_and_uninstall, name=f"stop-{number}", daemon=True).start()
        round_["stopped_in_time"] = finished.wait(STOP_BOUND_S)
        round_["stop_seconds"] = round(time.monotonic() - started, 3)
        if not round_["stopped_in_time"]:
            report["rounds"].append(round_)
            give_up(f"round {number} ({point}, {order}): the stop and uninstall did not return in time")
        if failure:
            round_["error"] = f"{type(failure[0]).__name__}: {failure[0]}"
        round_["got"] = got[0] if got else None
        round_["switch_began"] = query_id in moments.between
        round_["active_after"] = [q.runId for q in spark.streams.active if str(q.id) == query_id]
        report["rounds"].append(round_)
        print(f"round {number}: {round_}", file=sys.stderr, flush=True)
    report["active_at_end"] = [q.runId for q in spark.streams.active]
    stopped = threading.Event()
    threading.Thread(target=lambda: (spark.stop(), stopped.set()), name="session-stop", daemon=True).start()
    report["session_stopped_in_time"] = stopped.wait(STOP_BOUND_S)
    print("REPORT " + json.dumps(report), flush=True)
    sys.stdout.flush()
    os._exit(0)  # a stuck non-daemon thread must not keep us


if __name__ == "__main__":
    main()
