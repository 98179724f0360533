import dataclasses
import pickle

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import ConfigError
from backlog_source.core.kafka_config import ClientRole
from backlog_source.core.settings import StartingPoint, parse_options, parse_options_at_load

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


def test_defaults_follow_spark():
    settings = parse_options(BASE)
    assert settings.subscribe == ("orders",)
    assert settings.starting_offsets is StartingPoint.LATEST
    assert settings.fail_on_data_loss is True
    assert settings.max_trigger_delay_ms == 15 * 60 * 1000
    assert settings.include_headers is False
    assert settings.backlog_enabled is True
    assert settings.backlog_events_topic == "_backlog_events"
    assert settings.backlog_min_poll_interval_ms == 0  # Spark asks Kafka at every poll
    # KafkaSourceProvider / KafkaOffsetReaderAdmin: their code's defaults, not the docs' 10 ms.
    assert settings.poll_timeout_ms == 120_000
    assert settings.fetch_offset_num_retries == 3
    assert settings.fetch_offset_retry_interval_ms == 1_000


def test_option_names_are_case_insensitive_like_spark():
    settings = parse_options({**BASE, "STARTINGOFFSETS": "earliest", "maxoffsetspertrigger": "10"})
    assert settings.starting_offsets is StartingPoint.EARLIEST
    assert settings.max_offsets_per_trigger == 10


