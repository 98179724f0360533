"""Why Kafka refused this client, and the one place each such message is built.

A secured cluster refuses a client in one of three ways: its credentials (SASL), the TLS
handshake (most often a broker certificate the client's CA does not sign, or a client
certificate the broker does not accept, with mutual TLS), or an ACL (the
principal may not describe, read, write or create a topic, or use a group). Each
:class:`Refusal` is one message; :func:`access_refused` builds it, leading with the cause
("authentication failed", "TLS certificate not trusted", "authorization refused for topic
'x'"), then what to check or grant. librdkafka's own text follows the cause in parentheses,
with every secret value replaced by ``***``.

librdkafka tells a refusal in three places: the error code of a failed request
(``TOPIC_AUTHORIZATION_FAILED``, ...), its error callback (``_AUTHENTICATION``, ``_SSL``)
and its connection log ("SASL authentication error: ...", "SSL handshake failed: ...
certificate verify failed"). A wrong password or an untrusted certificate usually reaches
the request only as a timeout; :func:`refusal_of` reads a code and a text, so a client
that keeps the callback's last error (``KafkaAdmin``) can lead with the real cause.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import KafkaClientConfig
from backlog_source.core.text_enum import TextEnum


class Refusal(TextEnum):
    """Why Kafka refused this client; the value is how its message starts."""

    AUTHENTICATION = "authentication failed"
    UNTRUSTED_CERTIFICATE = "TLS certificate not trusted"
    TLS_HANDSHAKE = "TLS handshake failed"
    CLIENT_CERTIFICATE = "TLS client certificate refused"
    TOPIC_AUTHORIZATION = "authorization refused for topic"
    CLUSTER_AUTHORIZATION = "authorization refused for the cluster"
    GROUP_AUTHORIZATION = "authorization refused for the consumer group"


#: Refusals of the connection itself, before any request: what a client's error callback and
#: connection log tell while its request only times out.
CONNECTION_REFUSALS = frozenset({Refusal.AUTHENTICATION, Refusal.UNTRUSTED_CERTIFICATE, Refusal.TLS_HANDSHAKE,
                                 Refusal.CLIENT_CERTIFICATE})

_BY_CODE = {
    KafkaError._AUTHENTICATION: Refusal.AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED: Refusal.AUTHENTICATION,
    KafkaError.UNSUPPORTED_SASL_MECHANISM: Refusal.AUTHENTICATION,
    KafkaError._SSL: Refusal.TLS_HANDSHAKE,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: Refusal.TOPIC_AUTHORIZATION,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: Refusal.CLUSTER_AUTHORIZATION,
    KafkaError.GROUP_AUTHORIZATION_FAILED: Refusal.GROUP_AUTHORIZATION,
}
#: Every error code that is an authorization refusal (an ACL), not a connection failure.
AUTHORIZATION_CODES = frozenset(code for code, refusal in _BY_CODE.items()
                                if refusal in (Refusal.TOPIC_AUTHORIZATION, Refusal.CLUSTER_AUTHORIZATION,
                                               Refusal.GROUP_AUTHORIZATION))
#: The words of librdkafka's connection log that say the TLS handshake failed because the
#: broker's certificate was not verified (OpenSSL's "certificate verify failed"), or the
#: credentials were refused, when no error code says so.
_UNTRUSTED = ("certificate verify failed", "self-signed certificate", "self signed certificate",
              "unable to get local issuer certificate", "broker certificate could not be verified")
_AUTHENTICATION_WORDS = ("sasl authentication error", "authentication failed")
#: The TLS alerts a broker that requires client certificates (``ssl.client.auth=required``)
#: sends when the client has none or one it does not trust; with TLS 1.3 they arrive after
#: the client's side of the handshake, as a transport error.
_CLIENT_CERTIFICATE_ALERTS = ("alert certificate required", "alert bad certificate", "alert unknown ca",
                              "alert certificate unknown", "alert certificate expired", "alert certificate revoked")


def refusal_of(code: int | None, text: str | None = None) -> Refusal | None:
    """The refusal a librdkafka error (its ``code``, its text or a connection log line) tells,
    or None when it tells none (a timeout, a broker down, a refused connection)."""
    lowered = (text or "").lower()
    if any(alert in lowered for alert in _CLIENT_CERTIFICATE_ALERTS):
        return Refusal.CLIENT_CERTIFICATE
    refusal = _BY_CODE.get(code) if code is not None else None
    if refusal is None:
        if any(words in lowered for words in _AUTHENTICATION_WORDS):
            refusal = Refusal.AUTHENTICATION
        elif "ssl handshake failed" in lowered:
            refusal = Refusal.TLS_HANDSHAKE
    if refusal is Refusal.TLS_HANDSHAKE and any(words in lowered for words in _UNTRUSTED):
        return Refusal.UNTRUSTED_CERTIFICATE
    return refusal


class AccessRefusedError(ConfigError):
    """Kafka refused this client: ``refusal`` says why (a :class:`Refusal`), ``topic`` and
    ``operation`` (an ACL operation: ``DESCRIBE``, ``READ``, ``WRITE``, ``CREATE``) what was
    refused when an ACL refused it, ``detail`` librdkafka's words, secrets removed. The
    message is built by :func:`access_refused` and leads with the cause. Picklable."""

    def __init__(self, message: str, refusal: Refusal, topic: str | None = None, operation: str | None = None,
                 detail: str = "") -> None:
        super().__init__(message)
        self.refusal = refusal
        self.topic = topic
        self.operation = operation
        self.detail = detail

    def __reduce__(self):
        return type(self), (self.args[0], self.refusal, self.topic, self.operation, self.detail)


def principal(kafka: KafkaClientConfig) -> str:
    """The principal Kafka's ACLs name for this client, as far as its options tell:
    ``User:<sasl.username>`` for SASL/PLAIN and SCRAM (the user name is not a secret)."""
    username = kafka.params.get("sasl.username")
    return f"principal User:{username}" if username else "this client's principal"


def access_refused(refusal: Refusal, kafka: KafkaClientConfig, detail: str, *, topic: str | None = None,
                   operation: str | None = None) -> AccessRefusedError:
    """The error for ``refusal``: its cause first, then the options to check or the ACL to
    grant. ``detail`` is librdkafka's text (redacted here); ``topic`` and ``operation`` name
    what an ACL refused, when known."""
    detail = kafka.redact(detail)
    servers = kafka.bootstrap_servers
    who = principal(kafka)
    if refusal is Refusal.AUTHENTICATION:
        message = (f"authentication failed: Kafka at {servers} refused the credentials of {who} ({detail}). "
                   "Check kafka.sasl.jaas.config (or kafka.sasl.username and kafka.sasl.password), "
                   "kafka.sasl.mechanism and kafka.security.protocol")
    elif refusal is Refusal.UNTRUSTED_CERTIFICATE:
        message = (f"TLS certificate not trusted: the certificate of Kafka at {servers} is not signed by a CA "
                   f"this client trusts, or does not match the broker's host name ({detail}). Check "
                   "kafka.ssl.ca.location (the PEM file of the CA that signed the brokers' certificates) and "
                   "kafka.ssl.endpoint.identification.algorithm")
    elif refusal is Refusal.CLIENT_CERTIFICATE:
        message = (f"TLS client certificate refused: Kafka at {servers} did not accept this client's certificate, "
                   f"or got none ({detail}). Check kafka.ssl.keystore.location (a PKCS#12 file, with "
                   "kafka.ssl.keystore.password) or the PEM key and certificate (kafka.ssl.keystore.type=PEM), "
                   "and that the brokers' ssl.truststore holds the CA that signed the certificate")
    elif refusal is Refusal.TLS_HANDSHAKE:
        message = (f"TLS handshake failed with Kafka at {servers} ({detail}). Check kafka.security.protocol "
                   "(SSL or SASL_SSL only on a TLS listener) and the kafka.ssl.* options")
    elif refusal is Refusal.TOPIC_AUTHORIZATION:
        what = f"topic {topic!r}" if topic else "a topic of this query"
        message = (f"authorization refused for {what}: Kafka at {servers} does not allow {who} "
                   f"{operation or 'access'} on it ({detail}). Grant {who} DESCRIBE and READ on {what} "
                   "(what format(\"kafka\") needs too), or check that kafka.sasl.* names the intended principal")
    elif refusal is Refusal.GROUP_AUTHORIZATION:
        message = (f"authorization refused for the consumer group: Kafka at {servers} does not allow {who} "
                   f"{operation or 'READ'} on its group ({detail}). Grant {who} READ on the groups prefixed "
                   f"{kafka.group_id_prefix!r} (option 'groupIdPrefix'), or on the group set by kafka.group.id")
    else:
        message = (f"authorization refused for the cluster: Kafka at {servers} does not allow {who} "
                   f"{operation or 'this request'} on the cluster ({detail}). Grant it, or check that "
                   "kafka.sasl.* names the intended principal")
    return AccessRefusedError(message, refusal, topic, operation, detail)
