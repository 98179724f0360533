"""The offsets a batch read (``spark.read.format("backlog")``) reads: from where the starting
options say to where the ending options say, resolved against Kafka once, when Spark plans
the read, as Spark's ``KafkaRelation.buildScan`` resolves its ``startingOffsets`` /
``endingOffsets`` (``KafkaOffsetReaderAdmin.getOffsetRangesFromUnresolvedOffsets``) and its
executors read them (``KafkaSourceRDD.compute``, ``KafkaDataConsumer.get``).

Which process: the Python worker Spark starts on the driver to plan the read
(``DataSourceReader.partitions``). A batch read records no backlog boundary and publishes no
event: it is not a backlog, it is a range.
"""

from __future__ import annotations

from collections.abc import Mapping

from backlog_source.core.buckets import Bucket
from backlog_source.core.data_loss import report_data_loss
from backlog_source.core.errors import ConfigError
from backlog_source.core.settings import EARLIEST, LATEST, SourceSettings, StartingPoint
from backlog_source.enumerator.kafka_admin import OffsetsClient
from backlog_source.enumerator.query_start import StartingOffsets, check_covers
from backlog_source.enumerator.subscription import Subscription
from backlog_source.split.batch_splits import BatchReads

#: What Spark's batch read does where this one warns under ``failOnDataLoss=false``.
_AS_SPARK = "as Spark's batch read does"


def batch_reads(settings: SourceSettings, client: OffsetsClient) -> BatchReads:
    """``[start, end)`` of every partition the subscription covers now.

    Raises :class:`ConfigError` for a subscribed or assigned topic that does not exist (Spark's
    ``describeTopics`` fails on it), for options that do not fit the partitions (a partition
    missing from a JSON, a start after the end), or what the Kafka client raises. Where Spark's
    executors find the records of a range missing, ``failOnDataLoss`` decides, as there
    (:func:`_within_the_log`); so it does for an assigned partition that does not exist."""
    buckets = _buckets(settings, client)
    if not buckets:
        return BatchReads("", {}, {})
    earliest = client.earliest_offsets(buckets)
    latest = client.latest_offsets(buckets)
    start = _starting(settings, client, buckets, earliest)
    end = _ending(settings, client, buckets, latest)
    backwards = sorted(b for b in buckets if start[b] > end[b])
    if backwards and _spark_cuts_ranges(settings, start, end):
        # KafkaOffsetRangeCalculator.getRanges drops a range whose size is not positive.
        end.update({b: start[b] for b in backwards})
    elif backwards:
        # KafkaSourceRDD.compute asserts the same, under either failOnDataLoss.
        described = ", ".join(f"{b} (start {start[b]}, end {end[b]})" for b in backwards)
        raise ConfigError(f"the batch read starts after it ends for {described}: check 'startingOffsets' "
                          "and 'endingOffsets' (or their timestamp forms)")
    start, end = _within_the_log(settings, start, end, earliest, latest)
    return BatchReads("", start, end)


def _spark_cuts_ranges(settings: SourceSettings, start: Mapping[Bucket, int], end: Mapping[Bucket, int]) -> bool:
    """Whether Spark's batch read would cut its ranges when it plans them
    (``KafkaOffsetReaderAdmin.shouldDivvyUpLargePartitions``: ``minPartitions`` above the
    number of partitions, or a range larger than ``maxRecordsPerPartition``). Then it resolves
    them first and ``KafkaOffsetRangeCalculator.getRanges`` drops those that start after they
    end, which read nothing; otherwise such a range fails the read in
    ``KafkaSourceRDD.compute``. Spark measures a range on its unresolved offsets: -2 for a
    start at the earliest offset, -1 for an end at the latest (timestamps are resolved)."""
    if settings.min_partitions is not None and settings.min_partitions > len(start):
        return True
    if settings.max_records_per_partition is None:
        return False
    starting, ending = settings.starting_offsets, settings.ending_offsets
    by_timestamp = (settings.starting_timestamp is not None or settings.starting_offsets_by_timestamp is not None,
                    settings.ending_timestamp is not None or settings.ending_offsets_by_timestamp is not None)

    def unresolved(bucket: Bucket) -> tuple[int, int]:
        first = start[bucket] if by_timestamp[0] or (isinstance(starting, dict) and starting[bucket] != EARLIEST) \
            else EARLIEST
        until = end[bucket] if by_timestamp[1] or (isinstance(ending, dict) and ending[bucket] != LATEST) else LATEST
        return first, until

    return any(until - first > settings.max_records_per_partition for first, until in map(unresolved, start))


def _buckets(settings: SourceSettings, client: OffsetsClient) -> set[Bucket]:
    """The partitions to read. A topic ``subscribe`` or ``assign`` names that does not exist
    fails the read, as Spark's ``ConsumerStrategy.assignedTopicPartitions`` fails in
    ``describeTopics`` (after ``fetchOffset.numRetries`` attempts): a backfill with a typo in
    a topic name must not read nothing without a word. A pattern that matches nothing reads
    nothing, as in Spark. ``assign``: a partition that does not exist, of a topic that does,
    is dropped by Spark (``AssignStrategy`` keeps the partitions the topic has); here that
    takes ``failOnDataLoss=false``, with a warning, and fails otherwise."""
    covered = Subscription(settings, client, wait_for_topics=False).covered()
    if covered.missing:
        option = "assign" if settings.assign is not None else "subscribe"
        raise ConfigError(f"option '{option}' names topic(s) that do not exist: {', '.join(covered.missing)}. "
                          "A batch read (spark.read) reads topics that exist, as Spark's does: check the name, "
                          "or create the topic first")
    if settings.assign is not None:
        absent = sorted(set(settings.assign) - covered.buckets)
        if absent:
            counts = ", ".join(f"{t} has {covered.topics[t].partitions}" for t in sorted({b.topic for b in absent}))
            report_data_loss(settings.fail_on_data_loss,
                             f"option 'assign' names partition(s) that do not exist: "
                             f"{', '.join(map(str, absent))} ({counts})",
                             instead=f"read the assigned partitions that exist, {_AS_SPARK}", error=ConfigError)
    return set(covered.buckets)


