#!/usr/bin/env bash
# Installs the JVM parts the tests, benchmarks and demo run beside the source, from Maven
# Central, into .jvm/ (the repository's own cache folder, ignored by git):
#   .jvm/kafka-broker/  Apache Kafka's broker (jvm/kafka-broker.pom.xml)
#   .jvm/spark-kafka/   Spark's own Kafka connector, format("kafka") (jvm/spark-kafka-connector.pom.xml)
# With the Ivy resolver that ships inside PySpark (pyspark/jars/ivy-*.jar), run by Java, which
# PySpark needs anyway: Java is the only prerequisite beyond Python (issue 36; Maven, used
# before, is one more tool a PySpark user rarely has). Ivy reads the two POMs themselves, so
# the versions stay pinned in one place. It resolves here, once, not when a SparkSession
# starts (spark.jars.packages would, at test time); the tests only read jars from disk.
# Ivy's cache is ~/.ivy2/cache, as for Spark's --packages. Users of the source need none of this.
# Usage: scripts/install-jvm.sh PYTHON   (the interpreter whose PySpark holds Ivy)
set -euo pipefail
cd "$(dirname "$0")/.."
python_bin="${1:-.venv/bin/python}"
ivy_jar=$("$python_bin" -c 'import glob, os, pyspark; print(next(iter(sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "ivy-*.jar")))), ""))')
if [ -z "$ivy_jar" ]; then
  echo "error: no ivy-*.jar in the jars of $python_bin's PySpark; run 'make .venv/.installed' first." >&2
  exit 1
fi
target=.jvm
copy() {  # pom, folder, artifacts to keep (empty: all)
  local pom=$1 folder=$2 keep=${3:-}
  rm -rf "$target/$folder.tmp" "$target/$folder.all"
  java -jar "$ivy_jar" -ivy "jvm/$pom" -confs runtime -warn \
    -retrieve "$PWD/$target/$folder.all/[artifact]-[revision](-[classifier]).[ext]" >"$target/$folder.ivy.log" 2>&1 || {
    echo "error: Ivy could not resolve jvm/$pom from Maven Central; its output:" >&2
    cat "$target/$folder.ivy.log" >&2
    exit 1
  }
  if [ -z "$keep" ]; then
    mv "$target/$folder.all" "$target/$folder.tmp"
  else
    mkdir -p "$target/$folder.tmp"
    for artifact in $keep; do
      found=$(ls "$target/$folder.all" | grep -E "^${artifact}-[0-9][^/]*\.jar$" || true)
      if [ -z "$found" ]; then
        echo "error: Ivy resolved no $artifact jar for jvm/$pom" >&2
        exit 1
      fi
      for jar in $found; do mv "$target/$folder.all/$jar" "$target/$folder.tmp/"; done
    done
    rm -rf "$target/$folder.all"
  fi
  rm -f "$target/$folder.ivy.log"
  rm -rf "${target:?}/$folder"
  mv "$target/$folder.tmp" "$target/$folder"
}
mkdir -p "$target"
copy kafka-broker.pom.xml kafka-broker
# Only what Spark does not ship itself (the connector's documented dependencies): Spark's own
# Hadoop, Scala and compression jars stay the ones on its classpath.
copy spark-kafka-connector.pom.xml spark-kafka \
  "spark-sql-kafka-0-10_2.13 spark-token-provider-kafka-0-10_2.13 kafka-clients commons-pool2"
echo "installed: $(ls $target/kafka-broker | grep -c jar) broker jars, $(ls $target/spark-kafka | tr '\n' ' ')"
