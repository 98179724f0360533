"""The names, units and attributes of the metrics this package exports (one place, so the
README's metrics table, the exporter and the tests agree).

Named after Flink's standard source metrics (FLIP-33: ``pendingRecords``, ``pendingBytes``,
``numRecordsIn``, ``numBytesIn``; FLIP-309: ``isProcessingBacklog``) in OpenTelemetry's
dotted lower-case form, and after OpenTelemetry's messaging conventions for the attributes
that have a name there (``messaging.destination.name`` is the topic,
``messaging.destination.partition.id`` the partition).
"""

from __future__ import annotations

from dataclasses import dataclass

METER = "backlog_source"


@dataclass(frozen=True)
class Instrument:
    name: str
    unit: str
    description: str


# -- per partition (attributes: query, source, topic, partition) -------------------------
PENDING_RECORDS = Instrument(
    "backlog.source.pending_records", "{record}",
    "Offsets of the partition not yet read: the latest offset when the last batch was planned less "
    "the batch's end (FLIP-33 pendingRecords; Spark's offsetsBehindLatest per partition)")
PENDING_BYTES = Instrument(
    "backlog.source.pending_bytes", "By",
    "pending_records times the bytes per offset measured for the last catch-up batch (FLIP-33 "
    "pendingBytes); reported only while that measurement exists")

# -- per query (attributes: query, source) ------------------------------------------------
PROCESSING_BACKLOG = Instrument(
    "backlog.source.processing_backlog", "1",
    "1 while some partition is still below its backlog boundary after the last batch, else 0 "
    "(FLIP-309 isProcessingBacklog)")
BACKLOG_DURATION = Instrument(
    "backlog.source.backlog.duration", "s",
    "Time since the current backlog phase began (its boundaries were recorded); 0 when not processing backlog")
CATCH_UP_BATCHES = Instrument(
    "backlog.source.catch_up_batches", "{batch}",
    "Batches that read some partition below its backlog boundary")
RECORDS_IN = Instrument(
    "backlog.source.records_in", "{record}", "Records read (Spark's numInputRows of the source; FLIP-33 numRecordsIn)")
BYTES_IN = Instrument(
    "backlog.source.bytes_in", "By",
    "Bytes of keys, values and headers planned for catch-up batches, from the record sizes measured where each "
    "starts (FLIP-33 numBytesIn); batches planned without a byte or time budget add nothing")
MODE = Instrument(
    "backlog.source.mode", "1",
    "1 for the mode the query's trigger runs in (attribute backlog.mode), 0 for the other; reported once a "
    "mode switch (install or start_backlog_aware) follows the query")
MODE_SWITCHES = Instrument(
    "backlog.source.mode_switches", "{switch}", "Trigger switches made, by the mode switched to (backlog.mode)")

ALL = (PENDING_RECORDS, PENDING_BYTES, PROCESSING_BACKLOG, BACKLOG_DURATION, CATCH_UP_BATCHES, RECORDS_IN, BYTES_IN,
       MODE, MODE_SWITCHES)

# -- attributes -----------------------------------------------------------------------------
QUERY_ID = "spark.streaming.query.id"
QUERY_NAME = "spark.streaming.query.name"  # only when the query has a name
SOURCE_ID = "backlog.source.id"
TOPIC = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"
MESSAGING_SYSTEM = "messaging.system"  # always "kafka" on partition series
MODE_ATTRIBUTE = "backlog.mode"
