"""Snapshot splits: planned from the offsets, read straight from Parquet."""

import pyarrow as pa
import pyarrow.parquet as pq

from backlog_source.core.buckets import Bucket
from backlog_source.core.offset import SnapshotState, SourceOffset
from backlog_source.core.schema import arrow_schema
from backlog_source.core.settings import parse_options
from backlog_source.datasource import BacklogStreamReader
from backlog_source.reader.snapshot_reader import read_snapshot_split
from backlog_source.reader.split import KafkaSplit, SnapshotSplit

A0, A1 = Bucket("a", 0), Bucket("a", 1)
SETTINGS = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"})


def test_a_batch_that_clears_a_pending_snapshot_reads_it_and_a_replay_plans_the_same():
    snapshot = SnapshotState("/snap", "s", {A0: ("f0.parquet",), A1: ("f1.parquet",)})
    start = SourceOffset("id", {A0: 100, A1: 50}, backlog={A0: 120, A1: 50}, snapshot=snapshot)
    end = SourceOffset("id", {A0: 120, A1: 50}, backlog={A0: 120, A1: 50}, snapshot=SnapshotState("/snap", "s", {}))
    reader = BacklogStreamReader(SETTINGS)
    splits = reader.partitions(start.to_json(), end.to_json())
    assert splits == reader.partitions(start.to_json(), end.to_json())
    assert [type(s) for s in splits] == [KafkaSplit, SnapshotSplit, SnapshotSplit]
    snap0, snap1 = splits[1:]
    assert (snap0.files, snap0.log_offset, snap0.finishes_backlog) == (("f0.parquet",), 100, False)
    assert (snap1.files, snap1.log_offset, snap1.finishes_backlog) == (("f1.parquet",), 50, True)
    # Later batches plan no snapshot splits.
    later = SourceOffset("id", {A0: 130, A1: 50}, snapshot=SnapshotState("/snap", "s", {}))
    assert all(isinstance(s, KafkaSplit) for s in reader.partitions(end.to_json(), later.to_json()))


def test_snapshot_rows_come_back_in_the_query_schema_and_a_snapshot_only_bucket_reports_finished(tmp_path):
    schema = arrow_schema(False)
    table = pa.table({"key": [b"k1", b"k2"], "value": [b"v", b"w"], "topic": ["a", "a"], "partition": [1, 1],
                      "offset": [3, 7], "timestamp": [0, 0], "timestampType": [0, 0]}).cast(schema)
    pq.write_table(table, tmp_path / "f1.parquet")
    split = SnapshotSplit("a", 1, str(tmp_path), ("f1.parquet",), 50, boundary=50, source_id="src-snap")
    published = []
    with_headers = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", "includeHeaders": "true"}).reader_config
    batches = list(read_snapshot_split(split, with_headers, publish_event=lambda s, e: published.append(e) or True))
    assert batches[0].schema == arrow_schema(True) and batches[0].column("headers").to_pylist() == [None, None]
    assert [r["key"] for r in pa.Table.from_batches(batches).to_pylist()] == [b"k1", b"k2"]
    assert [(e.boundary_offset, e.reached_offset) for e in published] == [(50, 50)]