def test_all_options_parse():
    settings = parse_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "assign": '{"a":[0,1],"b":[2]}',
            "startingOffsets": '{"a":{"0":5,"1":-2},"b":{"2":-1}}',
            "failOnDataLoss": "false",
            "maxOffsetsPerTrigger": "100",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "30s",
            "minPartitions": "4",
            "maxRecordsPerPartition": "50",
            "includeHeaders": "true",
            "kafkaConsumer.pollTimeoutMs": "5000",
            "fetchOffset.numRetries": "0",
            "fetchOffset.retryIntervalMs": "100",
            "groupIdPrefix": "mine",
            "kafka.isolation.level": "read_committed",
            "backlog.enabled": "false",
            "backlog.eventsTopic": "ctl",
            "backlog.reenterLag": "1000",
            "backlog.maxOffsetsPerTrigger": "500000",
        }
    )
    assert settings.assign == (Bucket("a", 0), Bucket("a", 1), Bucket("b", 2))
    assert settings.starting_offsets == {Bucket("a", 0): 5, Bucket("a", 1): -2, Bucket("b", 2): -1}
    assert settings.max_trigger_delay_ms == 30_000
    assert settings.isolation_level.value == "read_committed"
    assert settings.backlog_max_offsets_per_trigger == 500_000


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"subscribe": "a"}, "'kafka.bootstrap.servers' is required"),
        ({"kafka.bootstrap.servers": "h:1"}, "exactly one of 'subscribe', 'subscribePattern' or 'assign'"),
        ({**BASE, "subscribePattern": "o.*"}, "exactly one of"),
        ({**BASE, "subscribe": " , "}, "option 'subscribe' must list at least one topic"),
        ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "(["}, "not a valid regular expression"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[0,1]"}, "option 'assign' must be a non-empty JSON object"),
        ({"kafka.bootstrap.servers": "h:1", "assign": '{"a":["x"]}'}, "must map to a list of partition numbers"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "{not json"}, "option 'assign' is not valid JSON"),
        ({**BASE, "startingOffsets": "beginning"}, "option 'startingOffsets' must be 'earliest', 'latest' or a JSON"),
        ({**BASE, "startingOffsets": '{"orders":{"0":-3}}'}, "offset -3 for orders-0 is not allowed"),
        ({**BASE, "startingOffsets": '{"orders":{"x":1}}'}, "partition 'x' of topic 'orders' is not a number"),
        ({**BASE, "startingOffsets": '{"orders":{"0":"1"}}'}, "must be a whole number"),
        ({**BASE, "startingTimestamp": "yesterday"}, "option 'startingTimestamp' must be a whole number"),
        ({**BASE, "startingOffsetsByTimestamp": '{"orders":{"0":-5}}'}, "must be >= 0"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "closest"}, "must be 'error' or 'latest'"),
        ({**BASE, "failOnDataLoss": "yes"}, "option 'failOnDataLoss' must be 'true' or 'false'"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, "option 'maxOffsetsPerTrigger' must be a positive whole number"),
        ({**BASE, "maxOffsetsPerTrigger": "1e6"}, "option 'maxOffsetsPerTrigger' must be a whole number"),
        ({**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "must not exceed 'maxOffsetsPerTrigger'"),
        ({**BASE, "maxTriggerDelay": "soon"}, "option 'maxTriggerDelay' must be a duration"),
        ({**BASE, "minPartitions": "-1"}, "option 'minPartitions' must be a positive whole number"),
        ({**BASE, "maxRecordsPerPartition": "0"}, "option 'maxRecordsPerPartition' must be a positive"),
        ({**BASE, "includeHeaders": "1"}, "option 'includeHeaders' must be 'true' or 'false'"),
        ({**BASE, "kafkaConsumer.pollTimeoutMs": "0"}, "option 'kafkaConsumer.pollTimeoutMs' must be a positive"),
        ({**BASE, "fetchOffset.numRetries": "-1"}, "option 'fetchOffset.numRetries' must be zero or a positive"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, "option 'kafka.auto.offset.reset' is not supported: set the source option 'startingOffsets'"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, "does not commit any offset"),
        ({**BASE, "kafka.key.deserializer": "x"}, "keys are always returned as bytes"),
        ({**BASE, "kafka.value.deserializer": "x"}, "values are always returned as bytes"),
        ({**BASE, "kafka.interceptor.classes": "x"}, "interceptors can make the source misbehave"),
        ({**BASE, "kafka.isolation.level": "serializable"}, "must be 'read_uncommitted' or 'read_committed'"),
        ({**BASE, "subscibe": "x"}, "unknown option 'subscibe'"),
        ({**BASE, "backlog.eventsTopic": "  "}, "option 'backlog.eventsTopic' must be a topic name, or 'none' for no control topic"),
        ({**BASE, "backlog.reenterLag": "-5"}, "option 'backlog.reenterLag' must be a positive"),
        ({**BASE, "kafka.sasl.jaas.config": "nonsense"}, "option 'kafka.sasl.jaas.config' must be one login module entry"),
    ],
)
def test_bad_options_name_the_option_and_what_is_allowed(options, fragment):
    with pytest.raises(ConfigError) as raised:
        parse_options(options)
    assert fragment in str(raised.value)


@pytest.mark.parametrize("option", ["endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"])
def test_ending_options_are_refused_for_a_stream_and_accepted_until_the_kind_of_read_is_known(option):
    value = {"endingOffsets": "latest", "endingTimestamp": "1700000000000",
             "endingOffsetsByTimestamp": '{"a": {"0": 1700000000000}}'}[option]
    with pytest.raises(ConfigError, match=f"option '{option}' is for batch queries only"):
        parse_options({**BASE, option: value}, read="stream")
    parse_options({**BASE, option: value})
    parse_options({**BASE, option: value}, read="batch")


@pytest.mark.parametrize("options, fragment", [
    ({"startingOffsets": "latest"}, "option 'startingOffsets' can't be 'latest' for a batch read"),
    ({"startingOffsets": '{"a": {"0": -1}}'}, "option 'startingOffsets' can't be -1 (latest) for a batch read: a-0"),
    ({"endingOffsets": "earliest"}, "option 'endingOffsets' can't be 'earliest' for a batch read"),
    ({"endingOffsets": '{"a": {"0": 5, "1": -2}}'}, "option 'endingOffsets' can't be -2 (earliest) for a batch read"),
    ({"endingOffsets": '{"a": {"0": -3}}'}, "offset -3 for a-0 is not allowed"),
    ({"snapshot.path": "/s"}, "option 'snapshot.path' is for streaming queries"),
])
def test_a_batch_read_refuses_what_sparks_batch_read_refuses(options, fragment):
    with pytest.raises(ConfigError) as raised:
        parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", **options}, read="batch")
    assert fragment in str(raised.value).replace(" (spark.read)", "")


