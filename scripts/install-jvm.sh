#!/usr/bin/env bash
# Installs the JVM parts the tests, benchmarks and demo run beside the source, from Maven
# Central, into .jvm/ (the repository's own cache folder, ignored by git):
#   .jvm/kafka-broker/  Apache Kafka's broker (jvm/kafka-broker.pom.xml)
#   .jvm/spark-kafka/   Spark's own Kafka connector, format("kafka") (jvm/spark-kafka-connector.pom.xml)
# Maven, not Spark's Ivy (spark.jars.packages): Ivy resolves when a SparkSession starts, i.e.
# at test time; Maven resolves here, once, with the versions pinned in the two POMs, and the
# tests only read jars from disk. Users of the source need none of this.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mvn >/dev/null 2>&1; then
  echo "error: mvn not found. The tests install Apache Kafka and Spark's Kafka connector from Maven Central with Maven 3.6 or newer (e.g. 'apt-get install maven')." >&2
  exit 1
fi
target=.jvm
copy() {  # pom, folder, extra maven arguments...
  local pom=$1 folder=$2
  shift 2
  rm -rf "$target/$folder.tmp"
  mvn -q -B -Dstyle.color=never -f "jvm/$pom" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$PWD/$target/$folder.tmp" "$@"
  rm -rf "${target:?}/$folder"
  mv "$target/$folder.tmp" "$target/$folder"
}
copy kafka-broker.pom.xml kafka-broker
# Only what Spark does not ship itself (the connector's documented dependencies): Spark's own
# Hadoop, Scala and compression jars stay the ones on its classpath.
copy spark-kafka-connector.pom.xml spark-kafka \
  -DincludeArtifactIds=spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
echo "installed: $(ls $target/kafka-broker | grep -c jar) broker jars, $(ls $target/spark-kafka | tr '\n' ' ')"
