"""Shared fixtures. Integration fixtures start lazily: unit tests need no broker or Spark."""

from __future__ import annotations

import os
import sys
import uuid

import pytest

# Tests reach only loopback. Unless told otherwise, Spark binds its driver (RPC, block manager)
# to the host's first non-loopback interface ("your hostname resolves to a loopback address
# ... using <eth0's address> instead"); the sessions, jobs and clusters tests start inherit this.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

#: ``make test`` runs the suite in three pytest processes (``pytest -n 3 --dist loadgroup``), one
#: per xdist group; each has its own broker and Spark session. ``waiting`` holds files whose tests
#: mostly wait (broker outages, Kafka's own timeouts, Spark Connect, processes of their own
#: starting); ``mixed`` more waiting files beside CPU-heavy ones and the unit suite; every other
#: file is in ``working``. Side by side, the waits overlap the other processes' work: in one
#: process the suite kept the 2 CPUs a third idle. The groups were balanced by each file's
#: measured test time (2026-11-28, two processes side by side, JVMs on C1 only: waiting 685 s,
#: mixed 684 s, working 708 s; in a clean-clone make test at 50c9b78, the 120 slowest tests
#: summed to 957 s, 977 s and 994 s); rebalance when a file's time changes much. They hold only
#: on a pytest below 9.2 (:func:`pytest_configure` says why and refuses a run that would ignore them).
GROUPS = {
    "waiting": frozenset({
        "tests/reliability/test_sasl.py", "tests/reliability/test_broker_outages.py",
        # These two share the Spark Connect server (reliability/conftest.py): one process.
        "tests/reliability/test_connect_stop.py", "tests/reliability/test_spark_connect.py",
        "tests/reliability/test_secrets.py", "tests/reliability/test_newest_jdk.py",
        "tests/integration/test_tracing.py", "tests/integration/test_failures.py",
    }),
    "mixed": frozenset({
        "tests/integration/test_topic_lifecycle.py", "tests/integration/test_kafka_semantics.py",
        "tests/integration/test_side_by_side.py", "tests/integration/test_side_by_side_generated.py",
        "tests/integration/test_topic_selection.py", "tests/integration/test_idle_polling.py",
        "tests/reliability/test_crashes.py", "tests/integration/test_backlog.py",
        "tests/integration/test_install.py", "tests/integration/test_snapshot.py",
        "tests/integration/test_metrics.py", "tests/integration/test_log_end_gaps.py",
    }),
}


def xdist_group(path: str) -> str:
    """The xdist group of the test file at ``path`` (relative to the repository, ``/``-separated):
    its group in :data:`GROUPS`, ``mixed`` for the unit suite, else ``working``."""
    if path.startswith("tests/unit/"):
        return "mixed"
    return next((name for name, files in GROUPS.items() if path in files), "working")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks every test with its file's xdist group (:func:`xdist_group`). Without xdist the marks
    change nothing. First among the hooks, whatever the plugins' order: xdist's own (a worker's)
    turns the marks into the ``@group`` suffix of each test's id that ``--dist loadgroup``
    schedules by."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for item in items:
        path = os.path.relpath(str(item.path), root).replace(os.sep, "/")
        item.add_marker(pytest.mark.xdist_group(xdist_group(path)))


def pytest_configure(config):
    """Refuse a ``--dist loadgroup`` run on a pytest whose test ids pytest-xdist cannot suffix
    (it writes ``Node._nodeid``, gone in pytest 9.2: pytest-xdist#1386): nothing failed then,
    every test went to any worker, each worker started its own broker and Spark. Any other cause
    of lost groups fails tests/unit/test_suite_groups.py, which runs loadgroup as make test does."""
    from _pytest.nodes import Node

    if config.getoption("dist", None) == "loadgroup" and "_nodeid" not in getattr(Node, "__slots__", ()):
        raise pytest.UsageError(
            f"pytest-xdist's --dist loadgroup would ignore the test groups on pytest {pytest.__version__}: "
            "install pytest<9.2 (pytest-xdist#1386), as pyproject.toml's dev extra asks")


#: The JVMs of a test run (Spark drivers, the Spark Connect server, Kafka brokers) live for
#: seconds to minutes on small data: the optimizing JIT compiler (C2) costs them more CPU than
#: it returns. Measured on the demo test: the Spark driver's CPU 35-39 s -> 27 s, the broker's
#: 10.5-11.6 s -> 7.5-9.3 s with C1 only; on the 2-core machine CPU is the suite's time.
QUICK_JIT = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="session", autouse=True)
def _test_jvms_compile_quickly():
    """Before any JVM of the run starts: ``SPARK_SUBMIT_OPTS`` (read by Spark's launcher for
    every driver and the Connect server, inherited by the jobs tests run as processes of their
    own) and ``KAFKA_OPTS`` (added by the embedded broker, as by Kafka's scripts) carry
    :data:`QUICK_JIT`. Benchmarks do not set them. Values the caller set are kept."""
    added = [name for name in ("SPARK_SUBMIT_OPTS", "KAFKA_OPTS") if name not in os.environ]
    for name in added:
        os.environ[name] = QUICK_JIT
    yield
    for name in added:
        del os.environ[name]