def test_a_batch_read_starts_at_the_earliest_offsets_by_default():
    assert parse_options({**BASE}, read="batch").starting_offsets is StartingPoint.EARLIEST
    assert parse_options({**BASE}).starting_offsets is StartingPoint.LATEST


SECRET = "s3cr3t-Value"


def test_secrets_are_masked_everywhere_but_the_client_config():
    settings = parse_options(
        {**BASE, "kafka.sasl.password": SECRET, "kafka.ssl.key.password": SECRET + "2", "kafka.sasl.username": "bob"}
    )
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    assert SECRET not in str(dataclasses.asdict(settings)) and SECRET not in repr(settings.reader_config)
    assert settings.kafka.librdkafka(ClientRole.READER)["sasl.password"] == SECRET
    assert settings.kafka.librdkafka(ClientRole.READER)["sasl.username"] == "bob"
    assert settings.kafka.redact(f"auth failed for {SECRET}2 and {SECRET}") == "auth failed for *** and ***"
    assert pickle.loads(pickle.dumps(settings)).kafka.librdkafka(ClientRole.ADMIN)["ssl.key.password"] == SECRET + "2"


def test_java_jaas_config_becomes_librdkafka_credentials():
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="{SECRET}";'
    settings = parse_options({**BASE, "kafka.sasl.jaas.config": jaas, "kafka.sasl.mechanism": "PLAIN"})
    config = settings.kafka.librdkafka(ClientRole.READER)
    assert config["sasl.username"] == "alice" and config["sasl.password"] == SECRET
    assert "sasl.jaas.config" not in config
    assert SECRET not in repr(settings)


def test_error_about_secret_option_does_not_echo_it():
    with pytest.raises(ConfigError) as raised:
        parse_options({**BASE, "kafka.sasl.jaas.config": f"garbage {SECRET}"})
    assert SECRET not in str(raised.value)


def test_environment_never_supplies_source_options(monkeypatch):
    monkeypatch.setenv("FAIL_ON_DATA_LOSS", "false")
    monkeypatch.setenv("fail_on_data_loss", "false")
    assert parse_options(BASE).fail_on_data_loss is True


def test_settings_are_frozen():
    settings = parse_options(BASE)
    with pytest.raises(Exception):
        settings.fail_on_data_loss = False


@pytest.mark.parametrize(("option", "value"), [("subscribe", ""), ("subscribe", " , "), ("subscribePattern", " "),
                                                ("assign", "{}")])
def test_an_empty_subscription_is_named_before_missing_bootstrap_servers_as_in_spark(option, value):
    # Spark's KafkaSourceProvider.validateGeneralOptions checks the subscription's value first.
    with pytest.raises(ConfigError, match=f"^option '{option}'"):
        parse_options({option: value})


def test_catch_up_budgets_parse_spark_byte_strings_and_durations_and_unset_bytes_are_left_to_the_planner():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}
    # Unset: the planner sizes it from the driver's heap (tests/unit/split: ReadBudget.from_settings).
    assert parse_options(base).backlog_max_bytes_per_trigger is None
    assert parse_options(base).backlog_target_batch_duration_ms is None
    chosen = parse_options({**base, "backlog.maxBytesPerTrigger": "1g", "backlog.targetBatchDuration": "30 seconds"})
    assert chosen.backlog_max_bytes_per_trigger == 1 << 30 and chosen.backlog_target_batch_duration_ms == 30_000
    assert parse_options({**base, "backlog.maxBytesPerTrigger": "1048576"}).backlog_max_bytes_per_trigger == 1 << 20
    for bad in ("lots", "0", "-1m", "1.5g"):
        with pytest.raises(ConfigError, match="option 'backlog.maxBytesPerTrigger' must be"):
            parse_options({**base, "backlog.maxBytesPerTrigger": bad})


