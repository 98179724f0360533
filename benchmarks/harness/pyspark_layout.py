"""Where an installed PySpark keeps what its Python processes import."""

from __future__ import annotations

from pathlib import Path

#: The driver-side process Spark starts per Python streaming query; it unpickles the source.
RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"


def installed_spark_home() -> Path:
    """The installed pyspark package, which is SPARK_HOME when none is set."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_worker_path(spark_home: Path) -> list[str]:
    """What Spark puts first on its Python workers' path: ``pyspark.zip`` and py4j's zip
    from ``$SPARK_HOME/python/lib``."""
    lib = spark_home / "python" / "lib"
    return [str(lib / "pyspark.zip"), *(str(p) for p in sorted(lib.glob("py4j-*.zip")))]
