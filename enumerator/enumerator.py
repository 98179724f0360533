"""The enumerator: decides what each micro-batch reads.

Which process: the Python worker Spark starts on the driver for the stream reader. Spark
keeps that worker for the life of the query and calls ``initialOffset``, ``latestOffset``,
``partitions`` and ``commit`` on one object, so in-memory state here lives as long as the
query run; anything that must survive a restart is in the offset dict
(:class:`~enumerator.offsets.SourceOffset`) instead.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from typing import Protocol

from backlog_source import span_names, telemetry
from backlog_source.buckets import Bucket
from backlog_source.errors import ConfigError, DataLossError
from backlog_source.settings import EARLIEST, LATEST, SourceSettings, StartingPoint
from enumerator.backlog import FOREIGN, HANDLED, BacklogState, record_boundaries
from enumerator.kafka_admin import OffsetsClient
from enumerator.offsets import SnapshotState, SourceOffset
from enumerator.phase_trace import Finish, advance
from enumerator.planner import lag, rate_limit
from events.channel import CONTROL_PARTITION, ControlMessages

log = logging.getLogger(__name__)

#: How long ``latestOffset`` may wait for the collector when a backlog phase ends.
PHASE_END_FLUSH_MS = 2_000


@dataclass(frozen=True)
class ReadBudget:
    """How much one batch may read, from Spark's read limit (see ``BacklogStreamReader``).

    ``max_records``: at most this many records in total (None: no cap).
    ``min_records``: skip the batch while fewer are available, unless ``maxTriggerDelay``
    has passed since the last batch (None: no minimum).
    ``backlog_max_records``: replaces ``max_records`` while the source is processing backlog
    as of this batch (after events, discovery and re-entry are applied), so a batch that
    enters backlog is already sized for it.
    """

    max_records: int | None = None
    min_records: int | None = None
    backlog_max_records: int | None = None

    def for_state(self, processing_backlog: bool) -> "ReadBudget":
        if processing_backlog and self.backlog_max_records is not None:
            return ReadBudget(self.backlog_max_records, self.min_records)
        return ReadBudget(self.max_records, self.min_records)


class ControlReader(Protocol):
    """Reads the control topic (``events.channel.ControlTopicReader``; a fake in tests)."""

    def read_from(self, position: int) -> ControlMessages: ...

    def close(self) -> None: ...


class Enumerator:
    """Plans offsets for one source of one query run. Not thread-safe; Spark calls it serially."""

    def __init__(
        self,
        settings: SourceSettings,
        client: OffsetsClient,
        control: ControlReader | None = None,
        *,
        clock: Callable[[], float] = time.time,
        snapshot_loader: Callable[[str], object] | None = None,
    ) -> None:
        if settings.backlog_enabled and control is None:
            raise ValueError("backlog tracking needs a control topic reader")
        self._settings = settings
        self._client = client
        self._control = control
        self._control_ready = False
        self._clock = clock
        self._available_now_target: dict[Bucket, int] | None = None
        # maxTriggerDelay counts from the start of this run, then from each batch.
        self._last_batch_at = clock()
        self._latest: dict[Bucket, int] = {}
        self._warned: set[str] = set()
        self._initial: SourceOffset | None = None
        # Returns (filesystem, root, Manifest) for snapshot.path; a fake in unit tests.
        self._snapshot_loader = snapshot_loader

    # ---------------------------------------------------------------- subscription

    def subscribed_buckets(self) -> set[Bucket]:
        """The buckets the subscription covers now (one metadata request)."""
        settings = self._settings
        if settings.assign is not None:
            return set(settings.assign)
        counts = self._client.partition_counts()
        if settings.subscribe is not None:
            topics = [t for t in settings.subscribe if t in counts]
            missing = sorted(set(settings.subscribe) - set(counts))
            if missing:
                self._warn_once(
                    f"missing:{missing}",
                    "subscribed topic(s) %s do not exist yet; the query reads them once they appear",
                    ", ".join(missing),
                )
        else:
            pattern = re.compile(settings.subscribe_pattern or "")
            topics = [t for t in counts if pattern.fullmatch(t) and t != settings.backlog_events_topic]
        return {Bucket(topic, p) for topic in topics for p in range(counts[topic])}

    # ---------------------------------------------------------------- Spark hooks

    def initial_offset(self) -> SourceOffset:
        """Where a new query starts: ``startingTimestamp``, else ``startingOffsetsByTimestamp``,
        else ``startingOffsets`` (Spark's precedence).

        Computed once per run: Spark calls ``initialOffset`` again when it runs the first
        batch (its start is not taken from the offset log), and both calls must agree.
        Raises :class:`ConfigError` when the starting options do not fit the subscription.
        """
        if self._initial is None:
            self._initial = self._compute_initial_offset()
        return self._initial

    def _compute_initial_offset(self) -> SourceOffset:
        buckets = self.subscribed_buckets()
        if self._settings.assign is not None:
            self._check_assigned_exist(buckets)
        positions = self._starting_positions(buckets)
        snapshot, snapshot_only = self._start_from_snapshot(buckets, positions) if self._settings.snapshot_path else (None, set())
        source_id = uuid.uuid4().hex
        if not self._settings.backlog_enabled:
            return SourceOffset(source_id=source_id, positions=positions, snapshot=snapshot)
        self._ensure_control_topic()
        # Events written before this query started are not ours: start at the log end.
        events_position = self._control_log_end()
        log_end = self._client.latest_offsets(buckets) if buckets else {}
        backlog = record_boundaries(positions, log_end, buckets)
        # A bucket with nothing in the log after its snapshot is in backlog until its
        # snapshot has been read: its boundary is the snapshot's log offset.
        backlog.update({b: positions[b] for b in snapshot_only})
        self._log_boundaries(source_id, backlog, positions)
        trace, _ = advance(None, source_id, backlog, {}, positions, self._now_ms())
        return SourceOffset(
            source_id=source_id, positions=positions, backlog=backlog, events_position=events_position, trace=trace,
            snapshot=snapshot,
        )

    def _start_from_snapshot(self, buckets: set[Bucket], positions: dict[Bucket, int]) -> tuple[SnapshotState, set[Bucket]]:
        """Start the snapshot's buckets at their ``log_offset`` (in ``positions``); returns the
        snapshot state and the buckets whose whole backlog is their snapshot.

        Raises :class:`~backlog_source.snapshot.SnapshotError` (no or bad manifest, another
        topic, unknown partitions, a log offset beyond the log end) or :class:`DataLossError`
        (a log offset below the earliest available offset, with ``failOnDataLoss=true``).
        """
        from backlog_source.snapshot.manifest import SnapshotError

        path = self._settings.snapshot_path
        assert path is not None
        if self._snapshot_loader is None:
            from backlog_source.snapshot.writer import load_manifest as loader
        else:
            loader = self._snapshot_loader
        _, _, manifest = loader(path)
        topic = manifest.topic
        partitions = {b.partition for b in buckets if b.topic == topic}
        if not partitions:
            raise SnapshotError(
                f"option 'snapshot.path' holds a snapshot of topic {topic!r}, which this query does not read"
            )
        manifest.check_fits(topic, partitions)
        covered = [Bucket(topic, p) for p in sorted(manifest.partitions)]
        earliest, latest = self._client.earliest_offsets(covered), self._client.latest_offsets(covered)
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
                    "Take a newer snapshot, or set failOnDataLoss=false", earliest[bucket],
                )
            positions[bucket] = position
            pending[bucket] = entry.files
            if entry.rows > 0 and latest[bucket] <= position:
                snapshot_only.add(bucket)
        log.info("starting %d partition(s) of %s from snapshot %s at %s", len(covered), topic, manifest.snapshot_id, path)
        return SnapshotState(path, manifest.snapshot_id, pending), snapshot_only

    def probe_initial_backlog(self) -> dict[Bucket, int]:
        """The boundaries a new query would record now, without creating anything (no
        control topic, no source id). Used to pick a new query's first trigger mode."""
        buckets = self.subscribed_buckets()
        positions = self._starting_positions(buckets)
        log_end = self._client.latest_offsets(buckets) if buckets else {}
        return record_boundaries(positions, log_end, buckets)

    def latest_offset(self, start: SourceOffset, budget: ReadBudget) -> SourceOffset:
        """The end of the next batch that starts at ``start``; ``start`` itself when there is
        nothing to read (Spark then runs no batch).

        Discovers new buckets (added at their earliest offset, read from the next batch on),
        handles vanished buckets and offsets that moved backwards per ``failOnDataLoss``, and
        applies ``budget``. Raises :class:`DataLossError` or
        :class:`~backlog_source.errors.KafkaUnavailableError`.
        """
        current = self.subscribed_buckets() if self._settings.assign is None else set(self._settings.assign)
        positions = dict(start.positions)
        state, events_position = start.backlog_state, start.events_position
        finishes: dict[Bucket, Finish] = {}  # why buckets left backlog in this call (for tracing)
        if self._settings.backlog_enabled:
            state, events_position = self._apply_events(start, finishes)
            # Safety net: `start` is the last committed end, so its positions are committed;
            # a bucket whose snapshot is still to be read has not reached anything yet.
            unread = start.snapshot.pending if start.snapshot else {}
            state, passed = state.finish_passed({b: o for b, o in start.positions.items() if b not in unread})
            for bucket in passed:
                finishes[bucket] = Finish(span_names.FINISHED_BY_POSITION, start.positions[bucket])
                log.warning(
                    "%s reached its backlog boundary %d by committed position without its "
                    "BacklogFinishEvent (lost or late); finished it anyway", bucket, start.backlog[bucket]
                )
        vanished = self._drop_vanished(positions, current)
        finishes.update({b: Finish(span_names.FINISHED_BY_VANISHED) for b in vanished})
        state = state.without(vanished)
        new_buckets = current - positions.keys()
        if new_buckets:
            earliest = self._client.earliest_offsets(new_buckets)
            for bucket in sorted(new_buckets):
                log.info("discovered %s; it is read from its earliest offset %d", bucket, earliest[bucket])
            positions.update(earliest)

        latest = self._client.latest_offsets(positions.keys()) if positions else {}
        self._latest = latest
        reset = self._handle_moved_backwards(positions, latest)
        finishes.update({b: Finish(span_names.FINISHED_BY_RESET) for b in reset})
        restarted = new_buckets | reset
        if self._settings.backlog_enabled:
            # Discovered and reset buckets get a boundary of their own; a recorded one never moves.
            fresh = record_boundaries(positions, latest, restarted)
            state = state.without(restarted).with_boundaries(fresh)
            self._log_boundaries(start.source_id, fresh, positions)
            was_pending = state.processing_backlog
            state = state.maybe_reenter(positions, latest, self._settings.backlog_reenter_lag)
            if state.processing_backlog and not was_pending:
                log.info("total lag exceeds backlog.reenterLag=%d: entering backlog again", self._settings.backlog_reenter_lag)
                self._log_boundaries(start.source_id, state.pending, positions)

        target = latest
        if self._available_now_target is not None:
            # Trigger.AvailableNow: never past what existed when the query started; buckets
            # that appeared later stay where they are.
            target = {b: min(latest[b], self._available_now_target.get(b, positions[b])) for b in positions}
            target = {b: max(target[b], positions[b]) for b in positions}

        # A bucket discovered or reset now stays at its new start offset in this batch:
        # partitions() reads [start, end) of buckets in the batch's start only, so advancing
        # it here would skip records. The next batch reads from there.
        target = {b: (positions[b] if b in restarted else target[b]) for b in positions}
        end_positions = self._apply_budget(positions, target, budget.for_state(state.processing_backlog))
        snapshot_unread = bool(start.snapshot and start.snapshot.pending)
        if end_positions == start.positions and state.pending == start.backlog and not snapshot_unread:
            # Nothing to read and no backlog change: no batch. Events read meanwhile (foreign,
            # duplicate, malformed) are re-read from the checkpointed position next time.
            return start
        trace = start.trace
        if state.pending != start.backlog:
            trace, finished_spans = advance(trace, start.source_id, state.pending, finishes, positions, self._now_ms())
            telemetry.export(finished_spans)
            if any(span.name == span_names.PHASE for span in finished_spans):
                # The phase's end triggers a mode switch, which stops this query and so ends
                # this process within milliseconds: export now (bounded), not on a timer.
                telemetry.flush(PHASE_END_FLUSH_MS)
        end = replace(
            start,
            positions=end_positions,
            backlog=state.pending,
            events_position=events_position,
            event_counts=state.counts,
            trace=trace,
            # This batch reads every snapshot still pending (see partitions()).
            snapshot=replace(start.snapshot, pending={}) if start.snapshot else None,
        )
        if end.positions != start.positions:
            self._last_batch_at = self._clock()
        return end

    def prepare_for_available_now(self) -> None:
        """Record the latest offsets now: an AvailableNow run reads up to them and stops."""
        buckets = self.subscribed_buckets()
        self._available_now_target = self._client.latest_offsets(buckets) if buckets else {}

    def report_latest(self) -> dict[Bucket, int]:
        """The latest offsets seen by the last ``latest_offset`` call (for progress reports)."""
        return dict(self._latest)

    def close(self) -> None:
        telemetry.flush()
        self._client.close()
        if self._control is not None:
            self._control.close()

    # ---------------------------------------------------------------- backlog events

    def _ensure_control_topic(self) -> None:
        """Create the control topic once per run; raises ControlTopicError naming the option."""
        if not self._control_ready:
            self._client.ensure_topic(self._settings.backlog_events_topic, 1)
            self._control_ready = True

    def _control_log_end(self) -> int:
        control = Bucket(self._settings.backlog_events_topic, CONTROL_PARTITION)
        return self._client.latest_offsets([control])[control]

    def _apply_events(self, start: SourceOffset, finishes: dict[Bucket, Finish]) -> tuple[BacklogState, int]:
        """Apply every control message since the checkpointed position to the backlog state;
        record in ``finishes`` the buckets it finished."""
        self._ensure_control_topic()
        assert self._control is not None
        messages = self._control.read_from(start.events_position)
        state = start.backlog_state
        for value in messages.values:
            state, outcome, event = state.on_message(value, start.source_id)
            if outcome == HANDLED and event is not None:
                finishes[event.bucket] = Finish(span_names.FINISHED_BY_EVENT, event.reached_offset)
                log.info(
                    "%s finished its backlog: boundary %d, reached %d", event.bucket, event.boundary_offset,
                    event.reached_offset,
                )
            elif outcome != FOREIGN:  # other queries' events on a shared topic are normal
                self._warn_once(
                    f"event:{outcome}", "ignoring %s message(s) on control topic %r (counted in the offset's "
                    "event_counts; logged once)", outcome, self._settings.backlog_events_topic,
                )
        return state, messages.next_position

    def _log_boundaries(self, source_id: str, boundaries: Mapping[Bucket, int], positions: Mapping[Bucket, int]) -> None:
        for bucket in sorted(boundaries):
            log.info(
                "source %s: %s is in backlog from %d to its boundary %d", source_id, bucket, positions[bucket],
                boundaries[bucket],
            )

    # ---------------------------------------------------------------- helpers

    def _apply_budget(
        self, positions: Mapping[Bucket, int], target: Mapping[Bucket, int], budget: ReadBudget
    ) -> dict[Bucket, int]:
        available = sum(lag(positions, target).values())
        if (
            budget.min_records is not None
            and self._available_now_target is None  # AvailableNow must reach its end
            and 0 < available < budget.min_records
            and (self._clock() - self._last_batch_at) * 1000 < self._settings.max_trigger_delay_ms
        ):
            return dict(positions)
        if budget.max_records is not None:
            return rate_limit(positions, target, budget.max_records)
        return {b: max(positions[b], target.get(b, positions[b])) for b in positions}

    def _drop_vanished(self, positions: dict[Bucket, int], current: set[Bucket]) -> list[Bucket]:
        """Fail, or drop buckets that no longer exist; returns the buckets dropped."""
        vanished = sorted(set(positions) - current)
        if not vanished:
            return []
        described = ", ".join(f"{b} (next offset {positions[b]})" for b in vanished)
        if self._settings.fail_on_data_loss:
            raise DataLossError(
                f"partition(s) {described} no longer exist; records not yet read from them may be "
                "lost. Set failOnDataLoss=false to continue without them"
            )
        log.warning("partition(s) %s no longer exist; continuing without them (failOnDataLoss=false)", described)
        for bucket in vanished:
            del positions[bucket]
        return vanished

    def _handle_moved_backwards(self, positions: dict[Bucket, int], latest: Mapping[Bucket, int]) -> set[Bucket]:
        """Fail, or reset buckets whose log end is now below their position to their earliest
        offset; returns the buckets reset."""
        moved = sorted(b for b in positions if latest[b] < positions[b])
        if not moved:
            return set()
        described = ", ".join(f"{b} (next offset {positions[b]}, log end now {latest[b]})" for b in moved)
        if self._settings.fail_on_data_loss:
            raise DataLossError(
                f"offsets moved backwards for {described}: the topic was deleted and re-created or "
                "truncated, so records may have been lost. Set failOnDataLoss=false to continue from "
                "the earliest offset"
            )
        earliest = self._client.earliest_offsets(moved)
        log.warning("offsets moved backwards for %s; continuing from the earliest offset (failOnDataLoss=false)", described)
        for bucket in moved:
            positions[bucket] = earliest[bucket]
        return set(moved)

    def _check_assigned_exist(self, buckets: set[Bucket]) -> None:
        counts = self._client.partition_counts()
        missing = sorted(b for b in buckets if b.partition >= counts.get(b.topic, 0))
        if missing:
            raise ConfigError(
                f"option 'assign' names partition(s) that do not exist: {', '.join(map(str, missing))}"
            )

    def _starting_positions(self, buckets: set[Bucket]) -> dict[Bucket, int]:
        settings = self._settings
        if not buckets:
            return {}
        if settings.starting_timestamp is not None:
            return self._positions_for_timestamps(
                "startingTimestamp", {b: settings.starting_timestamp for b in buckets}
            )
        if settings.starting_offsets_by_timestamp is not None:
            by_timestamp = settings.starting_offsets_by_timestamp
            self._check_covers("startingOffsetsByTimestamp", by_timestamp, buckets)
            return self._positions_for_timestamps(
                "startingOffsetsByTimestamp", {b: by_timestamp[b] for b in buckets}
            )
        starting = settings.starting_offsets
        if starting is StartingPoint.EARLIEST:
            return self._client.earliest_offsets(buckets)
        if starting is StartingPoint.LATEST:
            return self._client.latest_offsets(buckets)
        self._check_covers("startingOffsets", starting, buckets)
        return self._specific_positions({b: starting[b] for b in buckets})

    def _check_covers(self, option: str, given: Mapping[Bucket, int], buckets: set[Bucket]) -> None:
        missing = sorted(buckets - given.keys())
        extra = sorted(given.keys() - buckets)
        if missing:
            raise ConfigError(
                f"option '{option}' must give every subscribed partition a value; missing: "
                f"{', '.join(map(str, missing))} (use -2 for earliest, -1 for latest)"
            )
        if extra:
            raise ConfigError(
                f"option '{option}' names partition(s) the subscription does not include: "
                f"{', '.join(map(str, extra))}"
            )

    def _specific_positions(self, requested: Mapping[Bucket, int]) -> dict[Bucket, int]:
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
                    "Set failOnDataLoss=false to start at the earliest offset", earliest[bucket],
                )
            elif offset > latest[bucket]:
                raise ConfigError(
                    f"option 'startingOffsets' asks for offset {offset} of {bucket}, beyond its log end "
                    f"{latest[bucket]}; use -1 for latest"
                )
            else:
                positions[bucket] = offset
        return positions

    def _earliest_or_data_loss(self, message: str, remedy: str, earliest: int) -> int:
        """A start below the earliest available offset: raise :class:`DataLossError` under
        ``failOnDataLoss``, else log it and return ``earliest``."""
        if self._settings.fail_on_data_loss:
            raise DataLossError(f"{message}. {remedy}")
        log.warning("%s; starting at %d (failOnDataLoss=false)", message, earliest)
        return earliest

    def _positions_for_timestamps(self, option: str, timestamps: Mapping[Bucket, int]) -> dict[Bucket, int]:
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

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)
