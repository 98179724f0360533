#!/usr/bin/env bash
# Says exactly what to install when python3 >= 3.10 or Java 17+ is missing.
set -euo pipefail
python_bin="${1:-python3}"
if ! command -v "$python_bin" >/dev/null 2>&1; then
  echo "error: $python_bin not found. Install Python 3.10 or newer (e.g. 'apt-get install python3 python3-venv')." >&2
  exit 1
fi
if ! "$python_bin" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "error: $("$python_bin" --version 2>&1) is too old; backlog-source needs Python 3.10 or newer." >&2
  exit 1
fi
if ! "$python_bin" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "error: $python_bin lacks venv/ensurepip. Install it (e.g. 'apt-get install python3-venv')." >&2
  exit 1
fi
if ! command -v java >/dev/null 2>&1; then
  echo "error: java not found. Spark needs Java 17 or newer (e.g. 'apt-get install openjdk-17-jre-headless')." >&2
  exit 1
fi
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "error: Java ${java_major:-unknown} found; Spark needs Java 17 or newer (e.g. 'apt-get install openjdk-17-jre-headless')." >&2
  exit 1
fi
# Nothing else: `make jvm` resolves Apache Kafka and Spark's Kafka connector with the Ivy
# inside PySpark, run by this Java (scripts/install-jvm.sh).
