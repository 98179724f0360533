"""A run's setting: Apache Kafka and a Spark session as a user gets it, started and stopped
together, with a :class:`~benchmarks.harness.progress.ProgressLog` registered and a warm-up
query, so no measured run pays a cold start."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backlog_source.demo.apache_kafka import start_kafka
from backlog_source.demo.topics import create_topic, produce
from benchmarks.harness.progress import ProgressLog
from benchmarks.harness.runs import backlog_stream, run_available_now
from tests.support.spark_kafka import spark_kafka_connector_jars

#: The project's package folders (installed under ``backlog_source`` by the build).
PROJECT_PACKAGES = ("backlog_source", "core", "split", "events", "enumerator", "reader")


def compile_project_bytecode() -> None:
    """Write the project's bytecode, as ``pip install`` of the wheel does. This machine sets
    ``PYTHONDONTWRITEBYTECODE=1`` and the benchmarks run an editable install, so without
    this every fresh Python process (each query's driver-side runner, each new executor
    worker) would compile the project's modules again, which no user's install does."""
    import compileall

    root = Path(__file__).resolve().parents[2]
    for package in PROJECT_PACKAGES:
        compileall.compile_dir(str(root / package), quiet=1)


def spark_session(jars: list | None = None, master: str = "local[*]"):
    """A local session with Spark's defaults (2 cores here), the source registered, and
    Python workers running this interpreter. ``jars``: for ``spark.jars`` (Spark's Kafka
    connector, which a user of ``format("kafka")`` adds too); ``master``: only where a mode
    cannot run on the default (real-time mode needs a task slot per partition)."""
    compile_project_bytecode()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource

    builder = SparkSession.builder.master(master)
    if jars:
        builder = builder.config("spark.jars", ",".join(str(jar) for jar in jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BacklogDataSource)
    return spark


#: The benchmark broker's heap: Kafka's start scripts give 1 GiB; the test launcher's 512 MiB
#: default is for test sessions that run several brokers.
BROKER_HEAP_MB = 1024


@dataclass(frozen=True)
class Bench:
    """What :func:`kafka_and_spark` yields: the broker, the session, every progress event."""

    broker: Any
    spark: Any
    log: ProgressLog

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers


@contextmanager
def kafka_and_spark(*, connector: bool = False, warm_up_query: bool = True) -> Iterator[Bench]:
    """Apache Kafka (a single node from ``make jvm``), a session as a user gets it
    (:func:`spark_session`; with ``connector``, Spark's Kafka connector on ``spark.jars`` for
    ``format("kafka")``), a :class:`ProgressLog` registered, and one small warm-up query
    (``warm_up_query``), so no measured run pays the JVM's or the Python workers' cold start.
    Spark stops before the broker, whatever happens."""
    broker = start_kafka(heap_mb=BROKER_HEAP_MB)
    try:
        spark = spark_session(jars=spark_kafka_connector_jars() if connector else None)
        try:
            log = ProgressLog()
            spark.streams.addListener(log.listener)
            if warm_up_query:
                warm_up(spark, broker.bootstrap_servers)
            yield Bench(broker, spark, log)
        finally:
            spark.stop()
    finally:
        broker.stop()


#: The warm-up query's topic: as wide as the benchmarks' own.
WARM_UP_PARTITIONS = 8


def warm_up(spark, bootstrap: str, records: int = 200_000) -> None:
    """One small query first (``records`` records to drain), so no configuration pays the
    JVM's and the Python workers' cold start (the first query of a session was measured ~5 s
    slower)."""
    topic = f"bench-warm-up-{time.time_ns()}"
    create_topic(bootstrap, topic, WARM_UP_PARTITIONS)
    produce(bootstrap, topic, ((i % WARM_UP_PARTITIONS, None, b"w" * 100) for i in range(records)))
    run_available_now(backlog_stream(spark, bootstrap, topic))
