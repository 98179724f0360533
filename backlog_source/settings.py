"""Source options: Spark's string options parsed into one frozen, validated model.

Which process: the model is built in the Python worker that Spark starts to create the data
source (so a bad option fails at ``load()``, before any data is read), then pickled to the
driver's planner worker and to executors.

The option names and meanings are those of Spark's built-in Kafka source, so that
``format("kafka")`` can become ``format("backlog")`` with nothing else changed, plus the
``backlog.*`` options of this project. Spark lower-cases option keys before a Python data
source sees them, so parsing is case-insensitive.

Source options never come from the environment: a query's behaviour is what its code says.
(The demo's settings, which may, live in :mod:`backlog_source.demo_settings`.)
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from enum import Enum
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from backlog_source.buckets import Bucket
from backlog_source.errors import ConfigError

#: Spark's per-partition sentinels in ``startingOffsets`` JSON.
LATEST = -1
EARLIEST = -2


class StartingPoint(str, Enum):
    EARLIEST = "earliest"
    LATEST = "latest"


class IsolationLevel(str, Enum):
    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


# Kafka consumer options that Spark's Kafka source rejects, with Spark's reasons.
_REJECTED_KAFKA_OPTIONS = {
    "auto.offset.reset": (
        "set the source option 'startingOffsets' to 'earliest' or 'latest' instead: the source "
        "manages which offsets are consumed, so no data is missed when partitions are added; "
        "'startingOffsets' applies only when a new query starts, a restart resumes where it left off"
    ),
    "enable.auto.commit": "the source does not commit any offset to Kafka; progress lives in the checkpoint",
    "key.deserializer": (
        "keys are always returned as bytes (binary column 'key'); deserialize them with DataFrame operations"
    ),
    "value.deserializer": (
        "values are always returned as bytes (binary column 'value'); deserialize them with DataFrame operations"
    ),
    "interceptor.classes": "interceptors can make the source misbehave",
    # librdkafka settings the reader relies on to detect the end of a range by position.
    "enable.partition.eof": "the source sets it: the reader needs end-of-partition events",
    "enable.auto.offset.store": "the source sets it: offsets are never stored in Kafka",
}

# Keys of kafka.* options whose values are secrets: they are kept as SecretStr and masked
# wherever settings are shown.
_SECRET_KEY = re.compile(r"password|secret|jaas|token|credential|\.pem$|oauthbearer\.config|private")

_JAAS_LOGIN = re.compile(
    r"""(?P<module>[\w.]+)\s+required\s+(?P<args>.*?);?\s*$""",
    re.DOTALL,
)
_JAAS_ARG = re.compile(r"""(\w+)\s*=\s*"((?:[^"\\]|\\.)*)\"""")

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {None: 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def is_secret_kafka_key(key: str) -> bool:
    """True when a librdkafka configuration key holds a secret (passwords, keys, tokens)."""
    return bool(_SECRET_KEY.search(key.lower()))


class SourceSettings(BaseSettings):
    """Every option of one ``format("backlog")`` source, typed and checked.

    Built by :func:`parse_options`; construct it directly only in tests. Frozen and
    picklable. Secrets are ``SecretStr`` and only :meth:`kafka_config` reveals them.
    """

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    # Subscription: exactly one of these three.
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[Bucket, ...] | None = None

    bootstrap_servers: str
    kafka_params: dict[str, str] = Field(default_factory=dict)
    kafka_secrets: dict[str, SecretStr] = Field(default_factory=dict)
    group_id_prefix: str = "spark-kafka-source"

    # Where a new query starts. Precedence as in Spark: starting_timestamp, then
    # starting_offsets_by_timestamp, then starting_offsets.
    starting_offsets: StartingPoint | dict[Bucket, int] = StartingPoint.LATEST
    starting_timestamp: int | None = None
    starting_offsets_by_timestamp: dict[Bucket, int] | None = None
    starting_offsets_by_timestamp_strategy: Literal["error", "latest"] = "error"

    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = Field(default=None, gt=0)
    min_offsets_per_trigger: int | None = Field(default=None, gt=0)
    max_trigger_delay_ms: int = Field(default=15 * 60 * 1000, ge=0)
    min_partitions: int | None = Field(default=None, gt=0)
    max_records_per_partition: int | None = Field(default=None, gt=0)
    include_headers: bool = False
    poll_timeout_ms: int = Field(default=120_000, gt=0)
    fetch_offset_num_retries: int = Field(default=3, ge=0)
    fetch_offset_retry_interval_ms: int = Field(default=10, ge=0)

    backlog_enabled: bool = True
    backlog_events_topic: str = "_backlog_events"
    backlog_reenter_lag: int | None = Field(default=None, gt=0)
    backlog_max_offsets_per_trigger: int | None = Field(default=None, gt=0)
    snapshot_path: str | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only what the query's code passed: no environment, no .env, no secrets dir.
        return (init_settings,)

    @model_validator(mode="after")
    def _check_combinations(self) -> "SourceSettings":
        chosen = [
            name
            for name, value in (
                ("subscribe", self.subscribe),
                ("subscribePattern", self.subscribe_pattern),
                ("assign", self.assign),
            )
            if value is not None
        ]
        if len(chosen) != 1:
            raise ValueError(
                "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set, "
                f"got {', '.join(repr(c) for c in chosen) if chosen else 'none'}"
            )
        if (
            self.min_offsets_per_trigger is not None
            and self.max_offsets_per_trigger is not None
            and self.min_offsets_per_trigger > self.max_offsets_per_trigger
        ):
            raise ValueError(
                f"'minOffsetsPerTrigger' ({self.min_offsets_per_trigger}) must not exceed "
                f"'maxOffsetsPerTrigger' ({self.max_offsets_per_trigger})"
            )
        if not self.backlog_events_topic:
            raise ValueError("'backlog.eventsTopic' must name a topic, got an empty string")
        return self

    @property
    def isolation_level(self) -> IsolationLevel:
        return IsolationLevel(self.kafka_params.get("isolation.level", "read_uncommitted"))

    def kafka_config(self, purpose: str) -> dict[str, str]:
        """The librdkafka configuration for a client, secrets revealed.

        ``purpose`` ("admin", "reader", "events") only names the client in Kafka's logs.
        The returned dict must never be logged or put in an error message.
        """
        config = {"bootstrap.servers": self.bootstrap_servers, **self.kafka_params}
        config.update({key: secret.get_secret_value() for key, secret in self.kafka_secrets.items()})
        config.setdefault("client.id", f"backlog-source-{purpose}")
        return config

    def secret_values(self) -> list[str]:
        """Every secret value, for redacting text that might echo one (see :func:`redact`)."""
        return [s.get_secret_value() for s in self.kafka_secrets.values() if s.get_secret_value()]

    def consumer_group_id(self) -> str:
        """The group id the source's consumers use; they never join a group nor commit."""
        return self.kafka_params.get("group.id") or f"{self.group_id_prefix}-{uuid.uuid4()}"


