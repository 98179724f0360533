"""The kafka.* options, written for Spark's Java client, as a librdkafka configuration."""

import logging

import pytest

from backlog_source.core import kafka_options
from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import ClientRole
from backlog_source.core.kafka_options import is_secret_key, kafka_client_config

SECRET = "s3cr3t-Value"


def config(**options):
    return kafka_client_config({"bootstrap.servers": "h:1", **options}, group_id_prefix="g")


def test_java_names_with_a_librdkafka_twin_are_translated():
    params = config(**{"request.timeout.ms": "7000", "fetch.max.wait.ms": "20"}).librdkafka(ClientRole.READER)
    assert params["socket.timeout.ms"] == "7000" and params["fetch.wait.max.ms"] == "20"
    assert "request.timeout.ms" not in params


@pytest.mark.parametrize("option, reason", [
    ("ssl.truststore.location", "librdkafka reads CA certificates as PEM"),
    ("auto.offset.reset", "set the source option 'startingOffsets'"),
    ("enable.partition.eof", "the source sets it"),
])
def test_options_the_source_cannot_honour_are_refused_naming_what_to_do(option, reason):
    with pytest.raises(ConfigError, match=f"option 'kafka.{option}' is not supported.*: .*{reason}"):
        config(**{option: "x"})


def test_java_only_settings_are_dropped_with_one_warning(caplog, monkeypatch):
    monkeypatch.setattr(kafka_options, "_warned", set())  # once per process and set of options
    with caplog.at_level(logging.WARNING):
        params = config(**{"exclude.internal.topics": "true", "fetch.min.bytes": "1024"}).librdkafka(ClientRole.READER)
    assert "exclude.internal.topics" not in params and params["fetch.min.bytes"] == "1024"
    assert "ignoring option(s) 'kafka.exclude.internal.topics'" in caplog.text


def test_a_value_librdkafka_refuses_names_the_option_as_written():
    with pytest.raises(ConfigError, match="option 'kafka.request.timeout.ms'"):
        config(**{"request.timeout.ms": "soon"})


def test_jaas_credentials_become_username_and_a_secret_password():
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="{SECRET}";'
    client = config(**{"sasl.jaas.config": jaas, "sasl.mechanism": "SCRAM-SHA-256"})
    params = client.librdkafka(ClientRole.ADMIN)
    assert params["sasl.username"] == "bob" and params["sasl.password"] == SECRET and "sasl.jaas.config" not in params
    assert SECRET not in repr(client)


@pytest.mark.parametrize("key, secret", [
    ("sasl.password", True), ("ssl.key.password", True), ("sasl.oauthbearer.config", True),
    ("ssl.key.pem", True), ("ssl.ca.location", False), ("sasl.username", False),
])
def test_secret_keys_are_recognised(key, secret):
    assert is_secret_key(key) is secret


def test_bootstrap_servers_are_required():
    with pytest.raises(ConfigError, match="'kafka.bootstrap.servers' is required"):
        kafka_client_config({}, group_id_prefix="g")
