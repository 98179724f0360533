"""ConnectStarts: the wrappers on Spark Connect's writer, query and query manager come and go
with the installations that asked for them, a recorded start's trigger is read from its
protobuf, and a user's stop of a recorded query reaches Spark and stops its lineage. The races
between a user's stop and a switch: test_install.py."""

from types import SimpleNamespace

import pytest

pytest.importorskip("pyspark.sql.connect.proto", reason="Spark Connect's client extras are not installed")

from pyspark.sql.connect.proto import commands_pb2  # noqa: E402
from pyspark.sql.connect.streaming.query import StreamingQuery, StreamingQueryManager  # noqa: E402
from pyspark.sql.connect.streaming.readwriter import DataStreamWriter  # noqa: E402

from backlog_source.mode_switch.connect_starts import ConnectStarts  # noqa: E402

WRAPPED = [(DataStreamWriter, "_start_internal"), (StreamingQuery, "stop"), (StreamingQueryManager, "get")]


def test_the_wrappers_are_there_while_any_installation_records_and_gone_after_the_last():
    originals = [getattr(owner, name) for owner, name in WRAPPED]
    first, second = ConnectStarts(object()).begin(), ConnectStarts(object()).begin()
    assert all(getattr(owner, name) is not original for (owner, name), original in zip(WRAPPED, originals))
    first.end()
    assert all(getattr(owner, name) is not original for (owner, name), original in zip(WRAPPED, originals))
    second.end()
    second.end()  # idempotent
    assert [getattr(owner, name) for owner, name in WRAPPED] == originals


class Client:
    """A Connect session's client: records each command it is sent and answers it empty."""

    def __init__(self):
        self.commands = []

    def execute_command(self, command):
        self.commands.append(command)
        return None, {"streaming_query_command_result": commands_pb2.StreamingQueryCommandResult()}, None


def stopped(client):
    """The (query id, run id) of each stop command the client sent."""
    return [(c.streaming_query_command.query_id.id, c.streaming_query_command.query_id.run_id)
            for c in client.commands if c.streaming_query_command.stop]


def test_a_users_stop_of_a_recorded_query_reaches_spark_and_ends_its_lineage_other_stops_pass_through():
    session = SimpleNamespace(client=Client())
    starts = ConnectStarts(session, keep=lambda writer: writer).begin()
    try:
        recorded, other = StreamingQuery(session, "q", "run-1"), StreamingQuery(session, "other", "run-9")
        starts.record(SimpleNamespace(_session=session), recorded)  # the user's start, as the wrapper records it
        other.stop()
        recorded.stop()
        assert stopped(session.client) == [("other", "run-9"), ("q", "run-1")]
        # The lineage is stopped by its user: a switch now stops and starts nothing.
        assert starts.replace(recorded, lambda: pytest.fail("a stopped query was started again")) is None
        assert len(stopped(session.client)) == 2
    finally:
        starts.end()


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
