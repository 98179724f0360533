"""Source options: Spark's string options parsed into one frozen, validated dataclass.

Which process: the settings are built in the Python worker that Spark starts to create the
data source (so a bad option fails at ``load()``, before any data is read), and again from
the same options in the source's runner on the driver, which plans the batches. Executors
get only :class:`ReaderConfig`, the narrow part a read needs. Plain dataclasses and parser
functions, no model library: each of those processes is fresh and imports this module at a
query's start, so its import is part of every query's start-up.

The option names and meanings are those of Spark's built-in Kafka source, so that
``format("kafka")`` can become ``format("backlog")`` with nothing else changed, plus the
``backlog.*`` and ``snapshot.*`` options of this project. Each field's ``option`` name is
the option's documented name; Spark lower-cases option keys before a Python data source
sees them, so matching is case-insensitive. Options are checked in the order Spark's
``KafkaSourceProvider`` checks them (``validateStreamOptions`` / ``validateBatchOptions``,
then ``validateGeneralOptions``: :func:`parse_options`), so the first problem reported is
the one Spark would report.

Source options never come from the environment: a query's behaviour is what its code says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from backlog_source.core.buckets import Bucket
from backlog_source.core.byte_sizes import EXAMPLES as BYTE_EXAMPLES
from backlog_source.core.byte_sizes import parsed_size
from backlog_source.core.durations import parsed_duration_ms
from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import IsolationLevel, KafkaClientConfig
from backlog_source.core.kafka_options import SPARK_REFUSED, check_bootstrap, check_refused, kafka_client_config
from backlog_source.core.text_enum import TextEnum

#: Spark's per-partition sentinels in ``startingOffsets`` JSON.
LATEST = -1
EARLIEST = -2
class StartingPoint(TextEnum):
    EARLIEST = "earliest"
    LATEST = "latest"


# -- value parsers: each takes the raw option string and raises ValueError("must be ...") ----
# A parser does not know its option's name: the one caller that does (SourceSettings, or
# _parse_value) raises the ConfigError naming it, once. Checks of several options together
# name them and raise ConfigError themselves.


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


#: The value of ``backlog.eventsTopic`` that turns the control topic off, as ``none`` turns off
#: Kafka's ``compression.type`` and Spark's ``spark.io.compression.codec`` fallbacks.
EVENTS_TOPIC_OFF = "none"


def _events_topic(raw: Any) -> str | None:
    """A control topic's name, or None for :data:`EVENTS_TOPIC_OFF` (any case)."""
    if raw is None:
        return None
    text = str(raw).strip()
    if not text:
        raise ValueError(f"must be a topic name, or {EVENTS_TOPIC_OFF!r} for no control topic")
    return None if text.lower() == EVENTS_TOPIC_OFF else text


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
        value = parsed_size(raw)
        if value is None:
            raise ValueError(f"must be a size such as {BYTE_EXAMPLES} (binary units, a bare number is bytes), "
                             f"got {raw!r}")
    if value <= 0:
        raise ValueError(f"must be a positive size, got {raw!r}")
    return value