def redact(text: str, settings: SourceSettings) -> str:
    """``text`` with every secret value of ``settings`` replaced by ``***``."""
    for value in sorted(settings.secret_values(), key=len, reverse=True):
        text = text.replace(value, "***")
    return text


# --------------------------------------------------------------------------------------------
# Parsing Spark's string options


def parse_options(options: Mapping[str, str]) -> SourceSettings:
    """Build :class:`SourceSettings` from the string options a query passed.

    Raises :class:`ConfigError` naming the option and what is allowed. Unknown options are
    rejected too, since a misspelt option silently ignored is a misconfigured job.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    values: dict[str, Any] = {}
    kafka_params: dict[str, str] = {}
    kafka_secrets: dict[str, SecretStr] = {}

    for key, raw in opts.items():
        if key.startswith("kafka.") and key != "kafka.bootstrap.servers":
            _add_kafka_option(key[len("kafka."):], raw, kafka_params, kafka_secrets)
            continue
        spec = _OPTIONS.get(key)
        if spec is None:
            raise ConfigError(_unknown_option_message(key))
        field, parse = spec
        values[field] = parse(_option_name(key), raw)

    if "bootstrap_servers" not in values:
        raise ConfigError(
            "option 'kafka.bootstrap.servers' is required: a comma-separated list of host:port"
        )
    values["kafka_params"] = kafka_params
    values["kafka_secrets"] = kafka_secrets
    try:
        return SourceSettings(**values)
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc)) from None


def _add_kafka_option(key: str, raw: str, params: dict[str, str], secrets: dict[str, SecretStr]) -> None:
    option = f"kafka.{key}"
    if key in _REJECTED_KAFKA_OPTIONS:
        raise ConfigError(f"option '{option}' is not supported: {_REJECTED_KAFKA_OPTIONS[key]}")
    if key == "sasl.jaas.config":
        # Java clients take credentials as JAAS; librdkafka takes them as plain settings.
        # Translating keeps the drop-in promise for SASL/PLAIN and SCRAM users.
        username, password = _parse_jaas(raw)
        params["sasl.username"] = username
        secrets["sasl.password"] = SecretStr(password)
        return
    if key == "isolation.level" and raw not in {level.value for level in IsolationLevel}:
        raise ConfigError(
            f"option '{option}' must be 'read_uncommitted' or 'read_committed', got {raw!r}"
        )
    if is_secret_kafka_key(key):
        secrets[key] = SecretStr(raw)
    else:
        params[key] = raw


def _parse_jaas(raw: str) -> tuple[str, str]:
    match = _JAAS_LOGIN.match(raw.strip())
    args = dict(_JAAS_ARG.findall(match.group("args"))) if match else {}
    if not match or "username" not in args or "password" not in args:
        # The value is a secret: the message describes it without quoting it.
        raise ConfigError(
            "option 'kafka.sasl.jaas.config' must be a PlainLoginModule or ScramLoginModule entry "
            'with username="..." and password="..."; or set \'kafka.sasl.username\' and '
            "'kafka.sasl.password' directly"
        )
    return args["username"], args["password"]


def _validation_message(exc: ValidationError) -> str:
    # Built from our own messages and field names only: pydantic's default text quotes
    # input values, and we do not want any value of a SecretStr field near an error.
    parts = []
    for error in exc.errors():
        message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        location = ".".join(str(part) for part in error.get("loc", ()))
        option = _FIELD_TO_OPTION.get(location)
        parts.append(f"option '{option}': {message}" if option else message)
    return "; ".join(parts)


def _unknown_option_message(key: str) -> str:
    if key in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
        return f"option '{_option_name(key)}' is for batch queries only; a streaming query has no end offset"
    known = ", ".join(sorted(name for name in _CANONICAL.values()))
    return f"unknown option '{key}'. Known options: {known}, and any 'kafka.*' consumer setting"


# Each parser takes (option name as the user knows it, raw string) and returns a typed value.


def _parse_bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise ConfigError(f"option '{name}' must be 'true' or 'false', got {raw!r}")
    return lowered == "true"


def _parse_long(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"option '{name}' must be a whole number, got {raw!r}") from None


def _parse_at_least(minimum: int, allowed: str):
    """A parser of whole numbers >= ``minimum``; ``allowed`` completes "must be ..." in errors."""

    def parse(name: str, raw: str) -> int:
        value = _parse_long(name, raw)
        if value < minimum:
            raise ConfigError(f"option '{name}' must be {allowed}, got {raw!r}")
        return value

    return parse


_parse_positive = _parse_at_least(1, "a positive whole number")
_parse_non_negative = _parse_at_least(0, "zero or a positive whole number")
_parse_timestamp = _parse_at_least(0, "a timestamp in ms since the epoch (>= 0)")


def parse_duration_ms(name: str, raw: str) -> int:
    """Spark's time strings: ``500ms``, ``30s``, ``15m``, ``1h``, ``1d``; a bare number is ms."""
    match = _DURATION.match(raw)
    if not match:
        raise ConfigError(
            f"option '{name}' must be a duration such as '500ms', '30s', '15m', '1h', got {raw!r}"
        )
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _DURATION_MS[unit]


