"""The output schema: the same columns, types and order as Spark's built-in Kafka source.

Also the Arrow schema the reader builds batches in. PySpark checks a data source's Arrow
batches against ``to_arrow_schema(schema, timezone="UTC")`` with exact equality, so the Arrow
schema is derived with that same function rather than written out a second time.

Arrow is not imported here: the process ``load()`` starts needs the Spark schema only, and
pyarrow (with numpy) is most of what it would import (see ``backlog_source/datasource.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema; ``headers`` is appended when ``includeHeaders=true``."""
    return StructType(_BASE_FIELDS + ([_HEADERS_FIELD] if include_headers else []))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the record batches ``read()`` yields."""
    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")
