"""The Spark adapter: translating offsets and read limits, pickling."""

import pickle

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import ConfigError
from backlog_source.core.schema import kafka_schema
from backlog_source.datasource import BacklogDataSource
from backlog_source.core.settings import parse_options
from backlog_source.stream_reader import BacklogStreamReader
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.state import BacklogState, SourceOffset
from backlog_source.split.batch_splits import plan_splits
from backlog_source.split.kafka_split import KafkaSplit
from backlog_source.enumerator.enumerator import Enumerator
from tests.fakes import FakeControlTopic, FakeOffsetsClient, FakeRecordSizes

A0, A1 = Bucket("a", 0), Bucket("a", 1)
SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxRecordsPerPartition": "50"})


def reader_over_fakes(control: FakeControlTopic) -> BacklogStreamReader:
    reader = BacklogStreamReader(SETTINGS)
    reader._enumerator = Enumerator(SETTINGS, FakeOffsetsClient(topics={"a": [(0, 120)]}), control,
                                    record_sizes=FakeRecordSizes())
    return reader


@pytest.mark.parametrize("refused", [False, True])
def test_partitions_translates_spark_offsets_to_the_enumerators_splits(refused):
    # The planning itself is tested in tests/unit/split/test_batch_splits.py.
    start = SourceOffset("x", {A0: 0})
    end = SourceOffset("x", {A0: 120}, backlog=BacklogState(pending={A0: 120}))
    reader = reader_over_fakes(FakeControlTopic(refused=refused))
    splits = reader.partitions(offset_codec.encode(start), offset_codec.encode(end))
    planned = plan_splits(end.reads_since(start), SETTINGS, publish_events=not refused)
    assert splits == planned == reader.partitions(offset_codec.encode(start), offset_codec.encode(end))
    assert all(isinstance(s, KafkaSplit) for s in splits) and sum(s.records for s in splits) == 120
    # The run's decision on the control topic reaches every task (a replayed batch asks it first).
    assert {s.publish_events for s in splits} == {not refused}


def test_reader_pickles_without_clients():
    reader = BacklogStreamReader(SETTINGS)
    _ = reader.enumerator  # creates lazily; no connection is made until used
    copy = pickle.loads(pickle.dumps(reader))
    # Executors get the narrow reader configuration, never the planner's settings or a client.
    assert copy.settings is None and copy._enumerator is None
    assert copy.reader_config == SETTINGS.reader_config


def test_load_leaves_to_each_reader_the_problem_spark_reports_first_for_its_kind():
    # Spark's format("kafka") tells a stream first that it has no end (validateStreamOptions),
    # a batch read that it has no subscription (validateGeneralOptions). load() does not know
    # which it is, so it raises neither, and each reader raises its own.
    source = BacklogDataSource({"kafka.bootstrap.servers": "h:1", "endingOffsets": "latest"})
    schema = source.schema()
    assert schema == kafka_schema(False)
    with pytest.raises(ConfigError, match="^option 'endingOffsets' is for batch queries only"):
        source.streamReader(schema)
    with pytest.raises(ConfigError, match="^exactly one of 'subscribe'"):
        source.reader(schema)


def test_load_raises_what_either_kind_of_read_would_report_first():
    with pytest.raises(ConfigError, match="^exactly one of 'subscribe'"):
        BacklogDataSource({"kafka.bootstrap.servers": "h:1"})


def test_the_schema_load_reports_follows_include_headers_when_the_problem_waits():
    source = BacklogDataSource({"kafka.bootstrap.servers": "h:1", "startingOffsets": "latest", "includeHeaders": "true"})
    assert source.schema() == kafka_schema(True)
    assert pickle.loads(pickle.dumps(source)).schema() == kafka_schema(True)


def test_offsets_spark_hands_back_are_parsed_once(monkeypatch):
    """Spark hands the planner's offsets back as new dicts (JSON through the JVM): the next
    batch's start and partitions(start, end). At ten thousand partitions each parse is tens of
    milliseconds of every batch, so an offset equal to one kept is not parsed again."""
    import json

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from backlog_source.enumerator.enumerator import Enumerator
    from tests.fakes import FakeClock, FakeControlTopic, FakeOffsetsClient, FakeRecordSizes

    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest"})
    client = FakeOffsetsClient(topics={"a": [(0, 100), (0, 50)]})
    reader = BacklogStreamReader(settings)
    reader._enumerator = Enumerator(settings, client, FakeControlTopic(), clock=FakeClock(),
                                    record_sizes=FakeRecordSizes())
    parsed = []
    decode = offset_codec.decode
    monkeypatch.setattr(offset_codec, "decode", lambda data: parsed.append(1) or decode(data))
    through_the_jvm = lambda offset: json.loads(json.dumps(offset))  # noqa: E731
    start = through_the_jvm(reader.initialOffset())
    end = through_the_jvm(reader.latestOffset(start, ReadAllAvailable()))
    splits = reader.partitions(start, end)
    client.append("a", 0, 10)
    following = reader.latestOffset(end, ReadAllAvailable())
    assert parsed == [] and sum(s.records for s in splits) == 150
    assert decode(following).positions == {A0: 110, A1: 50}
    assert len(reader._offsets) <= 4 and pickle.loads(pickle.dumps(reader))._offsets == []
    reader.partitions(offset_codec.encode(SourceOffset("x", {A0: 0})), end)  # an offset not kept is parsed
    assert len(parsed) == 1