def _parse_text(name: str, raw: str) -> str:
    if not raw.strip():
        raise ConfigError(f"option '{name}' must not be empty")
    return raw.strip()


def _parse_topics(name: str, raw: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not topics:
        raise ConfigError(f"option '{name}' must list at least one topic (comma-separated), got {raw!r}")
    return topics


def _parse_pattern(name: str, raw: str) -> str:
    pattern = _parse_text(name, raw)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"option '{name}' is not a valid regular expression ({exc}): {raw!r}") from None
    return pattern


def _load_json_object(name: str, raw: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option '{name}' is not valid JSON ({exc.msg}); expected e.g. {example}") from None
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"option '{name}' must be a non-empty JSON object such as {example}")
    return value


def _parse_assign(name: str, raw: str) -> tuple[Bucket, ...]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    value = _load_json_object(name, raw, example)
    buckets = []
    for topic, partitions in value.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise ConfigError(
                f"option '{name}': topic {topic!r} must map to a list of partition numbers, e.g. {example}"
            )
        buckets.extend(Bucket(topic, p) for p in partitions)
    if not buckets:
        raise ConfigError(f"option '{name}' assigns no partition; expected e.g. {example}")
    return tuple(sorted(set(buckets)))


def _parse_bucket_map(name: str, raw: str, example: str, allow: str) -> dict[Bucket, int]:
    value = _load_json_object(name, raw, example)
    result: dict[Bucket, int] = {}
    for topic, per_partition in value.items():
        if not isinstance(per_partition, dict):
            raise ConfigError(f"option '{name}': topic {topic!r} must map to an object, e.g. {example}")
        for partition, offset in per_partition.items():
            try:
                number = int(partition)
            except ValueError:
                raise ConfigError(
                    f"option '{name}': partition {partition!r} of topic {topic!r} is not a number"
                ) from None
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise ConfigError(
                    f"option '{name}': the value for {topic}-{partition} must be a whole number ({allow}), "
                    f"got {offset!r}"
                )
            result[Bucket(topic, number)] = offset
    return result


