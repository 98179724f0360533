# Two commands a newcomer needs: `make demo` and `make test`.
# Both create (or reuse) .venv and install the project with its dev extras into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Apache Kafka's broker and Spark's Kafka connector, from Maven Central (scripts/install-jvm.sh, with PySpark's Ivy).
JVM_STAMP := .jvm/.installed
# Every module of benchmarks/ but the package and its harness: `make bench-<name>`.
BENCHMARKS := broker_growth catch_up_budgets consumer_reuse control_events driver_heap executor_faults fetch_ahead fetch_size latency latency_versus_kafka mode_switch partitions_scale pyspark_bytecode query_startup read_throughput restart_after_downtime slow_sink_switch snapshot_bootstrap soak tracing_cost worker_heap worker_memory

.PHONY: jvm test test-wheel test-oldest-python test-unit test-integration demo bench soak $(addprefix bench-,$(BENCHMARKS)) check-tools clean

check-tools:
	@scripts/check-tools.sh "$(PYTHON)"

$(STAMP): pyproject.toml tests/constraints.txt
	@$(MAKE) --no-print-directory check-tools
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -c tests/constraints.txt
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

# The wheel as users install it (not editable, fresh environment, outside the tree) first,
# then the unit suite on the oldest supported Python, then every test; the standalone-cluster
# test runs on that same installed wheel.
test: test-wheel test-oldest-python
	$(PY) -m pytest tests

$(STAMP_OLDEST): pyproject.toml tests/constraints.txt
	@test -n "$(PYTHON_OLDEST)" || { echo "error: no Python 3.10 found (the oldest Python backlog-source supports). Install it, point PYTHON_OLDEST at it, or run 'make test PYTHON_OLDEST=skip' to leave that check out." >&2; exit 1; }
	@test -x $(VENV_OLDEST)/bin/python || $(PYTHON_OLDEST) -m venv $(VENV_OLDEST)
	$(VENV_OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_OLDEST)/bin/python -m pip install --quiet -e '.[dev]' -c tests/constraints.txt
	@touch $(STAMP_OLDEST)

ifeq ($(PYTHON_OLDEST),skip)
test-oldest-python:
	@echo "NOT TESTED: the unit suite on Python 3.10 (PYTHON_OLDEST=skip)"
else
test-oldest-python: $(STAMP_OLDEST)
	$(VENV_OLDEST)/bin/python -m pytest -q -p no:cacheprovider tests/unit
endif

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
	rm -rf $(VENV) $(VENV_OLDEST) .venv-wheel .jvm demo-output .pytest_cache