def _duration(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    value = parsed_duration_ms(raw)
    if value is None:
        raise ValueError(f"must be a duration such as '500ms', '30s', '15m', '1h', got {raw!r}")
    return value


_positive = _whole_number(1, "a positive whole number")
_non_negative = _whole_number(0, "zero or a positive whole number")
_timestamp = _whole_number(0, "a timestamp in ms since the epoch (>= 0)")


def option(name: str | None, parse: Callable[[Any], Any], default: Any = None, *, none_allowed: bool = False) -> Any:
    """A field of :class:`SourceSettings`: ``name`` is its documented option name (None: the
    field's own name), ``parse`` turns an option's string (or an already typed value) into
    the field's value or raises ``ValueError("must ...")``. ``none_allowed``: None is a value
    of its own (an option turned off) although the default is not None."""
    return field(default=default, metadata={"option": name, "parse": parse, "none_allowed": none_allowed})


@dataclass(frozen=True)
class ReaderConfig:
    """What an executor's read needs, and nothing else: it is pickled into every task.

    ``events_topic`` is the control topic readers publish BacklogFinishEvents to, or None
    when backlog tracking is off or the control topic is (``backlog.eventsTopic=none``). A
    split says whether its readers publish (``KafkaSplit.publish_events``): the driver turns
    that off when it may not use the control topic.
    """

    kafka: KafkaClientConfig
    poll_timeout_ms: int
    include_headers: bool
    fail_on_data_loss: bool
    events_topic: str | None


@dataclass(frozen=True)
class SourceSettings:
    """Every option of one ``format("backlog")`` source, typed and checked.

    Built by :func:`parse_options`; construct it directly only in tests (by field name: each
    value goes through its option's parser, as an option string would). Frozen and
    picklable; secrets stay inside :attr:`kafka` as :class:`~backlog_source.core.kafka_config.Secret`.
    Raises :class:`ConfigError` naming every option whose value is not allowed.
    """

    kafka: KafkaClientConfig

    # Subscription: exactly one of these three.
    subscribe: tuple[str, ...] | None = option(None, _topics)
    subscribe_pattern: str | None = option("subscribePattern", _pattern)
    assign: tuple[Bucket, ...] | None = option(None, _assign)

    # Where a new query starts. Precedence as in Spark: starting_timestamp, then
    # starting_offsets_by_timestamp, then starting_offsets.
    starting_offsets: StartingPoint | dict[Bucket, int] = option("startingOffsets", _starting_offsets,
                                                                 StartingPoint.LATEST)
    starting_timestamp: int | None = option("startingTimestamp", _timestamp)
    starting_offsets_by_timestamp: dict[Bucket, int] | None = option("startingOffsetsByTimestamp",
                                                                      _offsets_by_timestamp)
    starting_offsets_by_timestamp_strategy: str = option("startingOffsetsByTimestampStrategy", _timestamp_strategy,
                                                         "error")
    # Where a batch read ends (spark.read only; a streaming query refuses them). Precedence
    # as in Spark: ending_timestamp, then ending_offsets_by_timestamp, then ending_offsets.
    ending_offsets: StartingPoint | dict[Bucket, int] = option("endingOffsets", _ending_offsets, StartingPoint.LATEST)
    ending_timestamp: int | None = option("endingTimestamp", _timestamp)
    ending_offsets_by_timestamp: dict[Bucket, int] | None = option("endingOffsetsByTimestamp", _offsets_by_timestamp)

    fail_on_data_loss: bool = option("failOnDataLoss", _strict_bool, True)
    max_offsets_per_trigger: int | None = option("maxOffsetsPerTrigger", _positive)
    min_offsets_per_trigger: int | None = option("minOffsetsPerTrigger", _positive)
    max_trigger_delay_ms: int = option("maxTriggerDelay", _duration, 15 * 60 * 1000)
    min_partitions: int | None = option("minPartitions", _positive)
    max_records_per_partition: int | None = option("maxRecordsPerPartition", _positive)
    include_headers: bool = option("includeHeaders", _strict_bool, False)
    poll_timeout_ms: int = option("kafkaConsumer.pollTimeoutMs", _positive, 120_000)
    fetch_offset_num_retries: int = option("fetchOffset.numRetries", _non_negative, 3)
    #: Spark's code waits 1000 ms (KafkaOffsetReaderAdmin; its documentation says 10): the
    #: pause that lets a new leader's log end catch up before a log end below the offsets
    #: already read counts as data loss (KAFKA-7703).
    fetch_offset_retry_interval_ms: int = option("fetchOffset.retryIntervalMs", _non_negative, 1_000)
    #: One deadline for each driver-side Kafka request (metadata, offsets), retries included.
    #: Spark's Kafka source gives each of its attempts the Java admin client's timeout of the
    #: same name (60 s by default); one shared deadline fails a wrong bootstrap sooner.
    api_timeout_ms: int = option("kafka.default.api.timeout.ms", _positive, 30_000)

    backlog_enabled: bool = option("backlog.enabled", _strict_bool, True)
    #: The control topic; None (``backlog.eventsTopic=none``): no control topic, so no executor
    #: confirmations nor reader-measured sizes (the planner goes on without, as it does when
    #: the cluster's ACLs refuse this client the topic: ``events/control_topic.py``).
    backlog_events_topic: str | None = option("backlog.eventsTopic", _events_topic, "_backlog_events",
                                              none_allowed=True)
    backlog_reenter_lag: int | None = option("backlog.reenterLag", _positive)
    backlog_max_offsets_per_trigger: int | None = option("backlog.maxOffsetsPerTrigger", _positive)
    #: While processing backlog, a batch reads about this many bytes of keys, values and
    #: headers at most, planned per partition from the record sizes measured there
    #: (enumerator/record_sizes.py). On by default: a job restarted after downtime must not
    #: plan one batch of its whole backlog, which no record count bounds in bytes. None here
    #: means "not set": the planner then sizes it from the driver's heap (core/jvm_heap.py).
    backlog_max_bytes_per_trigger: int | None = option("backlog.maxBytesPerTrigger", _byte_size)
    #: While processing backlog, size each batch so it takes about this long, from the
    #: throughput the query achieved on its previous batches (sink included). Off by default.
    backlog_target_batch_duration_ms: int | None = option("backlog.targetBatchDuration", _duration)
    #: Opt-in: while the source finds nothing new it asks Kafka again at most this often
    #: (Spark polls an idle source about every 10 ms with a "0 seconds" trigger). Off (0) by
    #: default, as in Spark's source, because an answer from the cache tells Spark "nothing
    #: new" for records already in Kafka, and ``processAllAvailable()`` then returns without
    #: them (docs/reading.md, "Idle polling").
    backlog_min_poll_interval_ms: int = option("backlog.minPollIntervalMs", _non_negative, 0)
    #: This query's own trigger intervals for ``backlog_source.install`` (while processing
    #: backlog / once caught up), overriding the installation's; carried to the driver program
    #: in the offset dict. Unset: the installation's intervals.
    backlog_high_throughput_interval_ms: int | None = option("backlog.highThroughputInterval", _duration)
    backlog_low_latency_interval_ms: int | None = option("backlog.lowLatencyInterval", _duration)
    #: Opt-in: once Spark has committed a batch, copy its end offsets to a consumer group
    #: (``kafka.group.id``, else ``<groupIdPrefix>-<source id>``) for lag tools; never read
    #: back (enumerator/group_commits.py).
    backlog_commit_offsets_to_group: bool = option("backlog.commitOffsetsToGroup", _strict_bool, False)
    snapshot_path: str | None = option("snapshot.path", _text)

    def __post_init__(self) -> None:
        if not isinstance(self.kafka, KafkaClientConfig):
            raise TypeError(f"kafka must be a KafkaClientConfig, got {type(self.kafka).__name__}")
        problems = []
        for each in fields(self):
            parse, value = each.metadata.get("parse"), getattr(self, each.name)
            if parse is None or (value is None and (each.default is None or each.metadata["none_allowed"])):
                continue  # the kafka field, an option left unset, or one turned off
            if value is None:
                problems.append(_option_message(_OPTION_OF_FIELD[each.name], "must not be None"))
                continue
            try:
                object.__setattr__(self, each.name, parse(value))
            except ValueError as exc:
                problems.append(_option_message(_OPTION_OF_FIELD[each.name], str(exc)))
        if problems:
            raise ConfigError("; ".join(problems))
        self._check_combinations()

    def _check_combinations(self) -> None:
        """Options that are allowed alone but not together. Raises :class:`ConfigError`
        naming them."""
        _check_subscription(
            {"subscribe": self.subscribe, "subscribePattern": self.subscribe_pattern, "assign": self.assign}
        )
        _check_trigger_limits(self.min_offsets_per_trigger, self.max_offsets_per_trigger)
        # Refused at load, not left to do nothing: re-entry needs a lag of more than one batch
        # (enumerator/boundaries.py), and only a record cap bounds a live batch
        # (ReadBudget.one_batch_records, split/planning.py, where the limits are combined).
        if self.backlog_reenter_lag is not None and self.max_offsets_per_trigger is None and (
                self.backlog_max_offsets_per_trigger is None):
            raise ConfigError(
                "'backlog.reenterLag' needs a read limit, 'maxOffsetsPerTrigger' or 'backlog.maxOffsetsPerTrigger': "
                "without one every batch reads all there is, so no lag is ever more than one batch"
            )

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

#: Documented option name of each field of :class:`SourceSettings`.
_OPTION_OF_FIELD = {each.name: each.metadata.get("option") or each.name for each in fields(SourceSettings)
                    if each.name != "kafka"}
#: Documented option name by lower-cased key.
_OPTION_NAMES = {name.lower(): name for name in _OPTION_OF_FIELD.values()} | {
    "groupidprefix": "groupIdPrefix"}  # goes into KafkaClientConfig
#: Field name by documented option name.
_FIELD_OF_OPTION = {name: field_name for field_name, name in _OPTION_OF_FIELD.items()}
#: The ending options, refused in a stream in this order: Spark's ``validateStreamOptions``
#: checks the first two (Spark ignores ``endingTimestamp`` in a stream; this source refuses it).
_ENDING = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
#: The kind of read options are parsed for (see :func:`parse_options`).
ReadKind = Literal["stream", "batch"] | None
_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
#: Where each side of a batch read comes from, in Spark's precedence
#: (``KafkaSourceProvider.getKafkaOffsetRangeLimit``): the first one set wins.
_PRECEDENCE = {"starting": ("startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets"),
               "ending": ("endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")}


def parse_options(options: Mapping[str, str], *, read: ReadKind = None) -> SourceSettings:
    """Build :class:`SourceSettings` from the string options a query passed.

    ``read``: ``"stream"`` (``spark.readStream``: the ending options are refused),
    ``"batch"`` (``spark.read``: ``startingOffsets`` defaults to ``earliest``, and the
    starting and ending options are checked as Spark checks a batch read), or None when the
    kind of read is not known yet (both kinds' options are accepted; the reader checks its
    own when Spark asks for it; ``load()`` uses :func:`parse_options_at_load`).

    Raises :class:`ConfigError` naming the option and what is allowed, never echoing a
    secret. Unknown options are rejected too: a misspelt option silently ignored is a
    misconfigured job. Of several problems, the one reported is the one Spark's
    ``KafkaSourceProvider`` reports first (unknown options, which Spark ignores, come before
    all):

    1. a stream: the ending options (``validateStreamOptions``); a batch read: the starting
       option that takes precedence, then the ending one (``validateBatchOptions``: the
       value, then a start at ``latest`` or an end at ``earliest``);
    2. ``validateGeneralOptions``: the subscription (exactly one, then its value),
       ``minPartitions``, ``maxRecordsPerPartition``, the ``kafka.*`` options Spark
       refuses (in Spark's order), ``kafka.bootstrap.servers``, then ``minOffsetsPerTrigger``
       above ``maxOffsetsPerTrigger``;
    3. every other value: those Spark reads later, and this source's own;
    4. a batch read: starting and ending options that do not fit together
       (``checkOffsetLimitValidity``), and the options a batch read cannot use.
    """
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    # kafka.* options are the client's, except the few this model reads itself.
    client_keys = {k for k in opts if k.startswith("kafka.") and k not in _OPTION_NAMES}
    for key in opts:
        if key not in client_keys and key not in _OPTION_NAMES:
            known = ", ".join(sorted(_OPTION_NAMES.values()))
            raise ConfigError(f"unknown option '{key}'. Known options: {known}, and any 'kafka.*' consumer setting")
    kafka_options = {k.removeprefix("kafka."): opts[k] for k in client_keys}
    values = {_OPTION_NAMES[k]: v for k, v in opts.items() if k not in client_keys}
    if read == "stream":
        for name in _ENDING:
            if name in values:
                raise ConfigError(f"option '{name}' is for batch queries only; a streaming query has no end offset")
    elif read == "batch":
        values.setdefault("startingOffsets", "earliest")
        _check_batch_limits(values)
    _check_general(values, kafka_options)
    try:
        group_id_prefix = _text(values.pop("groupIdPrefix", "spark-kafka-source"))
    except ValueError as exc:
        raise ConfigError(f"option 'groupIdPrefix' {exc}") from None
    kafka = kafka_client_config(kafka_options, group_id_prefix=group_id_prefix)
    settings = SourceSettings(kafka=kafka, **{_FIELD_OF_OPTION[name]: value for name, value in values.items()})
    if read == "batch":
        check_batch_range(settings)
    return settings


def parse_options_at_load(options: Mapping[str, str]) -> SourceSettings | None:
    """The options as ``load()`` checks them: where Spark's Kafka source checks its own
    (``sourceSchema``, ``createRelation``), before the query knows whether it is read as a
    stream or a batch, which a Python data source learns only when Spark asks it for a reader.

    A problem that a stream and a batch read would both report first (an unknown option, the
    subscription, most values) is raised here. Where the kind decides which problem comes
    first (an ending option: a stream is told first that it has no end, a batch read about
    its subscription; ``startingOffsets=latest``, refused by a batch read only), nothing is
    raised: returns None, and the reader Spark asks for reports its own first problem
    (:func:`parse_options` with ``read``), before any data is read.
    """
    try:
        return parse_options(options)
    except ConfigError:
        pass
    stream, batch = (_first_problem(options, kind) for kind in ("stream", "batch"))
    if stream is not None and batch is not None and str(stream) == str(batch):
        raise stream
    return None


def include_headers(options: Mapping[str, str]) -> bool:
    """``includeHeaders`` alone: the schema's one input, for a ``load()`` whose first problem
    waits for the reader (:func:`parse_options_at_load`). A value that is not a boolean reads
    as false here; the reader reports it."""
    raw = next((v for k, v in options.items() if str(k).lower() == "includeheaders"), "false")
    try:
        return _strict_bool(raw)
    except ValueError:
        return False


def check_batch_range(settings: SourceSettings) -> None:
    """The starting and ending options of a batch read, as Spark checks them before it asks
    Kafka anything. ``KafkaSourceProvider.validateBatchOptions``: of each side, the option
    that takes precedence (:data:`_PRECEDENCE`) cannot start at the latest offsets nor end at
    the earliest ones. ``checkOffsetLimitValidity``: specific starting and ending offsets
    (or per-partition timestamps) name the same partitions, and none starts after it ends.
    And ``snapshot.path`` and ``backlog.commitOffsetsToGroup`` are for streams. Raises :class:`ConfigError`."""
    given = {name for name in _PRECEDENCE["starting"] + _PRECEDENCE["ending"]
             if getattr(settings, _FIELD_OF_OPTION[name]) is not None}
    starting = next(name for name in _PRECEDENCE["starting"] if name in given or name == "startingOffsets")
    ending = next(name for name in _PRECEDENCE["ending"] if name in given or name == "endingOffsets")
    if starting == "startingOffsets":
        _refuse_latest_start(settings.starting_offsets)
    if ending == "endingOffsets":
        _refuse_earliest_end(settings.ending_offsets)
    pairs = {("startingOffsets", "endingOffsets"): (settings.starting_offsets, settings.ending_offsets, "offset"),
             ("startingOffsetsByTimestamp", "endingOffsetsByTimestamp"): (
                 settings.starting_offsets_by_timestamp, settings.ending_offsets_by_timestamp, "timestamp")}
    for (start_name, end_name), (start, end, what) in pairs.items():
        if (starting, ending) == (start_name, end_name) and isinstance(start, dict) and isinstance(end, dict):
            _check_limits_fit(start_name, start, end_name, end, what)
    if settings.snapshot_path is not None:
        raise ConfigError("option 'snapshot.path' is for streaming queries (spark.readStream); a batch read reads "
                          "Kafka only")
    if settings.backlog_commit_offsets_to_group:
        raise ConfigError("option 'backlog.commitOffsetsToGroup' is for streaming queries (spark.readStream): a "
                          "batch read commits no batch")


def _first_problem(options: Mapping[str, str], read: ReadKind) -> ConfigError | None:
    try:
        parse_options(options, read=read)
    except ConfigError as problem:
        return problem
    return None


def _parse_value(values: Mapping[str, str], name: str) -> Any:
    """The value of option ``name`` through its field's parser, or None when it is not set.
    Raises :class:`ConfigError` naming the option."""
    if name not in values:
        return None
    try:
        return _PARSER_OF_OPTION[name](values[name])
    except ValueError as exc:
        raise ConfigError(_option_message(name, str(exc))) from None


def _check_batch_limits(values: Mapping[str, str]) -> None:
    """The first steps of Spark's ``validateBatchOptions``, before anything else is checked:
    ``getKafkaOffsetRangeLimit`` for the starting side (it reads
    ``startingOffsetsByTimestampStrategy`` first), then for the ending side: the value of the
    option that takes precedence, then a start at ``latest`` or an end at ``earliest``."""
    _parse_value(values, "startingOffsetsByTimestampStrategy")
    for side, refuse in (("starting", _refuse_latest_start), ("ending", _refuse_earliest_end)):
        name = next((n for n in _PRECEDENCE[side] if n in values), None)
        if name is None:
            continue  # endingOffsets' default, latest
        value = _parse_value(values, name)
        if name in ("startingOffsets", "endingOffsets"):
            refuse(value)


def _refuse_latest_start(starting: StartingPoint | dict[Bucket, int]) -> None:
    if starting is StartingPoint.LATEST:
        raise ConfigError("option 'startingOffsets' can't be 'latest' for a batch read (spark.read): it would read "
                          "nothing. Use 'earliest' (the default for batch reads) or specific offsets")
    if isinstance(starting, dict) and (latest := sorted(b for b, o in starting.items() if o == LATEST)):
        raise ConfigError(f"option 'startingOffsets' can't be -1 (latest) for a batch read (spark.read): "
                          f"{', '.join(map(str, latest))}")


def _refuse_earliest_end(ending: StartingPoint | dict[Bucket, int]) -> None:
    if ending is StartingPoint.EARLIEST:
        raise ConfigError("option 'endingOffsets' can't be 'earliest' for a batch read (spark.read): it would read "
                          "nothing. Use 'latest' (the default) or specific offsets")
    if isinstance(ending, dict) and (earliest := sorted(b for b, o in ending.items() if o == EARLIEST)):
        raise ConfigError(f"option 'endingOffsets' can't be -2 (earliest) for a batch read (spark.read): "
                          f"{', '.join(map(str, earliest))}")


def _check_limits_fit(start_name: str, start: Mapping[Bucket, int], end_name: str, end: Mapping[Bucket, int],
                      what: str) -> None:
    """Spark's ``checkOffsetLimitValidity`` for two specific sides: the same partitions, and
    no start after its end (the sentinels -2 and -1 are not compared)."""
    if start.keys() != end.keys():
        only_start, only_end = sorted(start.keys() - end.keys()), sorted(end.keys() - start.keys())
        raise ConfigError(
            f"options '{start_name}' and '{end_name}' must name the same partitions; "
            + "; ".join(f"only in '{name}': {', '.join(map(str, only))}"
                        for name, only in ((start_name, only_start), (end_name, only_end)) if only))
    backwards = sorted(b for b in start if start[b] > end[b] >= 0)
    if backwards:
        described = ", ".join(f"{b} (start {start[b]}, end {end[b]})" for b in backwards)
        raise ConfigError(f"the batch read starts after it ends for {described}: check '{start_name}' and "
                          f"'{end_name}' (each partition's start {what} must not be after its end {what})")


def _check_general(values: Mapping[str, str], kafka_options: Mapping[str, str]) -> None:
    """Spark's ``validateGeneralOptions``, in its order: the subscription (exactly one, then
    its value: an empty ``subscribe`` is named before a missing ``kafka.bootstrap.servers``),
    ``minPartitions``, ``maxRecordsPerPartition``, the ``kafka.*`` options Spark refuses,
    ``kafka.bootstrap.servers``, then ``minOffsetsPerTrigger`` above ``maxOffsetsPerTrigger``."""
    _check_subscription({name: values.get(name) for name in _SUBSCRIPTIONS})
    _parse_value(values, next(name for name in _SUBSCRIPTIONS if values.get(name) is not None))
    _parse_value(values, "minPartitions")
    _parse_value(values, "maxRecordsPerPartition")
    check_refused(kafka_options, SPARK_REFUSED)
    check_bootstrap(kafka_options)
    if "minOffsetsPerTrigger" in values and "maxOffsetsPerTrigger" in values:
        _check_trigger_limits(_parse_value(values, "minOffsetsPerTrigger"),
                              _parse_value(values, "maxOffsetsPerTrigger"))


def _check_trigger_limits(minimum: int | None, maximum: int | None) -> None:
    """Raises :class:`ConfigError` naming both options when the minimum exceeds the maximum."""
    if minimum is not None and maximum is not None and minimum > maximum:
        raise ConfigError(f"'minOffsetsPerTrigger' ({minimum}) must not exceed 'maxOffsetsPerTrigger' ({maximum})")


def _check_subscription(chosen: Mapping[str, Any]) -> None:
    """Raises :class:`ConfigError` unless exactly one subscription option is set."""
    given = [name for name, value in chosen.items() if value is not None]
    if len(given) != 1:
        raise ConfigError(
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set, "
            f"got {', '.join(repr(c) for c in given) if given else 'none'}"
        )


def _option_message(option: str, message: str) -> str:
    # "must ..." and "is ..." read on from the option's name; other messages follow a colon.
    joined = " " if message.startswith(("must", "is ")) else ": "
    return f"option '{option}'{joined}{message}"


#: Each option's value check, by documented name: its field's own parser, for the options
#: Spark checks before the others.
_PARSER_OF_OPTION = {_OPTION_OF_FIELD[each.name]: each.metadata["parse"] for each in fields(SourceSettings)
                     if each.name != "kafka"}
