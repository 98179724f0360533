"""No secret value appears in logs, offsets, events, span attributes or exception messages,
with SASL/SSL options set: every output of real runs is searched for every secret."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from backlog_source.demo.otlp_receiver import OtlpReceiver
from tests.integration.helpers import make_topic

pytestmark = pytest.mark.integration

JOB = Path(__file__).with_name("secrets_job.py")


def secret_options(protocol: str) -> tuple[dict[str, str], list[str]]:
    """Options with a distinct secret in every secret-bearing key; returns them and the secrets."""
    password, jaas_password, key_password, store_password, token = (f"s3cret-{uuid.uuid4().hex}" for _ in range(5))
    options = {
        "kafka.security.protocol": protocol,
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  f'username="svc" password="{jaas_password}";',
        "kafka.ssl.key.password": key_password,
        "kafka.ssl.keystore.password": store_password,
        "kafka.sasl.oauthbearer.config": f"principal=svc token={token}",
    }
    if protocol == "PLAINTEXT":  # librdkafka rejects SASL/SSL settings it cannot use on PLAINTEXT
        options = {"kafka.sasl.password": password, "kafka.ssl.key.password": key_password}
        return options, [password, key_password]
    return options, [jaas_password, key_password, store_password, token]


def run(broker, topic, out: Path, runs: list[dict], receiver: OtlpReceiver) -> str:
    """The runs of secrets_job.py, in one driver process of their own; its whole output."""
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}
    result = subprocess.run([sys.executable, str(JOB), broker.bootstrap_servers, topic, str(out), json.dumps(runs)],
                            capture_output=True, text=True, timeout=400, env=env, cwd=JOB.parents[2])
    if result.returncode != 0:
        # The whole output to the captured stdout pytest shows with the failure, and the lines
        # that name an error first: a tail alone once cut off the cause (a Python traceback
        # inside a JVM error's text).
        print(result.stdout, result.stderr, sep="\n")
        pytest.fail(f"secrets_job.py exited {result.returncode}; its error lines: {error_lines(result.stderr)}")
    return result.stdout + result.stderr


def error_lines(text: str, most: int = 12) -> str:
    """The first lines of ``text`` that name an error or an exception (e.g. a Python
    traceback's last line inside a Spark error), joined."""
    named = [line.strip() for line in text.splitlines() if re.search(r"(Error|Exception)\b", line)]
    return " | ".join(named[:most]) or "(none; see the captured stdout)"


def run_outputs(output: str) -> dict[str, str]:
    """The output of :func:`run`, by run name: what followed each run's ``RUN <name>`` line
    (the last run's includes the process's stderr, which follows its stdout)."""
    parts = re.split(r"^RUN (\S+)$", output, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def everything_written(out: Path) -> str:
    """Every file the run left (checkpoint: offsets, commits, metadata; sink log)."""
    texts = []
    for path in out.rglob("*"):
        if path.is_file() and path.suffix != ".parquet":
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(texts)


def control_topic(broker) -> str:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "secrets-check",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition("_backlog_events", 0, 0)])
    values = []
    while True:
        message = consumer.poll(5)
        if message is None or message.error():
            break
        values.append((message.value() or b"").decode("utf-8", "replace"))
    consumer.close()
    return "\n".join(values)


def assert_no_secret(secrets: list[str], **outputs: str) -> None:
    for where, text in outputs.items():
        for secret in secrets:
            assert secret not in text, f"a secret appears in {where}"


def test_secrets_never_leave_the_options(broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 2, per_partition=2_000)
    with OtlpReceiver() as receiver:
        # A run that connects (PLAINTEXT) but carries secret options: offsets, events, spans
        # exist. Then a run that cannot authenticate: its error messages and logs.
        ok_options, ok_secrets = secret_options("PLAINTEXT")
        bad_options, bad_secrets = secret_options("SASL_PLAINTEXT")
        output = run(broker, topic_name, tmp_path, [{"name": "ok", "options": ok_options, "mode": "drain"},
                                                    {"name": "bad", "options": bad_options, "mode": "fail"}], receiver)
        assert "LAST PROGRESS" in output and "QUERY FAILED" in output
        spans = json.dumps(receiver.spans)
    assert '"backlog.phase"' in spans and '"backlog.read"' in spans  # the check saw real spans
    events = control_topic(broker)
    assert "BacklogFinishEvent" in events
    assert_no_secret(ok_secrets + bad_secrets, driver_and_worker_logs=output,
                     checkpoint_and_sink_files=everything_written(tmp_path), span_attributes=spans,
                     control_topic_events=events)
