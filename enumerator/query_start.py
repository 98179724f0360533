"""Where a new query starts reading (Flink's ``OffsetsInitializer``): ``startingTimestamp``,
else ``startingOffsetsByTimestamp``, else ``startingOffsets`` (Spark's precedence), and the
snapshot bootstrap of ``snapshot.path``.

Which process: the driver's planner worker, once per new query (a restart resumes from the
checkpoint and never comes here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from backlog_source.core.buckets import Bucket
from backlog_source.core.data_loss import report_data_loss
from backlog_source.core.errors import ConfigError, SnapshotError
from backlog_source.core.settings import EARLIEST, LATEST, SourceSettings, StartingPoint
from backlog_source.core.snapshot_manifest import Manifest, load_manifest
from backlog_source.enumerator.kafka_admin import OffsetsClient
from backlog_source.enumerator.state import SnapshotState

log = logging.getLogger(__name__)

#: Returns (filesystem, root, manifest) of the snapshot at a path; a fake in unit tests.
ManifestLoader = Callable[[str], tuple[object, str, Manifest]]


@dataclass(frozen=True)
class StartingPositions:
    """A new query's first positions; with ``snapshot.path``, the snapshot still to be read
    and the buckets whose whole backlog is their snapshot (nothing in the log after it)."""

    positions: dict[Bucket, int]
    snapshot: SnapshotState | None = None
    snapshot_only: frozenset[Bucket] = field(default_factory=frozenset)


class StartingOffsets:
    """Resolves the starting options against Kafka. Raises :class:`ConfigError` when they do
    not fit the subscription, :class:`~backlog_source.core.errors.DataLossError` for a start below the earliest offset
    (``failOnDataLoss=true``), :class:`SnapshotError` for an unusable snapshot."""

    def __init__(self, settings: SourceSettings, client: OffsetsClient, load: ManifestLoader = load_manifest) -> None:
        self._settings = settings
        self._client = client
        self._load = load

    def resolve(self, buckets: set[Bucket]) -> StartingPositions:
        positions = self._positions(buckets)
        path = self._settings.snapshot_path
        if path is None:
            return StartingPositions(positions)
        return self._bootstrap_from_snapshot(path, buckets, positions)

    def _positions(self, buckets: set[Bucket]) -> dict[Bucket, int]:
        settings = self._settings
        if not buckets:
            return {}
        if settings.starting_timestamp is not None:
            return self._for_timestamps("startingTimestamp", {b: settings.starting_timestamp for b in buckets})
        if settings.starting_offsets_by_timestamp is not None:
            by_timestamp = settings.starting_offsets_by_timestamp
            check_covers("startingOffsetsByTimestamp", by_timestamp, buckets)
            return self._for_timestamps("startingOffsetsByTimestamp", {b: by_timestamp[b] for b in buckets})
        starting = settings.starting_offsets
        if starting is StartingPoint.EARLIEST:
            return self._client.earliest_offsets(buckets)
        if starting is StartingPoint.LATEST:
            return self._client.latest_offsets(buckets)
        check_covers("startingOffsets", starting, buckets)
        return self._specific({b: starting[b] for b in buckets})

    def _specific(self, requested: Mapping[Bucket, int]) -> dict[Bucket, int]:
        earliest = self._client.earliest_offsets(requested.keys())
        latest = self._client.latest_offsets(requested.keys())
        positions = {}
        for bucket, offset in requested.items():
            if offset == EARLIEST:
                positions[bucket] = earliest[bucket]
            elif offset == LATEST:
                positions[bucket] = latest[bucket]
            elif offset < earliest[bucket]:
                positions[bucket] = self._earliest_or_data_loss(
                    f"option 'startingOffsets' asks for offset {offset} of {bucket}, but its earliest "
                    f"available offset is {earliest[bucket]}: records {offset}..{earliest[bucket] - 1} are gone",
                    earliest[bucket],
                )
            elif offset > latest[bucket]:
                raise ConfigError(
                    f"option 'startingOffsets' asks for offset {offset} of {bucket}, beyond its log end "
                    f"{latest[bucket]}; use -1 for latest"
                )
            else:
                positions[bucket] = offset
        return positions

    def _for_timestamps(self, option: str, timestamps: Mapping[Bucket, int]) -> dict[Bucket, int]:
        found = self._client.offsets_for_timestamps(timestamps)
        unmatched = sorted(b for b, offset in found.items() if offset is None)
        if unmatched and self._settings.starting_offsets_by_timestamp_strategy == "error":
            raise ConfigError(
                f"option '{option}': no record at or after the given timestamp in "
                f"{', '.join(f'{b} (timestamp {timestamps[b]})' for b in unmatched)}. Set "
                "startingOffsetsByTimestampStrategy=latest to start those partitions at their latest offset"
            )
        latest = self._client.latest_offsets(unmatched) if unmatched else {}
        return {b: (offset if offset is not None else latest[b]) for b, offset in found.items()}

    def _bootstrap_from_snapshot(self, path: str, buckets: set[Bucket],
                                 positions: dict[Bucket, int]) -> StartingPositions:
        """The buckets of the snapshot at ``path`` start at their ``log_offset``, the others
        as the starting options say."""
        _, _, manifest = self._load(path)
        topic = manifest.topic
        partitions = {b.partition for b in buckets if b.topic == topic}
        if not partitions:
            raise SnapshotError(
                f"option 'snapshot.path' holds a snapshot of topic {topic!r}, which this query does not read"
            )
        manifest.check_fits(topic, partitions)
        covered = [Bucket(topic, p) for p in sorted(manifest.partitions)]
        earliest, latest = self._client.earliest_offsets(covered), self._client.latest_offsets(covered)
        positions = dict(positions)
        pending: dict[Bucket, tuple[str, ...]] = {}
        snapshot_only: set[Bucket] = set()
        for bucket in covered:
            entry = manifest.partitions[bucket.partition]
            position = entry.log_offset
            if position > latest[bucket]:
                raise SnapshotError(
                    f"the snapshot continues {bucket} at offset {position}, beyond its log end {latest[bucket]}: "
                    "is it a snapshot of another cluster, or was the topic re-created?"
                )
            if position < earliest[bucket]:
                position = self._earliest_or_data_loss(
                    f"the snapshot continues {bucket} at offset {position}, but its earliest available offset is "
                    f"{earliest[bucket]}: records {position}..{earliest[bucket] - 1} are gone",
                    earliest[bucket], first_try="take a newer snapshot",
                )
            positions[bucket] = position
            pending[bucket] = entry.files
            if entry.rows > 0 and latest[bucket] <= position:
                snapshot_only.add(bucket)
        log.info("starting %d partition(s) of %s from snapshot %s at %s", len(covered), topic, manifest.snapshot_id, path)
        return StartingPositions(positions, SnapshotState(path, manifest.snapshot_id, pending), frozenset(snapshot_only))

    def _earliest_or_data_loss(self, message: str, earliest: int, first_try: str | None = None) -> int:
        """A start below the earliest available offset: raise :class:`~backlog_source.core.errors.DataLossError` under
        ``failOnDataLoss``, else log it and return ``earliest``."""
        report_data_loss(self._settings.fail_on_data_loss, message, instead=f"start at the earliest offset, {earliest}",
                         first_try=first_try)
        return earliest


def check_covers(option: str, given: Mapping[Bucket, int], buckets: set[Bucket]) -> None:
    """Raise :class:`ConfigError` unless ``given`` names exactly ``buckets`` (Spark: every
    subscribed partition must be listed, and no other)."""
    missing = sorted(buckets - given.keys())
    extra = sorted(given.keys() - buckets)
    if missing:
        raise ConfigError(
            f"option '{option}' must give every subscribed partition a value; missing: "
            f"{', '.join(map(str, missing))} (use -2 for earliest, -1 for latest)"
        )
    if extra:
        raise ConfigError(
            f"option '{option}' names partition(s) the subscription does not include: {', '.join(map(str, extra))}"
        )
