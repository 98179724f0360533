"""The offsets a batch read (``spark.read.format("backlog")``) reads: from where the starting
options say to where the ending options say, resolved against Kafka once, when Spark plans
the read, as Spark's ``KafkaRelation`` resolves its ``startingOffsets``/``endingOffsets``.

Which process: the Python worker Spark starts on the driver to plan the read
(``DataSourceReader.partitions``). A batch read records no backlog boundary and publishes no
event: it is not a backlog, it is a range.
"""

from __future__ import annotations

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import ConfigError
from backlog_source.core.settings import LATEST, SourceSettings, StartingPoint
from backlog_source.enumerator.kafka_admin import OffsetsClient
from backlog_source.enumerator.query_start import StartingOffsets, check_covers
from backlog_source.enumerator.subscription import Subscription
from backlog_source.split.batch_splits import BatchReads


def batch_reads(settings: SourceSettings, client: OffsetsClient) -> BatchReads:
    """``[start, end)`` of every partition the subscription covers now. Raises
    :class:`ConfigError` when the options do not fit the partitions (a partition missing from
    a JSON, an ending offset past the log end, a start after the end),
    :class:`~backlog_source.core.errors.DataLossError` for a start below the earliest offset
    (``failOnDataLoss=true``), or what the Kafka client raises."""
    subscription = Subscription(settings, client)
    subscription.check_assigned_exist()
    buckets = set(subscription.covered().buckets)
    if not buckets:
        return BatchReads("", {}, {})
    start = StartingOffsets(settings, client).resolve(buckets).positions
    end = _ending(settings, client, buckets)
    backwards = sorted(b for b in buckets if start[b] > end[b])
    if backwards:
        described = ", ".join(f"{b} (start {start[b]}, end {end[b]})" for b in backwards)
        raise ConfigError(f"the batch read starts after it ends for {described}: check 'startingOffsets' "
                          "and 'endingOffsets' (or their timestamp forms)")
    return BatchReads("", start, end)


def _ending(settings: SourceSettings, client: OffsetsClient, buckets: set[Bucket]) -> dict[Bucket, int]:
    """Where each bucket's range ends: ``endingTimestamp``, else ``endingOffsetsByTimestamp``
    (a partition without a record at or after its timestamp ends at its latest offset, as in
    Spark), else ``endingOffsets`` (``latest``, or JSON with -1 for latest)."""
    if settings.ending_timestamp is not None:
        return _for_timestamps(client, {b: settings.ending_timestamp for b in buckets})
    if settings.ending_offsets_by_timestamp is not None:
        check_covers("endingOffsetsByTimestamp", settings.ending_offsets_by_timestamp, buckets)
        return _for_timestamps(client, {b: settings.ending_offsets_by_timestamp[b] for b in buckets})
    ending = settings.ending_offsets
    latest = client.latest_offsets(buckets)
    if ending is StartingPoint.LATEST:
        return latest
    assert isinstance(ending, dict), "check_batch_range refuses 'earliest'"
    check_covers("endingOffsets", ending, buckets)
    beyond = sorted(b for b in buckets if ending[b] != LATEST and ending[b] > latest[b])
    if beyond:
        # Records that do not exist yet would be waited for until kafkaConsumer.pollTimeoutMs.
        raise ConfigError("option 'endingOffsets' asks for offsets beyond the log end: "
                          + ", ".join(f"{b} (asked {ending[b]}, log end {latest[b]})" for b in beyond)
                          + "; use -1 for latest")
    return {b: latest[b] if ending[b] == LATEST else ending[b] for b in buckets}


def _for_timestamps(client: OffsetsClient, timestamps: dict[Bucket, int]) -> dict[Bucket, int]:
    found = client.offsets_for_timestamps(timestamps)
    unmatched = [b for b, offset in found.items() if offset is None]
    latest = client.latest_offsets(unmatched) if unmatched else {}
    return {b: offset if offset is not None else latest[b] for b, offset in found.items()}
