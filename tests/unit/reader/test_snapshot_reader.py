"""Reading a snapshot split straight from Parquet: read_snapshot_split()."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from backlog_source.core.errors import SnapshotError
from backlog_source.core.schema import arrow_schema
from backlog_source.core.settings import parse_options
from backlog_source.reader.snapshot_reader import read_snapshot_split
from backlog_source.split.kafka_split import SnapshotSplit


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


def test_a_missing_file_names_the_file_and_the_bucket(tmp_path):
    split = SnapshotSplit("a", 1, str(tmp_path), ("data/x/part-0.parquet",), 50, boundary=50, source_id="src-snap")
    config = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"}).reader_config
    with pytest.raises(SnapshotError, match="snapshot file data/x/part-0.parquet of a-1 is missing"):
        list(read_snapshot_split(split, config, publish_event=lambda s, e: True))


def test_a_snapshot_split_the_driver_marked_not_to_publish_reports_nothing(tmp_path):
    table = pa.table({"key": [b"k1"], "value": [b"v"], "topic": ["a"], "partition": [1], "offset": [3],
                      "timestamp": [0], "timestampType": [0]}).cast(arrow_schema(False))
    pq.write_table(table, tmp_path / "f1.parquet")
    split = SnapshotSplit("a", 1, str(tmp_path), ("f1.parquet",), 50, boundary=50, source_id="src-silent",
                          publish_events=False)
    config = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a"}).reader_config
    published = []
    assert len(list(read_snapshot_split(split, config, publish_event=lambda s, e: published.append(e) or True))) == 1
    assert split.finishes_backlog and published == []
