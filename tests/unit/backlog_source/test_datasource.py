"""The Spark adapter: translating offsets and read limits, pickling."""

import pickle

from backlog_source.core.buckets import Bucket
from backlog_source.core.settings import parse_options
from backlog_source.stream_reader import BacklogStreamReader
from backlog_source.enumerator import state_codec as offset_codec
from backlog_source.enumerator.state import SourceOffset
from backlog_source.split.batch_splits import plan_splits
from backlog_source.split.kafka_split import KafkaSplit

A0, A1 = Bucket("a", 0), Bucket("a", 1)
SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "maxRecordsPerPartition": "50"})


def test_partitions_translates_spark_offsets_to_the_enumerators_splits():
    # The planning itself is tested in tests/unit/split/test_batch_splits.py.
    start = SourceOffset("x", {A0: 0})
    end = SourceOffset("x", {A0: 120}, pending={A0: 120})
    reader = BacklogStreamReader(SETTINGS)
    splits = reader.partitions(offset_codec.encode(start), offset_codec.encode(end))
    assert splits == plan_splits(end.reads_since(start), SETTINGS) == reader.partitions(offset_codec.encode(start), offset_codec.encode(end))
    assert all(isinstance(s, KafkaSplit) for s in splits) and sum(s.records for s in splits) == 120


def test_reader_pickles_without_clients():
    reader = BacklogStreamReader(SETTINGS)
    _ = reader.enumerator  # creates lazily; no connection is made until used
    copy = pickle.loads(pickle.dumps(reader))
    # Executors get the narrow reader configuration, never the planner's settings or a client.
    assert copy.settings is None and copy._enumerator is None
    assert copy.reader_config == SETTINGS.reader_config
