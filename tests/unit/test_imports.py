"""What importing the package costs and loads: every process that unpickles the source
imports it (the driver-side runner of every query start, each new executor worker)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    ["backlog_source.reader.kafka_reader", "backlog_source.enumerator.enumerator", "backlog_source.events",
     "backlog_source.enumerator.state_codec", "backlog_source.datasource", "backlog_source.stream_reader",
     "backlog_source.batch_reader", "backlog_source"],
)
def test_every_package_imports_first_in_a_fresh_interpreter(module):
    # Executors unpickle splits and readers in fresh workers; import order must not matter.
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)


def modules_loaded_by(module: str) -> list[str]:
    """What importing ``module`` loads in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", f"import sys, {module}; print(' '.join(sorted(sys.modules)))"],
        check=True, capture_output=True, text=True,
    ).stdout.split()


def test_what_load_unpickles_loads_neither_arrow_nor_the_read_path():
    """``load()`` starts a fresh Python process that unpickles BacklogDataSource and asks for
    its schema: every query start and restart pays its imports, before ``start()``. PySpark's
    own module for it imports no Arrow; pyarrow with numpy (~0.13 s), the enumerator and the
    read path are for the processes that plan and read (``streamReader`` imports them)."""
    loaded = modules_loaded_by("backlog_source.datasource")
    heavy = {"pyarrow", "numpy", "backlog_source.stream_reader", "backlog_source.batch_reader",
             "backlog_source.enumerator.enumerator", "backlog_source.reader.kafka_reader"}
    assert heavy.isdisjoint(loaded), sorted(heavy.intersection(loaded))


def test_the_stream_reader_loads_neither_pandas_nor_pyarrow_compute():
    # Spark starts a fresh Python process per query start (and per restart switch) that
    # unpickles the stream reader, importing the package; what it loads is start-up every
    # query pays. These two cost ~0.2 s and ~25 ms, and only reading needs them (an array
    # built at import time loads pandas). benchmarks/query_startup.py measures the rest.
    loaded = modules_loaded_by("backlog_source.stream_reader")
    heavy = {"pandas", "pyarrow.compute"}
    assert heavy.isdisjoint(loaded), sorted(heavy.intersection(loaded))
    # Test and demo tooling is never on a query's path, nor the user's driver-program side
    # (the mode switch and the metrics: imported on first use from the package).
    tooling = [m for m in loaded if m.startswith(("backlog_source.demo", "backlog_source.mode_switch",
                                                  "backlog_source.metrics"))]
    assert tooling == []


def test_what_spark_unpickles_imports_no_model_library():
    """The source's runner on the driver and every executor worker are fresh Python
    processes that import the data source, its splits and ReaderConfig at a query's start:
    their imports are start-up time, and a model library (pydantic: ~0.1 s with its models
    built) is none of what they need. Run in a fresh interpreter, so nothing else imported it."""
    code = ("import sys, pickle, backlog_source.stream_reader, backlog_source.reader.kafka_reader; "
            "from backlog_source.core.settings import parse_options; "
            "c = parse_options({'kafka.bootstrap.servers': 'h:1', 'subscribe': 't', 'kafka.sasl.password': 'x'}); "
            "pickle.loads(pickle.dumps(c.reader_config)); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core', "
            "'pydantic_settings')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", loaded


def test_the_package_still_exports_everything_it_lists():
    import backlog_source

    for name in backlog_source.__all__:
        assert getattr(backlog_source, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        backlog_source.no_such_name  # noqa: B018