def test_a_query_sets_its_own_trigger_intervals_for_install():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}
    assert parse_options(base).backlog_low_latency_interval_ms is None
    chosen = parse_options({**base, "backlog.highThroughputInterval": "0 seconds", "backlog.lowLatencyInterval": "5s"})
    assert (chosen.backlog_high_throughput_interval_ms, chosen.backlog_low_latency_interval_ms) == (0, 5_000)
    with pytest.raises(ConfigError, match="option 'backlog.lowLatencyInterval' must be a duration"):
        parse_options({**base, "backlog.lowLatencyInterval": "soon"})


def test_settings_built_directly_refuse_none_for_an_option_with_a_default():
    settings = parse_options(BASE)
    with pytest.raises(ConfigError, match="option 'failOnDataLoss' must not be None"):
        dataclasses.replace(settings, fail_on_data_loss=None)
    assert dataclasses.replace(settings, max_offsets_per_trigger="7").max_offsets_per_trigger == 7


@pytest.mark.parametrize("off", ["none", "NONE", " None "])
def test_backlog_events_topic_none_turns_the_control_topic_off_and_survives_a_copy(off):
    """Issue 48: a cluster where writing is not wanted needs no refusal first."""
    settings = parse_options({**BASE, "backlog.eventsTopic": off})
    assert settings.backlog_events_topic is None and settings.backlog_enabled
    assert settings.reader_config.events_topic is None
    assert dataclasses.replace(settings, max_offsets_per_trigger=7).backlog_events_topic is None
    assert pickle.loads(pickle.dumps(settings)).backlog_events_topic is None
    assert parse_options({**BASE, "backlog.eventsTopic": "nonesuch"}).backlog_events_topic == "nonesuch"


# -- the order problems are reported in: Spark's KafkaSourceProvider -------------------------
# Each case has two problems; the one named must be the one Spark reports first.

BOOTSTRAP = {"kafka.bootstrap.servers": "h:1"}


def first_problem(options, read=None) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_options(options, read=read)
    return str(raised.value)


@pytest.mark.parametrize("option, value", [("endingOffsets", "latest"), ("endingTimestamp", "1700000000000"),
                                           ("endingOffsetsByTimestamp", '{"a": {"0": 1700000000000}}')])
def test_a_stream_is_told_about_its_ending_option_before_its_subscription(option, value):
    # validateStreamOptions refuses the ending options before validateGeneralOptions runs.
    assert first_problem({**BOOTSTRAP, option: value}, read="stream").startswith(f"option '{option}' is for batch")
    assert first_problem({option: value, "subscribe": " "}, read="stream").startswith(f"option '{option}'")


def test_a_stream_is_told_about_ending_offsets_before_ending_offsets_by_timestamp():
    options = {**BASE, "endingOffsetsByTimestamp": '{"a": {"0": 1}}', "endingOffsets": "latest"}
    assert first_problem(options, read="stream").startswith("option 'endingOffsets' is for batch")


def test_unknown_options_come_before_any_of_sparks_checks():
    # Spark ignores unknown options; a typo is this source's first report.
    assert first_problem({"endingOffsets": "latest", "subscibe": "a"}, read="stream").startswith("unknown option")


