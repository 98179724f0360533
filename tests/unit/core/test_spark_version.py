"""The refusal of a PySpark older than 4.2, with the version faked: at registration
(``BacklogDataSource.name``) and at ``load()`` (``BacklogDataSource.__init__``). The real
refusal on PySpark 4.1 was run once by hand (README, "Install")."""

from __future__ import annotations

import pyspark
import pytest

from backlog_source.core.errors import BacklogSourceError, SparkVersionError
from backlog_source.core.spark_version import require_supported_pyspark
from backlog_source.datasource import BacklogDataSource

OPTIONS = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}


@pytest.mark.parametrize("version", ["4.1.4", "4.0.0", "4.1.0.dev0", "3.5.3"])
def test_an_older_pyspark_is_refused_naming_both_versions_and_what_it_lacks(version):
    with pytest.raises(SparkVersionError) as raised:
        require_supported_pyspark(version)
    message = str(raised.value)
    assert f"needs PySpark 4.2 or newer; this Spark's PySpark is {version}" in message
    assert "latestOffset(start, limit)" in message and "format('kafka')" in message
    assert isinstance(raised.value, BacklogSourceError)


@pytest.mark.parametrize("version", ["4.2.0", "4.2.1", "4.3.0", "4.10.0", "5.0.0.dev1", "custom-build"])
def test_4_2_and_newer_and_unreadable_versions_pass(version):
    require_supported_pyspark(version)


def test_registration_and_load_are_refused_on_a_faked_older_pyspark(monkeypatch):
    assert BacklogDataSource.name() == "backlog"
    BacklogDataSource(OPTIONS)  # the installed PySpark passes
    monkeypatch.setattr(pyspark, "__version__", "4.1.4")
    with pytest.raises(SparkVersionError, match="this Spark's PySpark is 4.1.4"):
        BacklogDataSource.name()  # what spark.dataSource.register() calls first
    with pytest.raises(SparkVersionError, match="this Spark's PySpark is 4.1.4"):
        BacklogDataSource(OPTIONS)  # what load() runs in its Python worker