def _parse_starting_offsets(name: str, raw: str) -> StartingPoint | dict[Bucket, int]:
    lowered = raw.strip().lower()
    if lowered in ("earliest", "latest"):
        return StartingPoint(lowered)
    if not raw.strip().startswith("{"):
        raise ConfigError(
            f"option '{name}' must be 'earliest', 'latest' or a JSON object such as "
            f'{{"topicA":{{"0":23,"1":-1}}}} (-2 = earliest, -1 = latest), got {raw!r}'
        )
    offsets = _parse_bucket_map(
        name, raw, '{"topicA":{"0":23,"1":-1}}', "an offset >= 0, -1 for latest or -2 for earliest"
    )
    for bucket, offset in offsets.items():
        if offset < EARLIEST:
            raise ConfigError(
                f"option '{name}': offset {offset} for {bucket} is not allowed; use an offset >= 0, "
                "-1 for latest or -2 for earliest"
            )
    return offsets


def _parse_offsets_by_timestamp(name: str, raw: str) -> dict[Bucket, int]:
    offsets = _parse_bucket_map(name, raw, '{"topicA":{"0":1700000000000}}', "a timestamp in ms")
    for bucket, timestamp in offsets.items():
        if timestamp < 0:
            raise ConfigError(f"option '{name}': timestamp {timestamp} for {bucket} must be >= 0")
    return offsets


def _parse_strategy(name: str, raw: str) -> str:
    lowered = raw.strip().lower()
    if lowered not in ("error", "latest"):
        raise ConfigError(f"option '{name}' must be 'error' or 'latest', got {raw!r}")
    return lowered


# Option name as documented -> (SourceSettings field, parser).
_SPEC: dict[str, tuple[str, Any]] = {
    "subscribe": ("subscribe", _parse_topics),
    "subscribePattern": ("subscribe_pattern", _parse_pattern),
    "assign": ("assign", _parse_assign),
    "kafka.bootstrap.servers": ("bootstrap_servers", _parse_text),
    "groupIdPrefix": ("group_id_prefix", _parse_text),
    "startingOffsets": ("starting_offsets", _parse_starting_offsets),
    "startingTimestamp": ("starting_timestamp", _parse_timestamp),
    "startingOffsetsByTimestamp": ("starting_offsets_by_timestamp", _parse_offsets_by_timestamp),
    "startingOffsetsByTimestampStrategy": ("starting_offsets_by_timestamp_strategy", _parse_strategy),
    "failOnDataLoss": ("fail_on_data_loss", _parse_bool),
    "maxOffsetsPerTrigger": ("max_offsets_per_trigger", _parse_positive),
    "minOffsetsPerTrigger": ("min_offsets_per_trigger", _parse_positive),
    "maxTriggerDelay": ("max_trigger_delay_ms", parse_duration_ms),
    "minPartitions": ("min_partitions", _parse_positive),
    "maxRecordsPerPartition": ("max_records_per_partition", _parse_positive),
    "includeHeaders": ("include_headers", _parse_bool),
    "kafkaConsumer.pollTimeoutMs": ("poll_timeout_ms", _parse_positive),
    "fetchOffset.numRetries": ("fetch_offset_num_retries", _parse_non_negative),
    "fetchOffset.retryIntervalMs": ("fetch_offset_retry_interval_ms", _parse_non_negative),
    "backlog.enabled": ("backlog_enabled", _parse_bool),
    "backlog.eventsTopic": ("backlog_events_topic", _parse_text),
    "backlog.reenterLag": ("backlog_reenter_lag", _parse_positive),
    "backlog.maxOffsetsPerTrigger": ("backlog_max_offsets_per_trigger", _parse_positive),
    "snapshot.path": ("snapshot_path", _parse_text),
}
_CANONICAL = {name.lower(): name for name in _SPEC}
_OPTIONS = {name.lower(): spec for name, spec in _SPEC.items()}
_FIELD_TO_OPTION = {field: name for name, (field, _) in _SPEC.items()}


def _option_name(key: str) -> str:
    return _CANONICAL.get(key, key)
