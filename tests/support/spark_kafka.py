"""Test and benchmark tooling: the jars of Spark's own Kafka source (``format("kafka")``), for
the sessions that run it beside ``format("backlog")``. It lives in the test tree, as Spark
keeps ``KafkaTestUtils`` under ``src/test``: the wheel never needs Spark's connector.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyspark

from backlog_source.demo.apache_kafka import find_installed
from backlog_source.demo.errors import EmbeddedBrokerError

#: Where ``make jvm`` puts Spark's Kafka connector, and the variable that overrides it.
CONNECTOR_FOLDER = Path(".jvm") / "spark-kafka"
CONNECTOR_VARIABLE = "BACKLOG_SOURCE_SPARK_KAFKA_JARS"
#: Set to ``off`` for a test session without Spark's connector: ``make test-newest-spark`` runs
#: the PySpark pip picks, of which no connector is installed, and selects no test that uses it.
WITHOUT_CONNECTOR_VARIABLE = "BACKLOG_SOURCE_TESTS_SPARK_KAFKA"
_CONNECTOR = "spark-sql-kafka-0-10_2.13-*.jar"


def spark_kafka_connector_jars() -> list[Path]:
    """The jars of Spark's Kafka source that ``make jvm`` installs into ``.jvm/spark-kafka``,
    for ``spark.jars``. Raises :class:`EmbeddedBrokerError` when they are missing or built for
    another Spark version than the installed PySpark (Spark's internal classes move between
    versions)."""
    folder = find_installed(CONNECTOR_FOLDER, _CONNECTOR, CONNECTOR_VARIABLE)
    [connector] = folder.glob(_CONNECTOR)
    version = connector.name.removeprefix("spark-sql-kafka-0-10_2.13-").removesuffix(".jar")
    if version != pyspark.__version__:
        raise EmbeddedBrokerError(
            f"Spark's Kafka connector in {folder} is {version}, the installed PySpark is {pyspark.__version__}: "
            "install the PySpark of tests/constraints.txt ('make clean test' rebuilds both)"
        )
    return sorted(folder.glob("*.jar"))


def session_jars() -> list[Path]:
    """The jars the test session's ``spark.jars`` gets: Spark's Kafka connector, or none when
    ``BACKLOG_SOURCE_TESTS_SPARK_KAFKA=off`` (then ``format("kafka")`` fails to load, as on a
    Spark without the connector)."""
    if os.environ.get(WITHOUT_CONNECTOR_VARIABLE, "").lower() == "off":
        return []
    return spark_kafka_connector_jars()