def test_the_collector_is_held_off_while_a_batch_is_planned_and_on_again_after(monkeypatch):
    """core/gc_pause.py: the requests of a plan over many partitions make thousands of short-
    lived objects; the cyclic collector waits until the plan is done."""
    import gc

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from backlog_source.enumerator.enumerator import Enumerator
    from tests.fakes import FakeClock, FakeControlTopic, FakeOffsetsClient, FakeRecordSizes

    class Watching(FakeOffsetsClient):
        def describe_topics(self, topics):
            collector.append(("describe_topics", gc.isenabled()))
            return super().describe_topics(topics)

        def latest_offsets(self, buckets, known=None, sent=None):
            collector.append(("latest_offsets", gc.isenabled()))
            return super().latest_offsets(buckets, known, sent)

    collector = []
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest"})
    reader = BacklogStreamReader(settings)
    reader._enumerator = Enumerator(settings, Watching(topics={"a": [(0, 100)]}), FakeControlTopic(),
                                    clock=FakeClock(), record_sizes=FakeRecordSizes())
    assert gc.isenabled()
    start = reader.initialOffset()
    collector.clear()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert collector and all(enabled is False for _, enabled in collector), collector
    assert {name for name, _ in collector} == {"describe_topics", "latest_offsets"}
    assert gc.isenabled()
    import backlog_source.stream_reader as stream_reader

    plan_splits = stream_reader.plan_splits
    monkeypatch.setattr(stream_reader, "plan_splits",
                        lambda *a, **k: collector.append(("plan_splits", gc.isenabled())) or plan_splits(*a, **k))
    assert sum(s.records for s in reader.partitions(start, end)) == 100
    assert collector[-1] == ("plan_splits", False)
    assert gc.isenabled()


def test_each_latest_offset_starts_the_next_listing_once_its_answer_is_ready():
    """enumerator/listing_ahead.py: the subscription is listed for the next plan after the
    plan is done (on a thread of its own in the runner; here at once), the collector held off
    meanwhile as a plan holds it, and the topics the batch reads described first, for
    ``partitions()``."""
    import gc
    from concurrent.futures import Future

    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from backlog_source.enumerator.enumerator import Enumerator
    from backlog_source.enumerator.listing_ahead import ListingAhead
    from tests.fakes import FakeClock, FakeControlTopic, FakeOffsetsClient, FakeRecordSizes

    class Watching(FakeOffsetsClient):
        def describe_topics(self, topics):
            self.calls.append(f"collector {'on' if gc.isenabled() else 'off'}")
            return super().describe_topics(topics)

    def submit_now(listing):
        answer: Future = Future()
        answer.set_result(listing())
        return answer

    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "t.*", "backlog.minPollIntervalMs": "0"})
    client = Watching(topics={"t1": [(0, 10)], "t2": [(0, 10)]})
    reader = BacklogStreamReader(settings)
    reader._enumerator = Enumerator(settings, client, FakeControlTopic(), clock=FakeClock(),
                                    record_sizes=FakeRecordSizes(),
                                    listing_ahead=ListingAhead(settings, client, submit=submit_now))
    start = reader.initialOffset()
    client.append("t1", 0, 5)
    client.calls.clear()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert client.calls[-3:] == ["topic_names", "collector off", "describe_topics"]  # after the plan's own requests
    assert "latest_offsets" in client.calls[:-3] and gc.isenabled()
    client.calls.clear()
    # partitions() takes the description of t1 the listing made first, after the plan's offsets.
    assert sum(s.records for s in reader.partitions(start, end)) == 5 and client.calls == []
    client.append("t1", 0, 5)
    client.calls.clear()
    reader.latestOffset(end, ReadAllAvailable())
    assert client.calls[:2] == ["send_latest_offsets", "latest_offsets"]  # the listing taken ahead, not its own


def test_the_reported_latest_offsets_are_kafkas_log_ends_whether_or_not_the_batch_reaches_them():
    """Caught up, the batch just planned ends at the log ends and its encoded positions are
    reported as they are; a batch a limit cut short reports the log ends, not its end."""
    from tests.fakes import FakeClock

    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "startingOffsets": "earliest",
                              "backlog.minPollIntervalMs": "0", "maxOffsetsPerTrigger": "150"})
    client = FakeOffsetsClient(topics={"a": [(0, 100), (0, 50)]})
    reader = BacklogStreamReader(settings)
    reader._enumerator = Enumerator(settings, client, FakeControlTopic(), clock=FakeClock(),
                                    record_sizes=FakeRecordSizes())
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert reader.reportLatestOffset() == {"a": {"0": 100, "1": 50}} == end["positions"]
    client.append("a", 1, 1_000)
    cut_short = reader.latestOffset(end, reader.getDefaultReadLimit())
    assert offset_codec.decode(cut_short).positions == {A0: 100, A1: 200}
    assert reader.reportLatestOffset() == {"a": {"0": 100, "1": 1_050}}
