"""A Python streaming source whose planner fails the moment it starts: what a query that fails
at start costs with Spark's Python streaming source machinery alone (a query start, the
planner's Python worker, the error carried back to ``query.exception()``), to set beside a
``format("backlog")`` query that fails on a refused connection."""

from __future__ import annotations

import sys

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource

NAME = "failing_at_start"
MESSAGE = "this source fails as its planner starts"


class FailingAtStart(DataSource):
    @classmethod
    def name(cls):
        return NAME

    def schema(self):
        return "x int"

    def streamReader(self, schema):
        raise RuntimeError(MESSAGE)


def register_failing_source(spark) -> None:
    """Register :class:`FailingAtStart` under :data:`NAME`. Spark's Python workers need not
    find the tests package, so this module is pickled by value."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FailingAtStart)
