# Two commands a newcomer needs: `make demo` and `make test`.
# Both create (or reuse) .venv and install the project with its dev extras into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Apache Kafka's broker and Spark's Kafka connector, from Maven Central (scripts/install-jvm.sh, with PySpark's Ivy).
JVM_STAMP := .jvm/.installed
# Every module of benchmarks/ but the package and its harness: `make bench-<name>`.
BENCHMARKS := broker_growth catch_up_budgets consumer_reuse control_events fetch_ahead fetch_size latency latency_versus_kafka mode_switch pyspark_bytecode query_startup read_throughput restart_after_downtime slow_sink_switch snapshot_bootstrap soak tracing_cost worker_heap worker_memory

.PHONY: jvm test test-wheel test-unit test-integration demo bench soak $(addprefix bench-,$(BENCHMARKS)) check-tools clean

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

# The wheel as users install it (not editable, fresh environment, outside the tree) first,
# then every test; the standalone-cluster test runs on that same installed wheel.
test: test-wheel
	$(PY) -m pytest tests

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
	rm -rf $(VENV) .venv-wheel .jvm demo-output .pytest_cache