@pytest.mark.parametrize("options, named", [
    ({"startingOffsets": "latest"}, "option 'startingOffsets' can't be 'latest'"),
    ({"startingOffsets": '{"a": {"0": -1}}'}, "option 'startingOffsets' can't be -1"),
    ({"endingOffsets": "earliest"}, "option 'endingOffsets' can't be 'earliest'"),
    ({"endingOffsets": '{"a": {"0": -2}}'}, "option 'endingOffsets' can't be -2"),
    ({"startingOffsets": "first"}, "option 'startingOffsets' must be"),
    ({"endingTimestamp": "soon"}, "option 'endingTimestamp' must be"),
])
def test_a_batch_read_is_told_about_its_range_before_its_subscription(options, named):
    # validateBatchOptions reads both sides (getKafkaOffsetRangeLimit) before validateGeneralOptions.
    assert first_problem({**BOOTSTRAP, **options}, read="batch").startswith(named)


def test_a_streams_starting_offsets_are_read_after_its_subscription():
    # A stream's startingOffsets are read when the stream is built, after validateStreamOptions.
    assert first_problem({**BOOTSTRAP, "startingOffsets": "first"}, read="stream").startswith("exactly one of")


def test_a_batch_read_is_told_about_its_start_before_its_end():
    options = {**BASE, "startingOffsets": "latest", "endingOffsets": "earliest"}
    assert first_problem(options, read="batch").startswith("option 'startingOffsets'")


def test_a_batch_read_is_told_about_the_timestamp_strategy_before_its_start():
    # getKafkaOffsetRangeLimit parses startingOffsetsByTimestampStrategy before the starting options.
    options = {**BASE, "startingOffsetsByTimestampStrategy": "nearest", "startingOffsets": "latest"}
    assert first_problem(options, read="batch").startswith("option 'startingOffsetsByTimestampStrategy'")


@pytest.mark.parametrize("options", [
    {"startingTimestamp": "1700000000000", "startingOffsets": "latest"},
    {"startingOffsetsByTimestamp": '{"orders": {"0": 1700000000000}}', "startingOffsets": '{"orders": {"0": -1}}'},
    {"endingTimestamp": "1700000000000", "endingOffsets": "earliest"},
    {"endingOffsetsByTimestamp": '{"orders": {"0": 1700000000000}}', "endingOffsets": '{"orders": {"0": -2}}'},
])
def test_a_batch_read_checks_only_the_option_that_takes_precedence(options):
    # getKafkaOffsetRangeLimit: a timestamp wins over the offsets, which Spark then never reads.
    parse_options({**BASE, **options}, read="batch")


@pytest.mark.parametrize("options, named", [
    ({"startingOffsets": '{"orders": {"0": 5}}', "endingOffsets": '{"orders": {"0": 9, "1": 3}}'},
     "options 'startingOffsets' and 'endingOffsets' must name the same partitions; only in 'endingOffsets': orders-1"),
    ({"startingOffsets": '{"orders": {"0": 9}}', "endingOffsets": '{"orders": {"0": 5}}'},
     "the batch read starts after it ends for orders-0 (start 9, end 5)"),
    ({"startingOffsetsByTimestamp": '{"orders": {"0": 9}}', "endingOffsetsByTimestamp": '{"orders": {"1": 5}}'},
     "options 'startingOffsetsByTimestamp' and 'endingOffsetsByTimestamp' must name the same partitions"),
    ({"startingOffsetsByTimestamp": '{"orders": {"0": 9}}', "endingOffsetsByTimestamp": '{"orders": {"0": 5}}'},
     "the batch read starts after it ends for orders-0 (start 9, end 5)"),
])
def test_a_batch_reads_starting_and_ending_offsets_must_fit_together_before_kafka_is_asked(options, named):
    # checkOffsetLimitValidity, in createRelation, before any request to Kafka.
    assert named in first_problem({**BASE, **options}, read="batch")


def test_sentinels_are_not_compared_with_offsets():
    parse_options({**BASE, "startingOffsets": '{"orders": {"0": 9}}', "endingOffsets": '{"orders": {"0": -1}}'},
                  read="batch")


