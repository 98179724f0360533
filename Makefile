# Two commands a newcomer needs: `make demo` and `make test`.
# Both create (or reuse) .venv and install the project with its dev extras into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test test-wheel test-unit test-integration demo bench bench-modes bench-tracing bench-snapshot bench-latency check-tools clean

check-tools:
	@scripts/check-tools.sh "$(PYTHON)"

$(STAMP): pyproject.toml
	@$(MAKE) --no-print-directory check-tools
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The wheel as users install it (not editable, fresh environment, outside the tree) first,
# then every test; the standalone-cluster test runs on that same installed wheel.
test: test-wheel
	$(PY) -m pytest tests

test-wheel: $(STAMP)
	$(PY) -m tests.wheel.wheel_env

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration

demo: $(STAMP)
	$(PY) -m backlog_source.cli demo

bench: $(STAMP)
	$(PY) benchmarks/read_throughput.py

bench-modes: $(STAMP)
	$(PY) benchmarks/mode_switch.py

bench-latency: $(STAMP)
	$(PY) benchmarks/latency.py

bench-tracing: $(STAMP)
	$(PY) benchmarks/tracing_cost.py

bench-snapshot: $(STAMP)
	$(PY) benchmarks/snapshot_bootstrap.py

clean:
	rm -rf $(VENV) .venv-wheel demo-output .pytest_cache