@pytest.fixture(scope="session", autouse=True)
def _spark_processes_start_without_compiling_pyspark(request):
    """Before any Spark process starts (the shared session, Spark Connect, the jobs tests run
    as processes of their own, which inherit the environment): ``SPARK_HOME`` points at a
    mirror of the installed PySpark whose ``pyspark.zip`` holds bytecode, the README's opt-in
    deployment step (tests/support/spark_home.py says why). Only when the run holds more than
    unit tests, which start no Spark. A ``SPARK_HOME`` the caller set is kept."""
    unit = os.path.join(os.path.dirname(__file__), "unit") + os.sep
    if "SPARK_HOME" in os.environ or all(str(item.path).startswith(unit) for item in request.session.items):
        yield
        return
    from tests.support.spark_home import bytecode_spark_home

    os.environ["SPARK_HOME"] = str(bytecode_spark_home())
    yield
    del os.environ["SPARK_HOME"]


@pytest.fixture(scope="session")
def broker():
    """One Apache Kafka broker (single-node KRaft, installed by ``make jvm``) for the whole
    test session; tests use uuid-named topics. Its log cleaner looks for work every 500 ms
    rather than every 15 s, so a test of a compacted topic waits for the cleaning, not for
    the cleaner's back-off (only compacted topics are cleaned: that test's and Kafka's own)."""
    from backlog_source.demo.apache_kafka import start_kafka

    running = start_kafka(settings={"log.cleaner.backoff.ms": "500"})
    yield running
    running.stop()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession (2 cores; a failed task is retried once, as on a cluster) for the
    whole test session, with the source registered and Spark's own Kafka connector loaded."""
    # Spark's Python workers must run this interpreter, which has the project installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource
    from tests.support.spark_kafka import session_jars

    session = (
        SparkSession.builder.master("local[2,2]")
        # Spark's own format("kafka"), for the tests that run it beside format("backlog").
        .config("spark.jars", ",".join(str(jar) for jar in session_jars()))
        .appName("backlog-source-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(BacklogDataSource)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(autouse=True)
def _no_session_metrics_left_behind(request):
    """After a test that used the shared session: end its backlog metrics exporter, if the
    test's OTEL_* environment turned one on (install and start_backlog_aware do). Otherwise
    it keeps exporting to that test's receiver, and a later enable_metrics gets it back
    instead of reading the later test's environment (an order-dependent failure)."""
    yield
    if "spark" in request.fixturenames:
        from backlog_source.mode_switch.session_metrics import disable_metrics

        disable_metrics(request.getfixturevalue("spark"))


@pytest.fixture
def topic_name():
    return f"t-{uuid.uuid4().hex[:12]}"


OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_METRIC_EXPORT_INTERVAL", "OTEL_EXPORTER_PROMETHEUS_HOST", "OTEL_EXPORTER_PROMETHEUS_PORT",
)


@pytest.fixture
def otel_env(monkeypatch):
    """A clean OTEL_* environment for this process; its exporter is rebuilt from it."""
    from backlog_source.core.tracing import exporter

    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    exporter.reset()
    yield monkeypatch
    exporter.reset()


@pytest.fixture
def receiver():
    """A real OTLP/HTTP receiver on loopback."""
    from backlog_source.demo.otlp_receiver import OtlpReceiver

    with OtlpReceiver() as running:
        yield running