def _starting(settings: SourceSettings, client: OffsetsClient, buckets: set[Bucket],
              earliest: Mapping[Bucket, int]) -> dict[Bucket, int]:
    """Where each range starts (Spark's ``fetchPartitionOffsets(isStartingOffsets=true)``):
    ``startingTimestamp``, else ``startingOffsetsByTimestamp`` (resolved against Kafka),
    else ``startingOffsets``: ``earliest``, or JSON with -2 for earliest; a specific offset is
    taken as given, and :func:`_within_the_log` compares it with the log, as Spark's
    executors do. (``latest`` and -1 are refused by
    :func:`~backlog_source.core.settings.check_batch_range`.)"""
    starting = settings.starting_offsets
    if settings.starting_timestamp is not None or settings.starting_offsets_by_timestamp is not None:
        return StartingOffsets(settings, client).resolve(buckets).positions
    if starting is StartingPoint.EARLIEST:
        return {b: earliest[b] for b in buckets}
    if not isinstance(starting, dict):
        raise ConfigError("option 'startingOffsets' can't be 'latest' for a batch read (spark.read)")
    check_covers("startingOffsets", starting, buckets)
    return {b: earliest[b] if starting[b] == EARLIEST else starting[b] for b in buckets}


def _ending(settings: SourceSettings, client: OffsetsClient, buckets: set[Bucket],
            latest: Mapping[Bucket, int]) -> dict[Bucket, int]:
    """Where each range ends: ``endingTimestamp``, else ``endingOffsetsByTimestamp`` (a
    partition without a record at or after its timestamp ends at its latest offset, as in
    Spark), else ``endingOffsets`` (``latest``, or JSON with -1 for latest; a specific offset
    taken as given, for :func:`_within_the_log`)."""
    if settings.ending_timestamp is not None:
        return _for_timestamps(client, {b: settings.ending_timestamp for b in buckets})
    if settings.ending_offsets_by_timestamp is not None:
        check_covers("endingOffsetsByTimestamp", settings.ending_offsets_by_timestamp, buckets)
        return _for_timestamps(client, {b: settings.ending_offsets_by_timestamp[b] for b in buckets})
    ending = settings.ending_offsets
    if ending is StartingPoint.LATEST:
        return {b: latest[b] for b in buckets}
    if not isinstance(ending, dict):
        raise ConfigError("option 'endingOffsets' can't be 'earliest' for a batch read (spark.read)")
    check_covers("endingOffsets", ending, buckets)
    return {b: latest[b] if ending[b] == LATEST else ending[b] for b in buckets}


def _within_the_log(settings: SourceSettings, start: dict[Bucket, int], end: dict[Bucket, int],
                    earliest: Mapping[Bucket, int], latest: Mapping[Bucket, int]
                    ) -> tuple[dict[Bucket, int], dict[Bucket, int]]:
    """Each range cut to the records Kafka has, ``[earliest, log end)``.

    Spark plans a specific range as given and its executor finds out
    (``KafkaDataConsumer.get``): offsets below the earliest one are gone, offsets from the log
    end on answer out of range (after ``kafkaConsumer.pollTimeoutMs``). Under
    ``failOnDataLoss=true`` the read fails; under ``false`` it logs a warning and reads what
    is left of the range (``getEarliestAvailableOffsetBetween``), nothing when none is left.
    This source decides the same here, when it plans, with the same outcome and no wait; the
    warning names each partition and its offsets. An empty range (start equal to its end)
    reads nothing and checks nothing, as ``KafkaSourceRDD.compute`` skips it."""
    gone, absent = [], []
    for bucket in sorted(start):
        first, until = start[bucket], end[bucket]
        if first >= until:
            continue
        low, high = earliest[bucket], latest[bucket]
        if first < low:
            gone.append(f"{bucket} records {first}..{min(until, low) - 1} (earliest available offset {low})")
        if until > high:
            absent.append(f"{bucket} records {max(first, high)}..{until - 1} (log end {high})")
        start[bucket] = min(max(first, low), high)
        end[bucket] = max(min(until, high), start[bucket])
    if gone:
        report_data_loss(settings.fail_on_data_loss,
                         f"option 'startingOffsets' asks for records that are gone: {'; '.join(gone)}",
                         instead=f"skip them and read the rest of each range, {_AS_SPARK}")
    if absent:
        report_data_loss(settings.fail_on_data_loss,
                         f"option 'endingOffsets' asks for records beyond the log end, which do not exist: "
                         f"{'; '.join(absent)}", first_try="use -1 for latest",
                         instead=f"read up to the log end, {_AS_SPARK}", error=ConfigError)
    return start, end


def _for_timestamps(client: OffsetsClient, timestamps: dict[Bucket, int]) -> dict[Bucket, int]:
    found = client.offsets_for_timestamps(timestamps)
    unmatched = [b for b, offset in found.items() if offset is None]
    latest = client.latest_offsets(unmatched) if unmatched else {}
    return {b: offset if offset is not None else latest[b] for b, offset in found.items()}
