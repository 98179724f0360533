# Two commands a newcomer needs: `make demo` and `make test`.
# Both create (or reuse) .venv and install the project with its dev extras into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Apache Kafka's broker and Spark's Kafka connector, from Maven Central (scripts/install-jvm.sh, with PySpark's Ivy).
JVM_STAMP := .jvm/.installed
# Every module of benchmarks/ but the package and its harness: `make bench-<name>`.
BENCHMARKS := broker_growth catch_up_budgets consumer_reuse control_events driver_heap executor_faults fetch_ahead fetch_size group_commits latency latency_versus_kafka mode_switch partitions_scale pyspark_bytecode query_startup read_throughput restart_after_downtime slow_sink_switch snapshot_bootstrap soak tracing_cost worker_heap worker_memory

.PHONY: test-suite jvm test test-environments wheel-environment test-wheel test-oldest-python test-newest-spark test-unit test-integration demo bench soak $(addprefix bench-,$(BENCHMARKS)) check-tools clean

check-tools:
	@scripts/check-tools.sh "$(PYTHON)"

# The project's environments skip pip's byte-compiling of everything installed: PySpark,
# pandas and matplotlib alone cost ~23 s of CPU per environment, three environments side by side
# on 2 cores in make test; Python compiles what a test imports, once, when it imports it.
PIP_INSTALL := -m pip install --quiet --no-compile

$(STAMP): pyproject.toml tests/constraints.txt
	@$(MAKE) --no-print-directory check-tools
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) $(PIP_INSTALL) --upgrade pip
	$(PY) $(PIP_INSTALL) -e '.[dev]' -c tests/constraints.txt
	@touch $(STAMP)

# Resolved by the Ivy inside the installed PySpark: Java is the only prerequisite.
$(JVM_STAMP): jvm/kafka-broker.pom.xml jvm/spark-kafka-connector.pom.xml scripts/install-jvm.sh $(STAMP)
	scripts/install-jvm.sh $(PY)
	@touch $(JVM_STAMP)

jvm: $(JVM_STAMP)

