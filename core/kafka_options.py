"""The ``kafka.*`` options: Spark users' Java-client settings, turned into librdkafka ones.

Spark's Kafka source hands ``kafka.*`` options to the Java client, which ignores (with a
warning) the ones it does not know. This source reads through librdkafka, whose names
differ in places, so each option is, in this order:

1. refused, with Spark's reason, when Spark refuses it (``auto.offset.reset``, the
   deserializers, ``enable.auto.commit``, interceptors: in the order Spark's
   ``KafkaSourceProvider.validateGeneralOptions`` checks them, so the first one reported is
   Spark's), then when this source sets it itself; after the refusals, ``bootstrap.servers``
   is required, as in Spark;
2. translated, when a Java setting has a librdkafka meaning under another name
   (``request.timeout.ms`` -> ``socket.timeout.ms``, ``fetch.max.wait.ms`` ->
   ``fetch.wait.max.ms``); the security options (JAAS entries, Java key and trust stores)
   by :mod:`~backlog_source.core.kafka_security`, which refuses, with what to set instead,
   the ones librdkafka has no meaning for (dropping them would change security);
3. kept, when librdkafka knows it (checked by building a client with it, which connects to
   nothing), or dropped with one warning naming it, as the Java client does.

A value librdkafka rejects fails here, at ``load()``, naming the option: configuration
errors are never retried as if Kafka were unavailable. Secret values never appear in a
message (the keys that hold secrets are listed in :func:`is_secret_key`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, KafkaException

from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import IsolationLevel, KafkaClientConfig, Secret
from backlog_source.core.kafka_security import translate_security, unreadable_material

log = logging.getLogger(__name__)

#: Options Spark's Kafka source refuses (``KafkaSourceProvider.validateGeneralOptions``),
#: with Spark's reasons and in the order Spark checks them (:data:`SPARK_REFUSED`), then two
#: this source sets itself.
REFUSED = {
    "auto.offset.reset": (
        "set the source option 'startingOffsets' to 'earliest' or 'latest' instead: the source "
        "manages which offsets are consumed, so no data is missed when partitions are added; "
        "'startingOffsets' applies only when a new query starts, a restart resumes where it left off"
    ),
    "key.deserializer": "keys are always returned as bytes (binary column 'key'); deserialize them with DataFrame operations",
    "value.deserializer": (
        "values are always returned as bytes (binary column 'value'); deserialize them with DataFrame operations"
    ),
    "enable.auto.commit": "the source does not commit any offset to Kafka; progress lives in the checkpoint",
    "interceptor.classes": "interceptors can make the source misbehave",
    "enable.partition.eof": "the source sets it: the reader needs end-of-partition events",
    "enable.auto.offset.store": "the source sets it: offsets are never stored in Kafka",
}

#: The keys of :data:`REFUSED` that Spark refuses, in the order it checks them.
SPARK_REFUSED = ("auto.offset.reset", "key.deserializer", "value.deserializer", "enable.auto.commit",
                 "interceptor.classes")

#: Java client names -> librdkafka names, where the meaning is the same.
JAVA_TO_LIBRDKAFKA = {
    "request.timeout.ms": "socket.timeout.ms",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}

_SECRET_KEY = re.compile(r"password|secret|jaas|token|credential|\.pem$|oauthbearer\.config|private")
_NO_SUCH_PROPERTY = re.compile(r'No such configuration property: "([^"]+)"')
_INVALID_VALUE = re.compile(r'for configuration property "([^"]+)"')
_warned: set[frozenset[str]] = set()


def is_secret_key(key: str) -> bool:
    """True when a librdkafka configuration key holds a secret (passwords, keys, tokens)."""
    return bool(_SECRET_KEY.search(key.lower()))


def kafka_client_config(options: Mapping[str, str], *, group_id_prefix: str) -> KafkaClientConfig:
    """The client configuration for the ``kafka.*`` options (keys without the ``kafka.``
    prefix). Raises :class:`ConfigError` naming the option; see the module docstring."""
    check_refused(options)
    check_bootstrap(options)
    options = dict(options)
    bootstrap = options.pop("bootstrap.servers", "").strip()
    params: dict[str, str] = {}
    secrets: dict[str, Secret] = {}
    written_as: dict[str, str] = {}  # librdkafka name -> the name the user wrote
    translated = translate_security(options)
    for key, raw in sorted(options.items()):
        if key == "isolation.level" and raw not in {level.value for level in IsolationLevel}:
            raise ConfigError(f"option 'kafka.{key}' must be 'read_uncommitted' or 'read_committed', got {raw!r}")
        translated[JAVA_TO_LIBRDKAFKA.get(key, key)] = (raw, key)
    for name, (value, key) in translated.items():
        written_as[name] = key
        if is_secret_key(name):
            secrets[name] = Secret(value)
        else:
            params[name] = value
    unknown = _drop_unknown(params, secrets, written_as)
    if unknown and frozenset(unknown) not in _warned:
        _warned.add(frozenset(unknown))
        log.warning(
            "ignoring option(s) %s: not settings of librdkafka, the Kafka client this source uses "
            "(Spark's Java client would ignore unknown ones too)", ", ".join(f"'kafka.{k}'" for k in unknown)
        )
    return KafkaClientConfig(bootstrap_servers=bootstrap, params=params, secrets=secrets, group_id_prefix=group_id_prefix)


def check_refused(options: Mapping[str, str], keys: Iterable[str] = REFUSED) -> None:
    """Raise :class:`ConfigError` for the first of ``keys`` (by default every refused option:
    Spark's in Spark's order, then this source's) set in ``options`` (keys without the
    ``kafka.`` prefix), with the reason and what to set instead."""
    for key in keys:
        if key in options:
            raise ConfigError(f"option 'kafka.{key}' is not supported: {REFUSED[key]}")


def check_bootstrap(options: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` unless ``options`` (keys without the ``kafka.`` prefix)
    name the bootstrap servers."""
    if not str(options.get("bootstrap.servers", "")).strip():
        raise ConfigError("option 'kafka.bootstrap.servers' is required: a comma-separated list of host:port")


