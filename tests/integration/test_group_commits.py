"""backlog.commitOffsetsToGroup on Apache Kafka, read with Kafka's own tool: the consumer
group an operator describes (``kafka-consumer-groups.sh --describe``) shows the lag of a
backlog query falling to zero as the backlog drains, with no member joining the group; and
offsets already in the group do not move where the query reads."""

from __future__ import annotations

import json
import subprocess
import threading

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from backlog_source.demo.apache_kafka import _java, find_libs
from tests.integration.helpers import make_topic, reader, start_query, wait_for, wait_for_progress

pytestmark = pytest.mark.integration

#: The class ``kafka-consumer-groups.sh`` runs (``kafka-run-class.sh``), from Kafka's tools jar.
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def describe_group(broker, group: str) -> tuple[str, dict[int, tuple[int | None, int, int | None]]]:
    """``kafka-consumer-groups.sh --bootstrap-server ... --describe --group group``: its output,
    and per partition of the test's topic (CURRENT-OFFSET, LOG-END-OFFSET, LAG); ``-`` is None."""
    libs = find_libs()
    if not any(libs.glob("kafka-tools-[0-9]*.jar")):
        raise AssertionError(f"Kafka's tools jar (kafka-consumer-groups.sh) is not in {libs}: run 'make jvm'")
    command = [_java(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp", f"{libs}/*",
               CONSUMER_GROUP_COMMAND, "--bootstrap-server", broker.bootstrap_servers, "--describe", "--group", group]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    rows = {}
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] == group and fields[2].isdigit():
            number = (lambda text: None if text == "-" else int(text))
            rows[int(fields[2])] = (number(fields[3]), int(fields[4]), number(fields[5]))
    return result.stdout + result.stderr, rows


def test_the_groups_lag_falls_to_zero_as_the_backlog_drains(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 2, per_partition=400)
    group = f"lag-{topic_name}"
    # Offsets already in the group (an old consumer's) are never where the query reads from.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    planted = ConsumerGroupTopicPartitions(group, [TopicPartition(topic_name, p, 350) for p in (0, 1)])
    admin.alter_consumer_group_offsets([planted])[group].result(timeout=30)

    gate = threading.Semaphore(0)  # each batch waits for the test, so every step of the drain is seen

    def write(batch, batch_id):
        assert gate.acquire(timeout=120), "the test never released this batch"
        batch.count()

    writer = (reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=200,
                     **{"kafka.group.id": group, "backlog.commitOffsetsToGroup": "true"})
              .writeStream.foreachBatch(write).queryName("group_commits")
              .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="0 seconds"))
    query = start_query(writer.start)
    lags, outputs = [], []
    try:
        for batch_id in range(4):  # 800 records, 200 a batch
            gate.release()
            wait_for_progress(query, lambda p, b=batch_id: p["batchId"] == b, what=f"batch {batch_id}")
            [progress] = [p for p in query.recentProgress if p["batchId"] == batch_id]
            end = {int(p): o for p, o in json.loads(progress["sources"][0]["endOffset"])["positions"][topic_name].items()}

            def committed(end=end) -> bool:  # the next plan (or idle trigger) has copied this batch's end
                output, rows = describe_group(broker, group)
                outputs.append(output)
                if {p: row[0] for p, row in rows.items()} != end:
                    return False
                lags.append(sum(row[2] for row in rows.values()))
                return True

            wait_for(committed, 120, f"batch {batch_id}'s end offsets {end} in group {group}", interval_s=0.5)
    finally:
        for _ in range(8):
            gate.release()
        query.stop()
    assert query.exception() is None
    first = query.recentProgress[0]["sources"][0]
    assert first["numInputRows"] == 200  # from the earliest offsets, not the group's 350
    assert json.loads(first["endOffset"])["positions"][topic_name] == {"0": 100, "1": 100}
    assert lags == [600, 400, 200, 0], outputs[-1]
    assert "has no active members" in outputs[-1]  # committed from outside the group: nothing joined it
