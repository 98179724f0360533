"""Why Kafka refused a client, told from librdkafka's codes and words, and the messages: each
leads with its cause, then names what to check or grant, and never holds a secret."""

from __future__ import annotations

import pickle

import pytest
from confluent_kafka import KafkaError

from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import KafkaClientConfig
from backlog_source.core.kafka_refusals import AccessRefusedError, Refusal, access_refused, refusal_of

SECRET = "pa55-" + "x" * 8
KAFKA = KafkaClientConfig(bootstrap_servers="b1:9093", params={"sasl.username": "ingest"},
                          secrets={"sasl.password": SECRET})


@pytest.mark.parametrize("code, text, refusal", [
    (KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed", Refusal.AUTHENTICATION),
    (KafkaError.SASL_AUTHENTICATION_FAILED, "", Refusal.AUTHENTICATION),
    (KafkaError._SSL, "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed",
     Refusal.UNTRUSTED_CERTIFICATE),
    (KafkaError._SSL, "SSL handshake failed: self-signed certificate in certificate chain",
     Refusal.UNTRUSTED_CERTIFICATE),
    (KafkaError._SSL, "SSL handshake failed: wrong version number", Refusal.TLS_HANDSHAKE),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed", Refusal.TOPIC_AUTHORIZATION),
    (KafkaError.CLUSTER_AUTHORIZATION_FAILED, "", Refusal.CLUSTER_AUTHORIZATION),
    (KafkaError.GROUP_AUTHORIZATION_FAILED, "", Refusal.GROUP_AUTHORIZATION),
    # librdkafka's connection log, without a code
    (None, "sasl_ssl://b1:9093/bootstrap: SASL authentication error: Authentication failed during authentication "
           "due to invalid credentials with SASL mechanism SCRAM-SHA-256", Refusal.AUTHENTICATION),
    (None, "ssl://b1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: "
           "broker certificate could not be verified", Refusal.UNTRUSTED_CERTIFICATE),
    # mutual TLS: the broker's alert, after the client's side of a TLS 1.3 handshake or during it
    (KafkaError._TRANSPORT, "ssl://b1:9093/1: SSL transport error: error:0A00045C:SSL routines::tlsv13 alert "
                            "certificate required", Refusal.CLIENT_CERTIFICATE),
    (KafkaError._SSL, "SSL handshake failed: error:0A000418:SSL routines::tlsv1 alert unknown ca",
     Refusal.CLIENT_CERTIFICATE),
    (None, "ssl://b1:9093/bootstrap: SSL handshake failed: sslv3 alert bad certificate", Refusal.CLIENT_CERTIFICATE),
    # not refusals: retrying may help
    (KafkaError._TIMED_OUT, "Local: Timed out", None),
    (KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:1 failed: Connection refused", None),
    (None, "1/1 brokers are down", None),
])
def test_a_refusal_is_told_from_librdkafkas_code_or_words(code, text, refusal):
    assert refusal_of(code, text) is refusal


@pytest.mark.parametrize("refusal, starts, names", [
    (Refusal.AUTHENTICATION, "authentication failed: Kafka at b1:9093 refused the credentials of principal "
                             "User:ingest (", ["kafka.sasl.jaas.config", "kafka.sasl.mechanism",
                                               "kafka.security.protocol"]),
    (Refusal.UNTRUSTED_CERTIFICATE, "TLS certificate not trusted: the certificate of Kafka at b1:9093",
     ["kafka.ssl.ca.location", "kafka.ssl.endpoint.identification.algorithm"]),
    (Refusal.TLS_HANDSHAKE, "TLS handshake failed with Kafka at b1:9093 (", ["kafka.security.protocol", "kafka.ssl.*"]),
    (Refusal.CLIENT_CERTIFICATE, "TLS client certificate refused: Kafka at b1:9093 did not accept this client's "
                                 "certificate", ["kafka.ssl.keystore.location", "kafka.ssl.keystore.type=PEM"]),
    (Refusal.GROUP_AUTHORIZATION, "authorization refused for the consumer group: ",
     ["READ on the groups prefixed 'spark-kafka-source'", "groupIdPrefix"]),
    (Refusal.CLUSTER_AUTHORIZATION, "authorization refused for the cluster: ", ["User:ingest"]),
])
def test_each_message_leads_with_its_cause_then_what_to_check(refusal, starts, names):
    error = access_refused(refusal, KAFKA, f"librdkafka's words, password={SECRET}")
    message = str(error)
    assert message.startswith(starts), message
    assert all(name in message for name in names), message
    assert SECRET not in message and "password=***" in message
    assert isinstance(error, ConfigError) and error.refusal is refusal


def test_a_topic_refusal_names_the_topic_the_operation_and_the_acls_to_grant():
    error = access_refused(Refusal.TOPIC_AUTHORIZATION, KAFKA, "Broker: Topic authorization failed",
                           topic="orders", operation="DESCRIBE")
    assert str(error).startswith("authorization refused for topic 'orders': Kafka at b1:9093 does not allow "
                                 "principal User:ingest DESCRIBE on it (Broker: Topic authorization failed). "
                                 "Grant principal User:ingest DESCRIBE and READ on topic 'orders'")
    assert (error.topic, error.operation) == ("orders", "DESCRIBE")


def test_without_a_sasl_user_name_the_principal_is_described_not_guessed():
    message = str(access_refused(Refusal.TOPIC_AUTHORIZATION, KafkaClientConfig("b1:9093"), "denied", topic="t"))
    assert "this client's principal" in message and "User:" not in message


def test_a_refusal_pickles_with_its_fields():
    """Errors raised on executors reach the driver pickled."""
    error = access_refused(Refusal.TOPIC_AUTHORIZATION, KAFKA, "denied", topic="orders", operation="READ")
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, AccessRefusedError) and str(copy) == str(error)
    assert (copy.refusal, copy.topic, copy.operation, copy.detail) == (Refusal.TOPIC_AUTHORIZATION, "orders", "READ",
                                                                       "denied")
