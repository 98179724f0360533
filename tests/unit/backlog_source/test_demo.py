"""The demo's pure parts: settings precedence, the summary numbers, the live view."""

import argparse
import signal

import pytest
from pydantic import ValidationError
from rich.console import Console

from backlog_source.core.buckets import Bucket
from backlog_source.demo.monitor import BatchRecord, BucketDrain, Snapshot
from backlog_source.demo.report import HIGH, LOW, mode_at, percentile, summarize
from backlog_source.demo.settings import DemoSettings, add_arguments, from_arguments
from backlog_source.demo.view import render
from backlog_source.mode_switch import Transition


def parse(argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_arguments(parser.parse_args(argv))


@pytest.fixture
def no_backlog_env(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    for name in list(__import__("os").environ):
        if name.startswith("BACKLOG_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_defaults_are_the_issue_sizes_on_the_embedded_broker(no_backlog_env):
    settings = parse([])
    assert (settings.backlog_records, settings.partitions, settings.live_records_per_second, settings.live_seconds) == (
        2_000_000, 8, 1_000, 60.0)
    assert settings.starts_broker and settings.seeding


def test_flags_beat_environment_which_beats_dotenv(no_backlog_env, tmp_path):
    (tmp_path / ".env").write_text("BACKLOG_PARTITIONS=3\nBACKLOG_TOPIC=from-dotenv\nBACKLOG_LIVE_RATE=7\n")
    no_backlog_env.setenv("BACKLOG_TOPIC", "from-env")
    no_backlog_env.setenv("BACKLOG_LIVE_RATE", "9")
    settings = parse(["--live-rate", "11"])
    assert (settings.partitions, settings.topic, settings.live_rate) == (3, "from-env", 11)


def test_a_real_cluster_is_not_seeded_unless_asked(no_backlog_env):
    cluster = parse(["--bootstrap-servers", "kafka:9092", "--topic", "orders"])
    assert not cluster.seeding and cluster.live_records_per_second == 0  # never writes unasked
    assert parse(["--bootstrap-servers", "kafka:9092", "--seed"]).seeding
    assert parse(["--bootstrap-servers", "kafka:9092", "--live-rate", "5"]).live_records_per_second == 5


def test_kafka_options_are_secret_and_need_key_value(no_backlog_env):
    settings = parse(["--option", "kafka.sasl.password=hunter2", "--option", "kafka.security.protocol=SASL_SSL"])
    assert settings.kafka_options["kafka.sasl.password"].get_secret_value() == "hunter2"
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings.model_dump())
    with pytest.raises(ValueError, match="--option expects KEY=VALUE, got 'novalue'"):
        parse(["--option", "novalue"])


@pytest.mark.parametrize("argv, field", [
    (["--partitions", "0"], "partitions"),
    (["--live-rate", "fast"], "live_rate"),
    (["--low-latency-interval", "soon"], "low_latency_interval"),
])
def test_bad_values_name_the_option(no_backlog_env, argv, field):
    with pytest.raises(ValidationError, match=field):
        parse(argv)


def test_catch_up_batches_are_sized_by_bytes_and_time_unless_told_otherwise(no_backlog_env):
    assert parse([]).source_options == {"backlog.targetBatchDuration": "10 seconds"}  # the byte budget: the source's
    assert parse(["--target-batch-duration", "off", "--backlog-max-bytes-per-trigger", "64m"]).source_options == {
        "backlog.maxBytesPerTrigger": "64m"}
    assert parse(["--backlog-max-offsets-per-trigger", "2500", "--max-offsets-per-trigger", "1000"]).source_options == {
        "backlog.targetBatchDuration": "10 seconds", "backlog.maxOffsetsPerTrigger": "2500",
        "maxOffsetsPerTrigger": "1000"}


@pytest.mark.parametrize("argv, field", [
    (["--target-batch-duration", "a while"], "target_batch_duration"),
    (["--backlog-max-bytes-per-trigger", "lots"], "backlog_max_bytes_per_trigger"),
])
def test_bad_batch_sizes_name_the_option(no_backlog_env, argv, field):
    with pytest.raises(ValidationError, match=field):
        parse(argv)


def test_help_documents_every_option():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = parser.format_help()
    for name in DemoSettings.model_fields:
        flag = "--option" if name == "kafka_options" else "--" + name.replace("_", "-")
        assert flag in text and f"BACKLOG_{name.upper()}" in text


# --------------------------------------------------------------------------- summary


def batch(batch_id, start, seconds, records, backlog, lag=0):
    positions = {Bucket("t", 0): 100}
    return BatchRecord(batch_id, "run", start, start + seconds, records, backlog, positions,
                       {Bucket("t", 0): 100 + lag})


def test_percentile_is_nearest_rank():
    assert percentile([], 0.5) is None
    assert percentile([3, 1, 2, 4], 0.5) == 2 and percentile(list(range(1, 101)), 0.99) == 99


def test_mode_follows_transitions_once_the_new_interval_applied():
    switch = Transition(HIGH, LOW, 3, at=100.0, method="restart", apply_seconds=2.0)
    assert [mode_at(t, HIGH, [switch]) for t in (99, 101, 102, 150)] == [HIGH, HIGH, LOW, LOW]


def test_summary_numbers():
    batches = [batch(0, 10, 5, 1000, True, lag=500), batch(1, 15, 2, 500, True), batch(2, 17, 1, 0, False),
               batch(3, 21, 0.5, 10, False), batch(4, 22, 0.4, 12, False)]
    switch = Transition(HIGH, LOW, 2, at=18.0, method="restart", apply_seconds=2.0, effective_seconds=3.0)
    summary = summarize(batches, [switch], HIGH, started_at=10.0,
                        live_latencies={HIGH: [4.0, 6.0], LOW: [1.0, 1.2, 0.8]},
                        records_written=1522, distinct_written=1522, records_read_range=1522, records_produced=1522)
    assert summary["drain_seconds"] == 8.0  # batch 2 (flag false) ended at 18
    assert summary["batches"] == {HIGH: 3, LOW: 2}
    assert (summary["switch_method"], summary["switch_apply_seconds"], summary["switch_effective_seconds"]) == (
        "restart", 2.0, 3.0)
    assert summary["switch_gap_seconds"] == pytest.approx(3.0)  # batch 2 ended at 18, batch 3 started at 21
    assert summary["live_latency_p50"] == {HIGH: 4.0, LOW: 1.0}
    assert summary["exactly_once"]
    assert not summarize(batches, [switch], HIGH, 10.0, {}, 1522, 1521, 1522, 1522)["exactly_once"]  # a duplicate
    assert not summarize(batches, [switch], HIGH, 10.0, {}, 1522, 1522, 1522, 1530)["exactly_once"]  # records missing
    assert summarize(batches, [switch], HIGH, 10.0, {}, 1522, 1522, 1522, None)["exactly_once"]  # a real cluster


def test_the_live_view_shows_mode_buckets_and_lag():
    snapshot = Snapshot([batch(0, 10, 1, 1000, True, lag=4242)],
                        {Bucket("t", 0): BucketDrain(0, 200, 100), Bucket("t", 1): BucketDrain(0, 50, 50, True)})
    console = Console(record=True, width=140)
    console.print(render(snapshot, HIGH, "draining", started_at=0.0, produced_live=77))
    text = console.export_text()
    assert "high-throughput" in text and "4,242" in text and "t-0" in text and "done" in text and "77" in text
    assert BucketDrain(0, 200, 100).fraction == 0.5 and BucketDrain(0, 0, 0).fraction == 1.0


@pytest.fixture
def stop_signals():
    """A demo's stop signals, their handlers put back after the test."""
    from backlog_source.demo.app import _StopSignals

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signals = _StopSignals()
    yield signals
    signals.restore()
    assert {s: signal.getsignal(s) for s in handlers} == handlers


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_kill_or_a_closed_terminal_before_spark_started_unwinds_with_128_plus_the_signal(stop_signals, signum):
    from backlog_source.demo.app import StopRequested

    stop_signals.catch_termination()
    with pytest.raises(StopRequested):
        signal.raise_signal(signum)
    assert stop_signals.exit_code == 128 + signum
    assert not stop_signals.requested.is_set()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_once_spark_runs_a_stop_signal_asks_for_an_orderly_stop_and_a_second_interrupts(stop_signals, signum):
    stop_signals.catch_termination()
    stop_signals.install()
    signal.raise_signal(signum)
    assert stop_signals.requested.is_set()
    assert stop_signals.exit_code == 128 + signum
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signum)


def test_ctrl_c_before_spark_started_is_pythons_own_keyboard_interrupt(stop_signals):
    stop_signals.catch_termination()
    assert signal.getsignal(signal.SIGINT) is not stop_signals._handle
    assert stop_signals.exit_code == 130


def _wrapped_by_a_c_extension(stop: BaseException) -> SystemError:
    """What CPython makes of a signal handler's exception raised while a C extension called
    back into Python (as confluent-kafka's ``create_topics`` does): a SystemError caused by it."""
    try:
        try:
            raise stop
        except BaseException as inner:
            raise SystemError("<built-in method create_topics> returned a result with an exception set") from inner
    except SystemError as wrapped:
        return wrapped


def test_a_stop_wrapped_by_a_c_extension_while_creating_the_topic_stops_the_seeding(no_backlog_env, monkeypatch):
    from backlog_source.demo import app
    from backlog_source.demo.app import StopRequested

    def create_topic(*_args):
        raise _wrapped_by_a_c_extension(StopRequested())

    def partition_count(*_args):
        raise AssertionError("seeding went on after the stop")

    monkeypatch.setattr(app, "create_topic", create_topic)
    monkeypatch.setattr(app, "_partition_count", partition_count)
    console = Console(record=True)
    with pytest.raises(StopRequested):
        app._seed(parse(["--bootstrap-servers", "127.0.0.1:9", "--seed"]), "127.0.0.1:9", console)
    assert "not created" not in console.export_text()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_a_library_wrapped_ends_the_demo_as_the_stop_not_as_a_failure(no_backlog_env, monkeypatch, signum):
    from backlog_source.demo import app

    def run_until_the_signal(settings, console, resources, stop_signals):
        try:
            signal.raise_signal(signum)
        except app.StopRequested as stop:
            raise _wrapped_by_a_c_extension(stop) from None

    monkeypatch.setattr(app, "_run", run_until_the_signal)
    console = Console(record=True)
    assert app.run(parse(["--output", "out"]), console) == 128 + signum
    assert "stopping: the producer" in console.export_text()


def test_a_failure_that_is_not_a_stop_still_fails_the_demo(no_backlog_env, monkeypatch):
    from backlog_source.demo import app

    def fails(*_args):
        raise SystemError("a library's own bug")

    monkeypatch.setattr(app, "_run", fails)
    with pytest.raises(SystemError, match="a library's own bug"):
        app.run(parse(["--output", "out"]), Console(record=True))


def test_interruption_in_finds_a_keyboard_interrupt_behind_a_chain_and_nothing_in_plain_failures():
    from backlog_source.demo.errors import interruption_in

    wrapped = _wrapped_by_a_c_extension(KeyboardInterrupt())
    assert isinstance(interruption_in(wrapped), KeyboardInterrupt)
    try:
        try:
            raise wrapped
        except SystemError:
            raise RuntimeError("handled badly")  # noqa: B904 (the implicit context is the point)
    except RuntimeError as outer:
        assert isinstance(interruption_in(outer), KeyboardInterrupt)
    assert interruption_in(SystemError("a library's own bug")) is None
    assert interruption_in(_wrapped_by_a_c_extension(ValueError("no"))) is None