# The oldest Python the project supports (pyproject's requires-python): its unit suite runs
# there too. Found on PATH or under pyenv; `make test PYTHON_OLDEST=skip` leaves it out and says so.
PYTHON_OLDEST ?= $(shell for p in python3.10 $$(pyenv root 2>/dev/null)/versions/3.10*/bin/python3.10; do "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null && command -v "$$p" && break; done)
VENV_OLDEST ?= .venv-py310
STAMP_OLDEST := $(VENV_OLDEST)/.installed

# The newest PySpark pip picks for a user (pyproject's range, no constraints file): .venv pins the
# PySpark of Spark's Kafka connector, of which no build for this one is installed, so this runs
# the integration tests that need no format("kafka") and together call every PySpark API the
# source uses. The environment is built once per pyproject.toml; `make clean` picks again.
VENV_NEWEST ?= .venv-spark-newest
STAMP_NEWEST := $(VENV_NEWEST)/.installed
NEWEST_SPARK_TESTS := \
	tests/integration/test_source.py::test_schema_is_sparks_kafka_schema \
	tests/integration/test_source.py::test_bad_option_fails_at_load_with_its_message \
	tests/integration/test_source.py::test_available_now_with_max_offsets_reads_exactly_the_captured_end \
	tests/integration/test_source.py::test_min_offsets_waits_for_enough_records_or_the_delay \
	tests/integration/test_batch_reads.py::test_a_batch_read_on_its_own_reads_every_column_as_produced \
	tests/integration/test_install.py \
	'tests/integration/test_mode_switch.py::test_the_restart_method_keeps_the_same_guarantees[forced]' \
	tests/reliability/test_spark_connect.py
# Which PySpark API each covers: DataSource (register, schema, options at load()); the stream
# reader's latestOffset(start, limit) with ReadMaxRows, Trigger.AvailableNow and
# reportLatestOffset; ReadMinRows with maxTriggerDelay; DataSourceReader (spark.read);
# StreamingQueryListener and the in-place trigger switch (install); the switch by restart;
# Spark Connect (source, listener, start_backlog_aware, install through a Connect client).

# The environments first, side by side (building one is mostly waiting on the package index,
# so four at once take about as long as one); then, side by side again, every test (three
# pytest processes, grouped by how much they wait: tests/conftest.py) beside the wheel as users install it
# (not editable, fresh environment, outside the tree; one small query), the unit suite on the
# oldest supported Python (one core, no Spark) and the newest PySpark's tests: the suite alone
# left the 2 CPUs ~20 % idle, the others use that. Each step's output is shown when it ends.
# The standalone-cluster test runs on that same installed wheel.
test:
	@$(MAKE) --no-print-directory -j5 --output-sync=target test-environments
	@$(MAKE) --no-print-directory -j4 --output-sync=target test-suite test-wheel test-oldest-python test-newest-spark

# Every test in the project's environment, in three pytest processes (tests/conftest.py).
test-suite: $(STAMP) $(JVM_STAMP)
	$(PY) -m pytest -n 3 --dist loadgroup tests

test-environments: $(STAMP) $(JVM_STAMP) $(STAMP_NEWEST) $(if $(filter skip,$(PYTHON_OLDEST)),,$(STAMP_OLDEST)) wheel-environment

# The wheel's own environment (.venv-wheel), rebuilt when its sources changed (tests/wheel/wheel_env.py).
# Built by the interpreter it is made from when that has tomllib (Python 3.11+; wheel_env needs
# nothing else), beside the project's environment rather than after it (~55 s of make test).
WHEEL_BUILDER := $(shell $(PYTHON) -c 'import tomllib' 2>/dev/null && echo $(PYTHON))
wheel-environment: $(if $(WHEEL_BUILDER),,$(STAMP))
	$(or $(WHEEL_BUILDER),$(PY)) -m tests.wheel.wheel_env --install

$(STAMP_OLDEST): pyproject.toml tests/constraints.txt
	@test -n "$(PYTHON_OLDEST)" || { echo "error: no Python 3.10 found (the oldest Python backlog-source supports). Install it, point PYTHON_OLDEST at it, or run 'make test PYTHON_OLDEST=skip' to leave that check out." >&2; exit 1; }
	@test -x $(VENV_OLDEST)/bin/python || $(PYTHON_OLDEST) -m venv $(VENV_OLDEST)
	$(VENV_OLDEST)/bin/python $(PIP_INSTALL) --upgrade pip
	$(VENV_OLDEST)/bin/python $(PIP_INSTALL) -e '.[dev]' -c tests/constraints.txt
	@touch $(STAMP_OLDEST)

ifeq ($(PYTHON_OLDEST),skip)
test-oldest-python:
	@echo "NOT TESTED: the unit suite on Python 3.10 (PYTHON_OLDEST=skip)"
else
test-oldest-python: $(STAMP_OLDEST)
	$(VENV_OLDEST)/bin/python -m pytest -q -p no:cacheprovider tests/unit
endif

$(STAMP_NEWEST): pyproject.toml
	@$(MAKE) --no-print-directory check-tools
	@test -x $(VENV_NEWEST)/bin/python || $(PYTHON) -m venv $(VENV_NEWEST)
	$(VENV_NEWEST)/bin/python $(PIP_INSTALL) --upgrade pip
	$(VENV_NEWEST)/bin/python $(PIP_INSTALL) -e '.[dev]'
	@touch $(STAMP_NEWEST)

test-newest-spark: $(STAMP_NEWEST) $(JVM_STAMP)
	@$(VENV_NEWEST)/bin/python -c "import pyspark; print('PySpark', pyspark.__version__, '(the newest pip picks), without Spark\'s Kafka connector')"
	BACKLOG_SOURCE_TESTS_SPARK_KAFKA=off $(VENV_NEWEST)/bin/python -m pytest -q -p no:cacheprovider $(NEWEST_SPARK_TESTS)

test-wheel: $(STAMP) $(JVM_STAMP)
	$(PY) -m tests.wheel.wheel_env

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP) $(JVM_STAMP)
	$(PY) -m pytest tests/integration

demo: $(STAMP) $(JVM_STAMP)
	$(PY) -m backlog_source.cli demo

# Benchmarks (benchmarks/README.md): `make bench` is the read-throughput headline; each
# benchmark also has its own target, `make bench-<name>` = `python -m benchmarks.<name>`.
bench: bench-read_throughput

# Half an hour on three brokers that die (benchmarks/soak.py); longer: make soak SOAK_ARGS="--minutes 120".
soak: $(STAMP) $(JVM_STAMP)
	$(PY) -m benchmarks.soak $(SOAK_ARGS)

$(addprefix bench-,$(BENCHMARKS)): bench-%: $(STAMP) $(JVM_STAMP)
	$(PY) -m benchmarks.$*

clean:
	rm -rf $(VENV) $(VENV_OLDEST) $(VENV_NEWEST) .venv-wheel .jvm demo-output .pytest_cache