def _drop_unknown(params: dict[str, str], secrets: dict[str, Secret], written_as: Mapping[str, str]) -> list[str]:
    """Remove the keys librdkafka does not know; raise ConfigError for a value it rejects.

    librdkafka checks every setting when a client is built; a client without bootstrap
    servers connects to nothing, so building one (about a millisecond) is the check.
    """
    unknown: list[str] = []
    while True:
        config = {**params, **{k: v.get_secret_value() for k, v in secrets.items()}, "group.id": "config-check"}
        try:
            Consumer({**config, "log_level": 0}).close()
            return unknown
        except KafkaException as exc:
            text = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        missing = _NO_SUCH_PROPERTY.search(text)
        if missing and (missing.group(1) in params or missing.group(1) in secrets):
            key = missing.group(1)
            params.pop(key, None)
            secrets.pop(key, None)
            unknown.append(written_as.get(key, key))
            continue
        invalid = _INVALID_VALUE.search(text)
        key = invalid.group(1) if invalid else None
        if key is not None and key in secrets:
            raise ConfigError(f"option 'kafka.{written_as.get(key, key)}' has a value librdkafka does not accept") from None
        if key is not None:
            raise ConfigError(f"option 'kafka.{written_as.get(key, key)}': {text}") from None
        secret_values = [v.get_secret_value() for v in secrets.values()]
        for value in sorted(secret_values, key=len, reverse=True):
            text = text.replace(value, "***")
        unreadable = unreadable_material(text, written_as)
        if unreadable:
            raise ConfigError(unreadable) from None
        raise ConfigError(f"the kafka.* options are not a valid librdkafka configuration: {text}") from None

