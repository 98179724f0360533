"""ConnectStarts: the wrapper on Spark Connect's writer comes and goes with the installations
that asked for it, and a recorded start's trigger is read from its protobuf."""

from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark.sql.connect.proto", reason="Spark Connect's client extras are not installed")

from pyspark.sql.connect.proto import commands_pb2  # noqa: E402
from pyspark.sql.connect.streaming.readwriter import DataStreamWriter  # noqa: E402

from backlog_source.mode_switch.connect_starts import ConnectStarts  # noqa: E402


def test_the_wrapper_is_there_while_any_installation_records_and_gone_after_the_last():
    original = DataStreamWriter._start_internal
    first, second = ConnectStarts(object()).begin(), ConnectStarts(object()).begin()
    assert DataStreamWriter._start_internal is not original
    first.end()
    assert DataStreamWriter._start_internal is not original
    second.end()
    second.end()  # idempotent
    assert DataStreamWriter._start_internal is original


def test_a_writer_of_another_session_is_not_recorded():
    starts = ConnectStarts(object())
    starts.record(SimpleNamespace(_session=object()), SimpleNamespace(id="q"))
    assert not starts.knows("q")


@pytest.mark.parametrize("trigger, expected", [
    ({}, 0),  # no trigger: Spark's default, ProcessingTime(0)
    ({"processing_time_interval": "5 seconds"}, 5_000),
    ({"processing_time_interval": "interval 250 milliseconds"}, 250),
    ({"available_now": True}, None),
    ({"once": True}, None),
    ({"continuous_checkpoint_interval": "1 second"}, None),
])
def test_the_recorded_trigger_is_read_from_the_protobuf(trigger, expected):
    starts = ConnectStarts(object())
    starts._writers["q"] = SimpleNamespace(_write_proto=commands_pb2.WriteStreamOperationStart(**trigger))
    assert starts.interval_ms("q") == expected
    assert starts.interval_ms("unknown") is None
