"""Source options: Spark's string options parsed into one frozen, validated model.

Which process: the model is built in the Python worker that Spark starts to create the data
source (so a bad option fails at ``load()``, before any data is read), then pickled to the
driver's planner worker. Executors get only :class:`ReaderConfig`, the narrow part a read
needs.

The option names and meanings are those of Spark's built-in Kafka source, so that
``format("kafka")`` can become ``format("backlog")`` with nothing else changed, plus the
``backlog.*`` and ``snapshot.*`` options of this project. Each field's alias is the option's
documented name; Spark lower-cases option keys before a Python data source sees them, so
matching is case-insensitive. Options are checked in the order Spark's
``KafkaSourceProvider.validateGeneralOptions`` checks them, so the first problem reported is
the one Spark would report.

Source options never come from the environment: a query's behaviour is what its code says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from backlog_source.core.buckets import Bucket
from backlog_source.core.byte_sizes import EXAMPLES as BYTE_EXAMPLES
from backlog_source.core.byte_sizes import size_bytes
from backlog_source.core.durations import duration_ms
from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import IsolationLevel, KafkaClientConfig
from backlog_source.core.kafka_options import kafka_client_config
from backlog_source.core.text_enum import TextEnum

#: Spark's per-partition sentinels in ``startingOffsets`` JSON.
LATEST = -1
EARLIEST = -2
#: ``backlog.maxBytesPerTrigger`` when not set: half the largest catch-up batch that Spark's
#: default driver (1 GiB heap) hands to a ``foreachBatch`` converting it to Arrow, so a user
#: who sets nothing never gets a batch the driver cannot hold; and large enough that a batch's
#: fixed cost is a small share of its time (the measurements: benchmarks/README.md parts 11
#: and 12).
DEFAULT_BACKLOG_MAX_BYTES = 256 << 20


class StartingPoint(TextEnum):
    EARLIEST = "earliest"
    LATEST = "latest"


# -- value parsers: each takes the raw option string and raises ValueError("must be ...") ----


def _strict_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    lowered = str(raw).strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"must be 'true' or 'false', got {raw!r}")
    return lowered == "true"


def _whole_number(minimum: int | None, allowed: str):
    def parse(raw: Any) -> int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            value = raw
        else:
            try:
                value = int(str(raw).strip())
            except ValueError:
                raise ValueError(f"must be a whole number, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise ValueError(f"must be {allowed}, got {raw!r}")
        return value

    return parse


def _text(raw: Any) -> str:
    if not str(raw).strip():
        raise ValueError("must not be empty")
    return str(raw).strip()


def _topics(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, tuple):
        return raw
    topics = tuple(t.strip() for t in str(raw).split(",") if t.strip())
    if not topics:
        raise ValueError(f"must list at least one topic (comma-separated), got {raw!r}")
    return topics


def _pattern(raw: Any) -> str:
    pattern = _text(raw)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"is not a valid regular expression ({exc}): {raw!r}") from None
    return pattern


def _json_object(raw: str, example: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not valid JSON ({exc.msg}); expected e.g. {example}") from None
    if not isinstance(value, dict) or not value:
        raise ValueError(f"must be a non-empty JSON object such as {example}")
    return value


def _assign(raw: Any) -> tuple[Bucket, ...]:
    if isinstance(raw, tuple):
        return raw
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    buckets = []
    for topic, partitions in _json_object(str(raw), example).items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise ValueError(f"topic {topic!r} must map to a list of partition numbers, e.g. {example}")
        buckets.extend(Bucket(topic, p) for p in partitions)
    if not buckets:
        raise ValueError(f"assigns no partition; expected e.g. {example}")
    return tuple(sorted(set(buckets)))


def _bucket_map(raw: str, example: str, allow: str) -> dict[Bucket, int]:
    result: dict[Bucket, int] = {}
    for topic, per_partition in _json_object(raw, example).items():
        if not isinstance(per_partition, dict):
            raise ValueError(f"topic {topic!r} must map to an object, e.g. {example}")
        for partition, value in per_partition.items():
            try:
                number = int(partition)
            except ValueError:
                raise ValueError(f"partition {partition!r} of topic {topic!r} is not a number") from None
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"the value for {topic}-{partition} must be a whole number ({allow}), got {value!r}")
            result[Bucket(topic, number)] = value
    return result


def _offsets_option(raw: Any, sentinels: str) -> StartingPoint | dict[Bucket, int]:
    """``earliest``, ``latest`` or a JSON object of offsets where -2 is earliest and -1 is
    latest: the shape of ``startingOffsets`` and ``endingOffsets`` (``sentinels`` says which
    words and sentinels the option allows, for the message)."""
    if isinstance(raw, (StartingPoint, dict)):
        return raw
    text = str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        return StartingPoint(text.lower())
    example = '{"topicA":{"0":23,"1":-1}}'
    if not text.startswith("{"):
        raise ValueError(f"must be {sentinels}, got {raw!r}")
    offsets = _bucket_map(text, example, "an offset >= 0, -1 for latest or -2 for earliest")
    for bucket, offset in offsets.items():
        if offset < EARLIEST:
            raise ValueError(
                f"offset {offset} for {bucket} is not allowed; use an offset >= 0, -1 for latest or -2 for earliest"
            )
    return offsets


def _starting_offsets(raw: Any) -> StartingPoint | dict[Bucket, int]:
    return _offsets_option(
        raw, '\'earliest\', \'latest\' or a JSON object such as {"topicA":{"0":23,"1":-1}} (-2 = earliest, -1 = latest)')


def _ending_offsets(raw: Any) -> StartingPoint | dict[Bucket, int]:
    """``endingOffsets`` (batch reads): ``latest``, or a JSON object of offsets where -1 is
    latest; ``earliest`` and -2 are refused by :func:`check_batch_range`, as Spark refuses them."""
    return _offsets_option(raw, '\'latest\' or a JSON object such as {"topicA":{"0":23,"1":-1}} (-1 = latest)')


def _offsets_by_timestamp(raw: Any) -> dict[Bucket, int]:
    if isinstance(raw, dict):
        return raw
    offsets = _bucket_map(str(raw), '{"topicA":{"0":1700000000000}}', "a timestamp in ms")
    for bucket, timestamp in offsets.items():
        if timestamp < 0:
            raise ValueError(f"timestamp {timestamp} for {bucket} must be >= 0")
    return offsets


def _timestamp_strategy(raw: Any) -> str:
    lowered = str(raw).strip().lower()
    if lowered not in ("error", "latest"):
        raise ValueError(f"must be 'error' or 'latest', got {raw!r}")
    return lowered


def _byte_size(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    else:
        try:
            value = size_bytes("it", raw)
        except ConfigError:
            raise ValueError(f"must be a size such as {BYTE_EXAMPLES} (binary units, a bare number is bytes), "
                             f"got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"must be a positive size, got {raw!r}")
    return value


def _duration(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    try:
        return duration_ms("it", raw)
    except ConfigError:
        raise ValueError(f"must be a duration such as '500ms', '30s', '15m', '1h', got {raw!r}") from None


StrictBool = Annotated[bool, BeforeValidator(_strict_bool)]
PositiveNumber = Annotated[int, BeforeValidator(_whole_number(1, "a positive whole number"))]
NonNegativeNumber = Annotated[int, BeforeValidator(_whole_number(0, "zero or a positive whole number"))]
Timestamp = Annotated[int, BeforeValidator(_whole_number(0, "a timestamp in ms since the epoch (>= 0)"))]
Text = Annotated[str, BeforeValidator(_text)]
DurationMs = Annotated[int, BeforeValidator(_duration)]
ByteSize = Annotated[int, BeforeValidator(_byte_size)]


@dataclass(frozen=True)
class ReaderConfig:
    """What an executor's read needs, and nothing else: it is pickled into every task.

    ``events_topic`` is the control topic readers publish BacklogFinishEvents to, or None
    when backlog tracking is off.
    """

    kafka: KafkaClientConfig
    poll_timeout_ms: int
    include_headers: bool
    fail_on_data_loss: bool
    events_topic: str | None


class SourceSettings(BaseModel):
    """Every option of one ``format("backlog")`` source, typed and checked.

    Built by :func:`parse_options`; construct it directly only in tests (by field name).
    Frozen and picklable; secrets stay inside :attr:`kafka` as ``SecretStr``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    kafka: KafkaClientConfig

    # Subscription: exactly one of these three.
    subscribe: Annotated[tuple[str, ...], BeforeValidator(_topics)] | None = None
    subscribe_pattern: Annotated[str, BeforeValidator(_pattern)] | None = Field(None, alias="subscribePattern")
    assign: Annotated[tuple[Bucket, ...], BeforeValidator(_assign)] | None = None

    # Where a new query starts. Precedence as in Spark: starting_timestamp, then
    # starting_offsets_by_timestamp, then starting_offsets.
    starting_offsets: Annotated[StartingPoint | dict[Bucket, int], BeforeValidator(_starting_offsets)] = Field(
        StartingPoint.LATEST, alias="startingOffsets"
    )
    starting_timestamp: Timestamp | None = Field(None, alias="startingTimestamp")
    starting_offsets_by_timestamp: Annotated[dict[Bucket, int], BeforeValidator(_offsets_by_timestamp)] | None = Field(
        None, alias="startingOffsetsByTimestamp"
    )
    starting_offsets_by_timestamp_strategy: Annotated[str, BeforeValidator(_timestamp_strategy)] = Field(
        "error", alias="startingOffsetsByTimestampStrategy"
    )
    # Where a batch read ends (spark.read only; a streaming query refuses them). Precedence
    # as in Spark: ending_timestamp, then ending_offsets_by_timestamp, then ending_offsets.
    ending_offsets: Annotated[StartingPoint | dict[Bucket, int], BeforeValidator(_ending_offsets)] = Field(
        StartingPoint.LATEST, alias="endingOffsets"
    )
    ending_timestamp: Timestamp | None = Field(None, alias="endingTimestamp")
    ending_offsets_by_timestamp: Annotated[dict[Bucket, int], BeforeValidator(_offsets_by_timestamp)] | None = Field(
        None, alias="endingOffsetsByTimestamp"
    )

    fail_on_data_loss: StrictBool = Field(True, alias="failOnDataLoss")
    max_offsets_per_trigger: PositiveNumber | None = Field(None, alias="maxOffsetsPerTrigger")
    min_offsets_per_trigger: PositiveNumber | None = Field(None, alias="minOffsetsPerTrigger")
    max_trigger_delay_ms: DurationMs = Field(15 * 60 * 1000, alias="maxTriggerDelay")
    min_partitions: PositiveNumber | None = Field(None, alias="minPartitions")
    max_records_per_partition: PositiveNumber | None = Field(None, alias="maxRecordsPerPartition")
    include_headers: StrictBool = Field(False, alias="includeHeaders")
    poll_timeout_ms: PositiveNumber = Field(120_000, alias="kafkaConsumer.pollTimeoutMs")
    fetch_offset_num_retries: NonNegativeNumber = Field(3, alias="fetchOffset.numRetries")
    #: Spark's code waits 1000 ms (KafkaOffsetReaderAdmin; its documentation says 10): the
    #: pause that lets a new leader's log end catch up before a log end below the offsets
    #: already read counts as data loss (KAFKA-7703).
    fetch_offset_retry_interval_ms: NonNegativeNumber = Field(1_000, alias="fetchOffset.retryIntervalMs")
    #: One deadline for each driver-side Kafka request (metadata, offsets), retries included.
    #: Spark's Kafka source gives each of its attempts the Java admin client's timeout of the
    #: same name (60 s by default); one shared deadline fails a wrong bootstrap sooner.
    api_timeout_ms: PositiveNumber = Field(30_000, alias="kafka.default.api.timeout.ms")

    backlog_enabled: StrictBool = Field(True, alias="backlog.enabled")
    backlog_events_topic: Text = Field("_backlog_events", alias="backlog.eventsTopic")
    backlog_reenter_lag: PositiveNumber | None = Field(None, alias="backlog.reenterLag")
    backlog_max_offsets_per_trigger: PositiveNumber | None = Field(None, alias="backlog.maxOffsetsPerTrigger")
    #: While processing backlog, a batch reads about this many bytes of keys, values and
    #: headers at most, planned per partition from the record sizes measured there
    #: (enumerator/record_sizes.py). On by default: a job restarted after downtime must not
    #: plan one batch of its whole backlog, which no record count bounds in bytes.
    backlog_max_bytes_per_trigger: ByteSize | None = Field(DEFAULT_BACKLOG_MAX_BYTES, alias="backlog.maxBytesPerTrigger")
    #: While processing backlog, size each batch so it takes about this long, from the
    #: throughput the query achieved on its previous batches (sink included). Off by default.
    backlog_target_batch_duration_ms: DurationMs | None = Field(None, alias="backlog.targetBatchDuration")
    #: Opt-in: while the source finds nothing new it asks Kafka again at most this often
    #: (Spark polls an idle source about every 10 ms with a "0 seconds" trigger). Off (0) by
    #: default, as in Spark's source, because an answer from the cache tells Spark "nothing
    #: new" for records already in Kafka, and ``processAllAvailable()`` then returns without
    #: them (docs/reading.md, "Idle polling").
    backlog_min_poll_interval_ms: NonNegativeNumber = Field(0, alias="backlog.minPollIntervalMs")
    #: This query's own trigger intervals for ``backlog_source.install`` (while processing
    #: backlog / once caught up), overriding the installation's; carried to the driver program
    #: in the offset dict. Unset: the installation's intervals.
    backlog_high_throughput_interval_ms: DurationMs | None = Field(None, alias="backlog.highThroughputInterval")
    backlog_low_latency_interval_ms: DurationMs | None = Field(None, alias="backlog.lowLatencyInterval")
    snapshot_path: Text | None = Field(None, alias="snapshot.path")

    @model_validator(mode="after")
    def _check_combinations(self) -> "SourceSettings":
        _check_subscription(
            {"subscribe": self.subscribe, "subscribePattern": self.subscribe_pattern, "assign": self.assign}
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
        if self.backlog_reenter_lag is not None and self.max_offsets_per_trigger is None and (
                self.backlog_max_offsets_per_trigger is None):
            raise ValueError(
                "'backlog.reenterLag' needs a read limit, 'maxOffsetsPerTrigger' or 'backlog.maxOffsetsPerTrigger': "
                "without one every batch reads all there is, so no lag is ever more than one batch"
            )
        return self

    @property
    def isolation_level(self) -> IsolationLevel:
        return self.kafka.isolation_level

    @property
    def reader_config(self) -> ReaderConfig:
        """The part of these settings an executor's read needs."""
        return ReaderConfig(
            kafka=self.kafka,
            poll_timeout_ms=self.poll_timeout_ms,
            include_headers=self.include_headers,
            fail_on_data_loss=self.fail_on_data_loss,
            events_topic=self.backlog_events_topic if self.backlog_enabled else None,
        )


# -- parsing Spark's string options ---------------------------------------------------------

#: Documented option name (the field's alias) by lower-cased key.
_OPTION_NAMES = {
    (field.alias or name).lower(): (field.alias or name)
    for name, field in SourceSettings.model_fields.items()
    if name != "kafka"
} | {"groupidprefix": "groupIdPrefix"}  # goes into KafkaClientConfig
_OPTION_OF_FIELD = {name: field.alias or name for name, field in SourceSettings.model_fields.items()}
_BATCH_ONLY = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
#: The kind of read options are parsed for (see :func:`parse_options`).
ReadKind = Literal["stream", "batch"] | None
_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")


def parse_options(options: Mapping[str, str], *, read: ReadKind = None) -> SourceSettings:
    """Build :class:`SourceSettings` from the string options a query passed.

    ``read``: ``"stream"`` (``spark.readStream``: the ending options are refused),
    ``"batch"`` (``spark.read``: ``startingOffsets`` defaults to ``earliest``, and the
    starting and ending options are checked as Spark checks a batch read), or None when the
    kind of read is not known yet (``load()``: both kinds' options are accepted; the reader
    checks its own when Spark asks for it).

    Raises :class:`ConfigError` naming the option and what is allowed, never echoing a
    secret. Unknown options are rejected too: a misspelt option silently ignored is a
    misconfigured job. The order of the checks is Spark's: batch-only options, the
    subscription, partitioning, the ``kafka.*`` options, ``kafka.bootstrap.servers``, then
    every other value.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    for key in opts:
        if key in _BATCH_ONLY and read == "stream":
            raise ConfigError(f"option '{_batch_only_name(key)}' is for batch queries only; a streaming query has no end offset")
    if read == "batch":
        opts.setdefault("startingoffsets", "earliest")
    # kafka.* options are the client's, except the few this model reads itself.
    client_keys = {k for k in opts if k.startswith("kafka.") and k not in _OPTION_NAMES}
    kafka_options = {k.removeprefix("kafka."): opts[k] for k in client_keys}
    spark_options = {k: v for k, v in opts.items() if k not in client_keys}
    for key in spark_options:
        if key not in _OPTION_NAMES:
            known = ", ".join(sorted(_OPTION_NAMES.values()))
            raise ConfigError(f"unknown option '{key}'. Known options: {known}, and any 'kafka.*' consumer setting")
    values = {_OPTION_NAMES[k]: v for k, v in spark_options.items()}
    try:
        _check_subscription({name: values.get(name) for name in _SUBSCRIPTIONS})
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    # The subscription's value comes before the Kafka settings, as in Spark's
    # validateGeneralOptions: an empty 'subscribe' is named first, not a missing
    # 'kafka.bootstrap.servers'.
    chosen = next(name for name in _SUBSCRIPTIONS if values.get(name) is not None)
    try:
        _SUBSCRIPTION_VALUES[chosen](values[chosen])
    except ValueError as exc:
        raise ConfigError(_option_message(chosen, str(exc))) from None
    try:
        group_id_prefix = _text(values.pop("groupIdPrefix", "spark-kafka-source"))
    except ValueError as exc:
        raise ConfigError(f"option 'groupIdPrefix' {exc}") from None
    kafka = kafka_client_config(kafka_options, group_id_prefix=group_id_prefix)
    try:
        settings = SourceSettings.model_validate({**values, "kafka": kafka})
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc)) from None
    if read == "batch":
        check_batch_range(settings)
    return settings


def check_batch_range(settings: SourceSettings) -> None:
    """The starting and ending options of a batch read, as Spark's
    ``KafkaSourceProvider.validateBatchOptions`` checks them: a batch read cannot start at
    the latest offsets nor end at the earliest ones. Raises :class:`ConfigError`."""
    starting, ending = settings.starting_offsets, settings.ending_offsets
    if starting is StartingPoint.LATEST:
        raise ConfigError("option 'startingOffsets' can't be 'latest' for a batch read (spark.read): it would read "
                          "nothing. Use 'earliest' (the default for batch reads) or specific offsets")
    if isinstance(starting, dict) and (latest := sorted(b for b, o in starting.items() if o == LATEST)):
        raise ConfigError(f"option 'startingOffsets' can't be -1 (latest) for a batch read (spark.read): "
                          f"{', '.join(map(str, latest))}")
    if ending is StartingPoint.EARLIEST:
        raise ConfigError("option 'endingOffsets' can't be 'earliest' for a batch read (spark.read): it would read "
                          "nothing. Use 'latest' (the default) or specific offsets")
    if isinstance(ending, dict) and (earliest := sorted(b for b, o in ending.items() if o == EARLIEST)):
        raise ConfigError(f"option 'endingOffsets' can't be -2 (earliest) for a batch read (spark.read): "
                          f"{', '.join(map(str, earliest))}")
    if settings.snapshot_path is not None:
        raise ConfigError("option 'snapshot.path' is for streaming queries (spark.readStream); a batch read reads "
                          "Kafka only")


def _check_subscription(chosen: Mapping[str, Any]) -> None:
    given = [name for name, value in chosen.items() if value is not None]
    if len(given) != 1:
        raise ValueError(
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set, "
            f"got {', '.join(repr(c) for c in given) if given else 'none'}"
        )


def _batch_only_name(key: str) -> str:
    return {"endingoffsets": "endingOffsets", "endingtimestamp": "endingTimestamp"}.get(key, "endingOffsetsByTimestamp")


def _validation_message(exc: ValidationError) -> str:
    # Built from our own messages and option names only: pydantic's default text quotes
    # input values, and no secret may come near an error message.
    parts = []
    for error in exc.errors(include_input=False, include_url=False):
        message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        location = error.get("loc", ())
        option = _OPTION_OF_FIELD.get(str(location[0])) if location else None
        option = option or (str(location[0]) if location else None)
        if option and option in _OPTION_NAMES.values():
            parts.append(_option_message(option, message))
        else:
            parts.append(message)
    return "; ".join(parts)


def _option_message(option: str, message: str) -> str:
    # "must ..." and "is ..." read on from the option's name; other messages follow a colon.
    joined = " " if message.startswith(("must", "is ")) else ": "
    return f"option '{option}'{joined}{message}"


#: Each subscription option's value check (the model's own validators, run early).
_SUBSCRIPTION_VALUES = {"subscribe": _topics, "subscribePattern": _pattern, "assign": _assign}
