"""A Python streaming source that does nothing: one row, constant offsets, so what a query on
it costs is PySpark's Python streaming source machinery alone."""

from __future__ import annotations

import sys

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition


class _TrivialReader(DataSourceStreamReader):
    def initialOffset(self):
        return {"o": 0}

    def latestOffset(self):
        return {"o": 1}

    def partitions(self, start, end):
        return [InputPartition(0)]

    def read(self, partition):
        yield (1,)


class TrivialSource(DataSource):
    """One row, constant offsets: nothing but PySpark's Python streaming source machinery."""

    @classmethod
    def name(cls):
        return "trivial_python"

    def schema(self):
        return "x int"

    def streamReader(self, schema):
        return _TrivialReader()


def register_trivial_source(spark) -> None:
    """Register :class:`TrivialSource` as ``trivial_python``. Spark's Python workers need not
    find this package, so its module is pickled by value."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(TrivialSource)