def test_the_number_of_subscriptions_comes_before_their_values():
    assert first_problem({**BOOTSTRAP, "subscribe": " ", "assign": "[]"}).startswith("exactly one of")


@pytest.mark.parametrize("option", ["minPartitions", "maxRecordsPerPartition"])
def test_partitioning_comes_after_the_subscription_and_before_the_kafka_options(option):
    assert first_problem({"kafka.bootstrap.servers": "h:1", option: "0"}).startswith("exactly one of")
    assert first_problem({"subscribe": "a", option: "0", "kafka.auto.offset.reset": "earliest"}).startswith(
        f"option '{option}' must be a positive")


def test_the_kafka_options_spark_refuses_are_reported_in_sparks_order():
    refused = ["auto.offset.reset", "key.deserializer", "value.deserializer", "enable.auto.commit",
               "interceptor.classes"]
    for n, key in enumerate(refused):
        options = {**BASE, **{f"kafka.{later}": "x" for later in refused[n:]}}
        assert first_problem(options).startswith(f"option 'kafka.{key}' is not supported"), key


def test_sparks_refusals_come_before_missing_bootstrap_servers_and_this_sources_own_after():
    assert first_problem({"subscribe": "a", "kafka.interceptor.classes": "x"}).startswith(
        "option 'kafka.interceptor.classes'")
    assert first_problem({"subscribe": "a", "kafka.enable.partition.eof": "true"}).startswith(
        "option 'kafka.bootstrap.servers' is required")


def test_missing_bootstrap_servers_come_before_the_trigger_limits():
    options = {"subscribe": "a", "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}
    assert first_problem(options).startswith("option 'kafka.bootstrap.servers' is required")


@pytest.mark.parametrize("other", [{"kafka.isolation.level": "serializable"}, {"backlog.maxBytesPerTrigger": "lots"},
                                   {"failOnDataLoss": "maybe"}, {"startingOffsets": "first"}])
def test_the_trigger_limits_come_before_every_other_value(other):
    options = {**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5", **other}
    assert first_problem(options).startswith("'minOffsetsPerTrigger' (10) must not exceed")


@pytest.mark.parametrize("options", [
    {"endingOffsets": "latest"},  # a stream: the ending option; a batch read: the subscription
    {"startingOffsets": "latest"},  # a batch read: its start; a stream: the subscription
    {"endingOffsets": "latest", "kafka.auto.offset.reset": "earliest", "subscribe": "a"},
])
def test_load_leaves_a_problem_to_the_reader_when_the_kind_of_read_decides_which_comes_first(options):
    assert parse_options_at_load(options) is None


@pytest.mark.parametrize("options, named", [
    ({}, "exactly one of"),
    ({"endingOffsets": "latest", "subscibe": "a"}, "unknown option 'subscibe'"),
    ({**BASE, "backlog.maxBytesPerTrigger": "lots"}, "option 'backlog.maxBytesPerTrigger'"),
])
def test_load_reports_a_problem_both_kinds_of_read_report_first(options, named):
    with pytest.raises(ConfigError, match=named):
        parse_options_at_load(options)


def test_load_parses_what_either_kind_of_read_accepts():
    assert parse_options_at_load({**BASE, "endingOffsets": "latest"}).ending_offsets is StartingPoint.LATEST


@pytest.mark.parametrize("options", [
    {"kafka.bootstrap.servers": "h:1"},
    {**BASE, "minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
    {**BASE, "backlog.reenterLag": "5"},
    {**BASE, "backlog.maxBytesPerTrigger": "lots"},
    {**BASE, "backlog.targetBatchDuration": "soon"},
])
def test_a_settings_error_is_raised_once_as_a_config_error(options):
    """Issue 47: not a ValueError turned into a ConfigError, or a ConfigError into a ValueError."""
    with pytest.raises(ConfigError) as raised:
        parse_options(options)
    assert raised.value.__cause__ is None and raised.value.__context__ is None
