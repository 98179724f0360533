"""The enumerator: decides what each micro-batch reads, and the backlog state it leaves.

Which process: the Python worker Spark starts on the driver for the stream reader. Spark
keeps that worker for the life of the query run and calls ``initialOffset``,
``latestOffset``, ``partitions`` and ``commit`` on one object, so in-memory state here lives
as long as the run; anything that must survive a restart is in the offset dict
(:class:`~backlog_source.enumerator.state.SourceOffset`, encoded by :mod:`.state_codec`).

:meth:`Enumerator.latest_offset` is a chain of named steps, each returning new values:

1. :meth:`_settle`: the last committed batch's finishing buckets leave backlog (by their
   event, or by position), and their spans end; a catch-up batch's size reports are
   collected for the next plan.
2. :meth:`_refresh`: the subscription now (listed while the last batch ran, and verified:
   :mod:`.listing_ahead`), deleted, re-created (a changed topic id), vanished and new
   buckets, the latest offsets (one ListOffsets request, sent while the listing is asked
   and used when it finds the buckets already read unchanged) and offsets that moved
   backwards, under ``failOnDataLoss``.
3. :meth:`_enter_backlog`: boundaries for new and reset buckets, for every lagging bucket
   when this is a restart on an existing checkpoint, and on re-entry.
4. :meth:`_plan`: the target (latest, or AvailableNow's), the read limits of the backlog
   state (records; while processing backlog also bytes and time, :mod:`.catch_up`), the end
   positions, and which buckets this batch carries to their boundaries.
5. :meth:`_offset`: the next offset dict, or ``start`` when there is nothing to read.
"""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from collections.abc import Callable, Mapping, Set as AbstractSet
from dataclasses import dataclass, field, replace

from backlog_source.core import step_timings
from backlog_source.core.buckets import Bucket
from backlog_source.core.data_loss import report_data_loss
from backlog_source.core.errors import DataLossError
from backlog_source.core.offset_maps import keys_below, keys_changed, raised_to
from backlog_source.core.settings import SourceSettings
from backlog_source.core.snapshot_manifest import load_manifest
from backlog_source.core.tracing import exporter
from backlog_source.enumerator.boundaries import record_boundaries, reentry_boundaries, restart_boundaries
from backlog_source.enumerator.catch_up import UNMEASURED_BYTES_PER_OFFSET, catch_up_bytes, learn_rate
from backlog_source.enumerator.kafka_admin import OffsetsClient, TopicsDeletedError, TopicsRecreatedError
from backlog_source.enumerator.listing_ahead import ListingAhead
from backlog_source.enumerator.phase_spans import PhaseSpans
from backlog_source.enumerator.phase_trace import advance
from backlog_source.enumerator.query_start import ManifestLoader, StartingOffsets
from backlog_source.enumerator.record_sizes import KafkaRecordSizes, RecordSizes, reported_sizes
from backlog_source.enumerator.state import (
    BacklogState,
    BatchPlan,
    BoundedBy,
    Finish,
    FinishedBy,
    SourceOffset,
    TriggerIntervals,
)
from backlog_source.enumerator.subscription import Covered, Subscription
from backlog_source.events.control_topic import ControlTopic
from backlog_source.events.sizes_report import TopicSizes, split_size_reports
from backlog_source.split.batch_splits import BatchReads
from backlog_source.split.planning import ReadBudget, byte_limit, lag, rate_limit

log = logging.getLogger(__name__)

#: How often one batch is planned again when topics it asked about were re-created meanwhile
#: (a listing a moment out of date; a topic re-created again and again fails the batch).
_REPLANS = 3


def _id_changes(recorded: SourceOffset, topic_ids: Mapping[str, str], topics: list[str]) -> str:
    """``topic (topic id old -> new), ...`` for error messages: the ids ``recorded`` holds and
    the ones Kafka gives now."""
    return ", ".join(f"{t} (topic id {recorded.topic_ids[t]} -> {topic_ids[t]})" for t in topics)


class _ListingOutdated(Exception):
    """The listing taken ahead no longer matches Kafka for a topic this plan needs: the plan
    lists the subscription itself (:meth:`Enumerator._refresh`). Never leaves the planner."""


@dataclass(frozen=True)
class Settled:
    """Step 1's result: the backlog state after the last committed batch, and the record
    sizes its readers reported (per topic; empty unless it was a budgeted catch-up batch)."""

    backlog: BacklogState
    finishes: dict[Bucket, Finish]
    events_position: int
    sizes_read: dict[str, TopicSizes] = field(default_factory=dict)


@dataclass(frozen=True)
class View:
    """Step 2's result: what this batch starts from and what Kafka has now.

    ``read_from``: each bucket's first offset in this batch (the last position, or
    ``starts`` for a bucket discovered or reset now). ``restarted``: those buckets.
    """

    read_from: dict[Bucket, int]
    starts: dict[Bucket, int]
    latest: dict[Bucket, int]
    gone: frozenset[Bucket] = field(default_factory=frozenset)
    topic_ids: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """Step 4's result: the batch's end positions, the backlog state once it is read, and how
    it was sized."""

    end: dict[Bucket, int]
    backlog: BacklogState
    batch: BatchPlan


class Enumerator:
    """Plans offsets for one source of one query run. Not thread-safe; Spark calls it serially."""

    def __init__(
        self,
        settings: SourceSettings,
        client: OffsetsClient,
        control: ControlTopic | None = None,
        *,
        clock: Callable[[], float] = time.time,
        snapshot_loader: ManifestLoader = load_manifest,
        record_sizes: RecordSizes | None = None,
        listing_ahead: ListingAhead | None = None,
    ) -> None:
        """``control`` is the control topic (None: ``backlog.eventsTopic=none``, or backlog
        tracking off). ``clock``, ``snapshot_loader`` and ``record_sizes`` are replaced by unit
        tests only (record sizes are measured with a consumer of the run's own, created on
        first use). ``listing_ahead``: the subscription listed while Spark runs each batch,
        for the next plan (:mod:`.listing_ahead`; None: every plan lists it itself). Closed
        with this object."""
        self._settings = settings
        self._client = client
        self._tracking = settings.backlog_enabled
        # None: no control topic. Tracking never depends on it: the plan and the committed
        # positions decide every boundary and finish; events only attribute finishes, and size
        # reports only refine the record sizes a sample gives (ControlTopic.usable).
        self._control = control if settings.backlog_enabled else None
        self._clock = clock
        self._subscription = Subscription(settings, client)
        self._listing_ahead = listing_ahead
        # The topics the last plan reads records from (described again after its offsets were
        # answered: _note_reading), the end of the batch it planned (None: it planned none),
        # and the end of the batch whose listing ahead describes them.
        self._reading: frozenset[str] = frozenset()
        self._last_end: SourceOffset | None = None
        self._verifying: SourceOffset | None = None
        self._starting = StartingOffsets(settings, client, snapshot_loader)
        self._initial: SourceOffset | None = None
        self._resumed: bool | None = None  # decided by the run's first latest_offset call
        self._available_now_target: dict[Bucket, int] | None = None
        self._available_now_topic_ids: dict[str, str] = {}
        # maxTriggerDelay counts from the last trigger that ran; None: none yet in this run,
        # so the first runs whatever minOffsetsPerTrigger says (Spark starts its clock at 0).
        self._last_trigger_at: float | None = None
        self._latest: dict[Bucket, int] = {}
        self._settled: tuple[SourceOffset, Settled] | None = None
        self._spans = PhaseSpans()
        self._quiet: tuple[SourceOffset, float] | None = None  # (start, until) after a plan found nothing
        self._sizes = record_sizes if record_sizes is not None else KafkaRecordSizes(
            settings.kafka, include_headers=settings.include_headers)
        # The last batch planned with a measured size: (its end, when it was planned, its
        # bytes); the next plan from that end learns the batch's throughput from it.
        self._last_planned: tuple[SourceOffset, float, int] | None = None
        self._learned: tuple[SourceOffset, float | None] | None = None  # the rate learnt at a start

    # ---------------------------------------------------------------- Spark hooks

    def initial_offset(self) -> SourceOffset:
        """Where a new query starts, with a boundary for every bucket that has records to
        read. Computed once per run: Spark calls ``initialOffset`` again when it runs the
        first batch, and both calls must agree. Raises :class:`ConfigError` when the
        starting options do not fit the subscription."""
        if self._initial is None:
            self._initial = self._compute_initial_offset()
        return self._initial

    def _compute_initial_offset(self) -> SourceOffset:
        self._subscription.check_assigned_exist()
        covered = self._subscription.covered()
        buckets = set(covered.buckets)
        start = self._starting.resolve(buckets)
        # In bucket order: every later map of the query's offsets follows this one's order,
        # and encoding one sorts it (core/buckets.py, to_nested) in one pass, not 10,000 log steps.
        positions = dict(sorted(start.positions.items()))
        source_id = uuid.uuid4().hex
        if not self._tracking:
            return SourceOffset(source_id=source_id, positions=positions, snapshot=start.snapshot,
                                topic_ids=covered.topic_ids, intervals=self._intervals())
        # Events written before this query are not ours (None: no control topic to read).
        opened = self._control.open() if self._control is not None else None
        events_position = opened if opened is not None else 0
        log_end = self._client.latest_offsets(buckets) if buckets else {}
        pending = record_boundaries(positions, log_end, buckets)
        # A bucket with nothing in the log after its snapshot is in backlog until its
        # snapshot has been read: its boundary is the snapshot's log offset.
        pending.update({b: positions[b] for b in start.snapshot_only})
        self._log_boundaries(source_id, pending, positions)
        trace, _ = advance(None, source_id, pending, {}, positions, self._now_ms())
        return SourceOffset(source_id=source_id, positions=positions, backlog=BacklogState(pending),
                            events_position=events_position, trace=trace, snapshot=start.snapshot,
                            topic_ids=covered.topic_ids, intervals=self._intervals())

    def latest_offset(self, start: SourceOffset, budget: ReadBudget) -> SourceOffset:
        """The end of the next batch that starts at ``start``; ``start`` itself when there
        is nothing to read (Spark then runs no batch). ``budget`` is what Spark's read limit
        allows (:meth:`ReadBudget.from_limit`); the batch gets the part of it that fits its
        backlog state, and re-entry is judged by it. See the module docstring for the steps.

        Raises :class:`DataLossError`, :class:`~backlog_source.core.errors.KafkaUnavailableError`
        or :class:`~backlog_source.core.errors.ControlTopicError`.
        """
        if self._quiet is not None and self._clock() < self._quiet[1] and self._quiet[0] == start:
            return start  # found nothing a moment ago: no request (backlog.minPollIntervalMs)
        if self._resumed is None:
            # The run's first plan: a start this run did not create comes from a checkpoint.
            self._resumed = self._initial is None or start.source_id != self._initial.source_id
            restart = self._resumed
        else:
            restart = False
        end = self._plan_next(start, budget, restart)
        self._last_end = end if end is not start else None  # start itself: no batch (_offset)
        if end != start and end.plan is not None and end.plan.bytes:
            self._last_planned = (end, self._clock(), end.plan.bytes)
        quiet_ms = self._settings.backlog_min_poll_interval_ms
        self._quiet = (start, self._clock() + quiet_ms / 1000) if quiet_ms and end == start else None
        return end

    def _plan_next(self, start: SourceOffset, budget: ReadBudget, restart: bool) -> SourceOffset:
        with step_timings.step("driver.settle"):
            settled = self._settle(start)
        with step_timings.step("driver.refresh"):
            view = self._refresh(start)
        with step_timings.step("driver.plan"):
            backlog = self._enter_backlog(start, settled.backlog, view, restart, budget)
            plan = self._plan(start, view, backlog, budget, settled.sizes_read)
            return self._offset(start, settled, view, plan)

    def prepare_for_available_now(self) -> None:
        """Record the latest offsets now: an AvailableNow run reads up to them and stops."""
        covered = self._subscription.covered()
        self._available_now_target = self._client.latest_offsets(covered.buckets) if covered.buckets else {}
        self._available_now_topic_ids = covered.topic_ids

    def publishes_events(self) -> bool:
        """Whether this run's readers publish control events: the query has a control topic
        and may use it (asked of Kafka on the run's first question, then kept: see
        :attr:`ControlTopic.usable`). What ``partitions`` tells every split."""
        return self._control is not None and self._control.usable

    def report_latest(self) -> dict[Bucket, int]:
        """The latest offsets seen by the last ``latest_offset`` call (for progress reports)."""
        return dict(self._latest)

    def close(self) -> None:
        exporter.flush()
        if self._listing_ahead is not None:
            self._listing_ahead.close()
        self._client.close()
        self._sizes.close()

    # ---------------------------------------------------------------- step 1: settle

    def _settle(self, start: SourceOffset) -> Settled:
        """The backlog state once the batch that ended at ``start`` has committed, and what its
        readers reported. The control topic is read only when that batch carried a bucket to
        its boundary (the only time an event can matter) or was planned with measured record
        sizes (its readers report what they read), once per ``start``."""
        if self._settled is not None and self._settled[0] == start:
            return self._settled[1]
        messages, events_position = [], start.events_position
        committed = start.log_positions
        reported = start.plan is not None and start.plan.bytes is not None
        if self._control is not None and (reported or start.backlog.finishing
                                          or any(committed.get(b, -1) >= o for b, o in start.backlog.pending.items())):
            read = self._control.read_from(start.events_position)  # nothing when it is not usable
            messages, events_position = read.values, read.next_position
        messages, sizes_read = split_size_reports(messages, start.source_id)
        backlog, finishes = start.backlog.settle(messages, start.source_id, committed)
        boundaries = start.boundaries  # a merge of two dicts: once, not per bucket
        confirmed = self.publishes_events() if finishes else False
        for bucket, finish in finishes.items():
            how = "its BacklogFinishEvent" if finish.by is FinishedBy.EVENT else (
                "its committed position (the event was lost or late)" if confirmed else "its committed position")
            log.info("%s finished its backlog (boundary %d), by %s", bucket, boundaries[bucket], how)
        settled = Settled(backlog, finishes, events_position, sizes_read)
        self._settled = (start, settled)
        return settled

    # ---------------------------------------------------------------- step 2: refresh

    def _refresh(self, start: SourceOffset) -> View:
        """The buckets this batch reads and what Kafka has now. Under ``failOnDataLoss``
        a vanished bucket, a re-created topic or offsets that moved backwards fail the
        query; otherwise the bucket is dropped, or read again from its earliest offset.

        The listing is the one taken ahead while the last batch ran (:mod:`.listing_ahead`)
        when there is one; when it shows a topic read so far gone or re-created, the plan
        lists the subscription itself: every data-loss decision is made on the plan's own
        listing, never on one taken ahead. A topic re-created after the listing and before
        the offsets request is caught before the batch reads it (:meth:`confirm_reads`).

        A topic deleted between listing it and asking its offsets
        (:class:`TopicsDeletedError`) is handled as if the listing had not had it; one
        re-created with fewer partitions in that time (:class:`TopicsRecreatedError`) is
        planned again from a fresh listing, at most :data:`_REPLANS` times."""
        deleted: set[str] = set()
        replans = 0
        with step_timings.step("driver.refresh.listed_ahead"):  # the wait for it, if it has not ended
            listed_ahead = self._listing_ahead.take() if self._listing_ahead is not None else None
        while True:
            try:
                return self._refresh_once(start, deleted, listed_ahead)
            except _ListingOutdated as exc:
                log.debug("the listing taken ahead is out of date (%s); listing again", exc)
            except TopicsDeletedError as exc:
                if set(exc.topics) <= deleted:
                    raise  # the same topics again: not a listing out of date
                log.info("topic(s) %s deleted while this batch was planned", ", ".join(exc.topics))
                deleted.update(exc.topics)
            except TopicsRecreatedError as exc:
                replans += 1
                if replans > _REPLANS:
                    raise
                log.info("topic(s) %s re-created while this batch was planned; planning it again",
                         ", ".join(exc.topics))
            listed_ahead = None

    def _refresh_once(self, start: SourceOffset, deleted: set[str], listed_ahead: Covered | None) -> View:
        positions = dict(start.positions)
        # The log ends of the buckets already read are asked while the listing is: used only
        # when the listing finds exactly those buckets under the same topic ids, which it would
        # have found had it come first, so the two requests cost one round trip instead of two.
        with step_timings.step("driver.refresh.send"):
            sent = self._client.send_latest_offsets(positions.keys()) if positions else None
        with step_timings.step("driver.refresh.subscription"):
            covered = listed_ahead if listed_ahead is not None else self._subscription.covered()
        topic_ids = {t: i for t, i in covered.topic_ids.items() if t not in deleted}
        current = frozenset(b for b in covered.buckets if b.topic not in deleted) if deleted else covered.buckets
        target = self._available_now_target
        if target is not None:
            current &= target.keys() | positions.keys()  # partitions created later wait for the next run
        # The common case, one comparison instead of two set differences of every bucket.
        unchanged_buckets = positions.keys() == current
        if listed_ahead is not None and (self._changed_topics(start, positions, topic_ids) or (
                not unchanged_buckets and positions.keys() - current)):
            raise _ListingOutdated("a topic read gone or re-created")
        recreated = self._recreated(start, positions, topic_ids, target)
        for bucket in recreated:
            del positions[bucket]
        gone = [] if unchanged_buckets else self._vanished(positions, current, target)
        for bucket in gone:
            del positions[bucket]
        new = current - positions.keys() if recreated or not unchanged_buckets else frozenset()
        starts = self._client.earliest_offsets(new) if new else {}
        read_from = {**positions, **starts}
        with step_timings.step("driver.refresh.latest_offsets"):
            # Audited against the positions already read: a log end below one is asked again
            # before it counts as data loss.
            unchanged = not recreated and not gone and not new
            latest = self._client.latest_offsets(read_from.keys(), known=positions,
                                                 sent=sent if unchanged else None) if read_from else {}
        self._note_reading(start, topic_ids, read_from, latest)
        for bucket in sorted(new):
            log.info("discovered %s; it is read from its earliest offset %d", bucket, starts[bucket])
        if target is not None:
            self._verify_available_now(target, latest, [b for b in gone if b in target],
                                       [b for b in recreated if topic_ids[b.topic] != self._available_now_topic_ids.get(b.topic)])
        starts.update(self._moved_backwards(read_from, latest))
        self._latest = latest
        return View({**read_from, **starts}, starts, latest, frozenset(gone) | frozenset(recreated), topic_ids)

    def _note_reading(self, start: SourceOffset, topic_ids: Mapping[str, str], read_from: Mapping[Bucket, int],
                      latest: Mapping[Bucket, int]) -> None:
        """The topics this batch may read records from (or moved backwards, or new to the
        query): the next listing describes them first, and :meth:`confirm_reads` checks them
        before the batch's ranges are handed out."""
        self._reading = frozenset({b.topic for b in keys_changed(read_from, latest)} | (
            topic_ids.keys() - start.topic_ids.keys()))

    def list_ahead(self) -> None:
        """Start listing the subscription for the next plan, in the background, while Spark
        writes and runs the batch just planned (:mod:`.listing_ahead`), after every
        ``latestOffset``; the topics that batch reads from are described first, for
        :meth:`confirm_reads` (none after a plan that made no batch: no ``partitions()``
        follows it, and an idle query plans several times a second). Nothing when there is no
        listing ahead for this query."""
        if self._listing_ahead is None:
            return
        verify = self._reading if self._last_end is not None else frozenset()
        started = self._listing_ahead.start(verify=verify)
        self._verifying = self._last_end if started and verify else None

    def confirm_reads(self, end: SourceOffset, reads: BatchReads) -> BatchReads:
        """``reads`` (the batch ending at ``end``) without the ranges of a topic deleted and
        re-created since its offsets were planned: the plan recorded each topic's id
        (KIP-516) beside offsets it asked Kafka for, and a topic re-created just before that
        answered them with the new topic's offsets, which the old topic's positions would read
        from. Called by ``partitions()``, on the driver, before the batch's ranges reach
        executors, so the topics are described after the plan's offsets were answered: by the
        listing ahead when this is the batch just planned (:meth:`list_ahead`), here otherwise
        (a batch replayed from the offset log after a restart).

        Fails under ``failOnDataLoss`` (:class:`DataLossError`); otherwise the batch reads
        nothing of those topics, and the next plan reads the re-created topic from its
        earliest offsets. A deleted topic is left to the readers, which report its partitions
        gone."""
        reading = {b: first for b, first in reads.start.items() if reads.end.get(b, first) > first}
        topics = {b.topic for b in reading} & end.topic_ids.keys()  # an offset before topic ids: nothing to compare
        if not topics:
            return reads
        verified = self._listing_ahead.verified() if self._listing_ahead is not None and self._verifying is end else None
        if verified is not None and topics <= verified.asked:
            found = verified.found
        else:
            with step_timings.step("driver.partitions.describe"):
                found = self._client.describe_topics(topics)
        found_ids = {t: identity.topic_id for t, identity in found.items()}
        changed = self._changed_topics(end, reading, found_ids)
        if not changed:
            return reads
        described = _id_changes(end, found_ids, changed)
        report_data_loss(
            self._settings.fail_on_data_loss,
            f"topic(s) {described} were deleted and re-created after this batch's offsets were planned; records of "
            "the old topic not yet read are lost, and the offsets planned do not apply to the new one",
            instead="read nothing of them in this batch, and the re-created topic(s) from their earliest offsets "
                    "in the next",
        )
        kept = {b: first for b, first in reads.start.items() if b.topic not in changed}
        return replace(reads, start=kept, end={b: last for b, last in reads.end.items() if b.topic not in changed})

    def _recreated(self, start: SourceOffset, positions: Mapping[Bucket, int], topic_ids: Mapping[str, str],
                   target: Mapping[Bucket, int] | None) -> list[Bucket]:
        """The read buckets of topics deleted and re-created since ``start`` was planned:
        their topic id (KIP-516) changed, whatever their offsets say. A re-created topic
        refilled past the old positions looked like the same topic, and the records below
        those positions were skipped silently (Spark's Kafka source does so too). Fails under
        ``failOnDataLoss``; otherwise the topic is read again from its earliest offsets.
        Under Trigger.AvailableNow a topic re-created after the run planned its end fails the
        run in :meth:`_verify_available_now` instead."""
        changed = self._changed_topics(start, positions, topic_ids)
        if not changed:
            return []
        during_run = target is not None and any(topic_ids[t] != self._available_now_topic_ids.get(t) for t in changed)
        described = _id_changes(start, topic_ids, changed)
        report_data_loss(
            self._settings.fail_on_data_loss and not during_run,
            f"topic(s) {described} were deleted and re-created since the last batch; records of the old "
            "topic not yet read are lost, and the offsets read so far do not apply to the new one",
            instead="read the re-created topic(s) from their earliest offsets",
        )
        return sorted(b for b in positions if b.topic in changed)

    @staticmethod
    def _changed_topics(start: SourceOffset, positions: Mapping[Bucket, int], topic_ids: Mapping[str, str]) -> list[str]:
        """The topics read so far whose topic id is not the one ``start`` recorded."""
        changed = {t for t, old in start.topic_ids.items() if t in topic_ids and topic_ids[t] != old}
        return sorted({b.topic for b in positions if b.topic in changed}) if changed else []

    def _vanished(self, positions: Mapping[Bucket, int], current: AbstractSet[Bucket],
                  target: Mapping[Bucket, int] | None) -> list[Bucket]:
        vanished = sorted(set(positions) - current)
        if not vanished:
            return []
        described = ", ".join(f"{b} (next offset {positions[b]})" for b in vanished)
        # A bucket the AvailableNow run planned to read: _verify_available_now fails the run
        # with its own message. One gone before the run started follows failOnDataLoss.
        report_data_loss(
            self._settings.fail_on_data_loss and not (target is not None and any(b in target for b in vanished)),
            f"partition(s) {described} no longer exist; records not yet read from them may be lost",
            instead="continue without them",
        )
        return vanished

    def _moved_backwards(self, read_from: Mapping[Bucket, int], latest: Mapping[Bucket, int]) -> dict[Bucket, int]:
        """Buckets whose log end is now below their position, restarted at their earliest
        offset (``failOnDataLoss=false``); raises :class:`DataLossError` otherwise."""
        moved = sorted(keys_below(latest, read_from))
        if not moved:
            return {}
        described = ", ".join(f"{b} (next offset {read_from[b]}, log end now {latest[b]})" for b in moved)
        report_data_loss(
            self._settings.fail_on_data_loss,
            f"offsets moved backwards for {described}: the topic was deleted and re-created or "
            "truncated, so records may have been lost",
            instead="continue from the earliest offset",
        )
        return self._client.earliest_offsets(moved)

    def _verify_available_now(self, target: Mapping[Bucket, int], latest: Mapping[Bucket, int], gone: list[Bucket],
                              recreated: list[Bucket] = ()) -> None:
        """Trigger.AvailableNow must end exactly at the offsets that existed when it started:
        if any of them is gone, the run fails whatever ``failOnDataLoss`` says (Spark's
        ``KafkaMicroBatchStream.verifyEndOffsetForTriggerAvailableNow``)."""
        shorter = sorted(b for b in target if b in latest and latest[b] < target[b] and b not in recreated)
        if not gone and not shorter and not recreated:
            return
        problems = [f"{b} no longer exists" for b in gone] + [f"{b}'s topic was re-created" for b in recreated] + [
            f"{b} ends at {latest[b]}, below the planned end {target[b]}" for b in shorter
        ]
        raise DataLossError(
            "Trigger.AvailableNow cannot reach the offsets it planned when it started: " + "; ".join(problems)
            + ". The topic was deleted, re-created or truncated while the query ran; records may be lost, so the "
            "run fails whatever failOnDataLoss says (as Spark's Kafka source does). Restart the query to read what exists now"
        )

    # ---------------------------------------------------------------- step 3: enter backlog

    def _enter_backlog(self, start: SourceOffset, backlog: BacklogState, view: View, restart: bool,
                       budget: ReadBudget) -> BacklogState:
        """Record boundaries for buckets that (re)start, for every lagging bucket on a
        restart, and on re-entry (a lag more than one batch of ``budget`` reads); a recorded
        boundary never moves."""
        if not self._tracking:
            return backlog
        backlog = backlog.without(view.gone | view.starts.keys())
        fresh = record_boundaries(view.read_from, view.latest, view.starts)
        if restart:
            fresh.update(restart_boundaries(backlog, view.read_from, view.latest))
            if fresh:
                log.info("restarted on an existing checkpoint behind the log end: a new backlog phase")
        entered = backlog.with_boundaries(fresh)
        reentry = reentry_boundaries(entered, view.read_from, view.latest, self._settings.backlog_reenter_lag,
                                     budget.one_batch_records)
        if reentry:
            log.info("total lag exceeds backlog.reenterLag=%d and one batch: entering backlog again",
                     self._settings.backlog_reenter_lag)
            fresh.update(reentry)
            entered = entered.with_boundaries(reentry)
        self._log_boundaries(start.source_id, {b: o for b, o in fresh.items() if b in entered.pending}, view.read_from)
        return entered

    # ---------------------------------------------------------------- step 4: plan

    def _plan(self, start: SourceOffset, view: View, backlog: BacklogState, budget: ReadBudget,
              sizes_read: Mapping[str, TopicSizes]) -> Plan:
        target = view.latest
        if self._available_now_target is not None:
            # Never past what existed when the run started (verified to still exist).
            target = {b: min(view.latest[b], self._available_now_target.get(b, view.read_from[b])) for b in view.read_from}
            target = {b: max(target[b], view.read_from[b]) for b in view.read_from}
        end, batch = self._apply_budget(start, view.read_from, target, budget.for_state(backlog.processing_backlog),
                                        sizes_read)
        # A batch reads every snapshot still pending at its start (see partitions()), so a
        # snapshot-only bucket reaches its boundary (its log offset) in the first batch.
        return Plan(end, backlog.plan(end), batch)

    def _apply_budget(self, start: SourceOffset, read_from: Mapping[Bucket, int], target: Mapping[Bucket, int],
                      budget: ReadBudget, sizes_read: Mapping[str, TopicSizes]) -> tuple[dict[Bucket, int], BatchPlan]:
        """The end positions within every bound that applies, and which one bounded them.
        Records (Spark's allocation), then, while processing backlog, bytes and time: the
        record sizes are what the previous batch's readers reported (``sizes_read``), or a
        sample where the batch starts for topics without enough of a report; the throughput
        is what the query achieved on its previous batches (:mod:`.catch_up`)."""
        learned = self._learned_rate(start)
        available = raised_to(target, read_from)
        if budget.min_records is not None and self._available_now_target is None and self._delay_batch(
            sum(lag(read_from, target).values()), budget.min_records
        ):
            return dict(read_from), BatchPlan(BoundedBy.AVAILABLE, bytes_per_s=learned)
        end, bounded_by = available, BoundedBy.AVAILABLE
        if budget.max_records is not None:
            end = rate_limit(read_from, target, budget.max_records)
            bounded_by = BoundedBy.RECORDS if end != available else bounded_by
        if not budget.bounds_catch_up:
            return end, BatchPlan(bounded_by, bytes_per_s=learned)
        lags = lag(read_from, end)
        if budget.backlog_target_ms is None and budget.backlog_max_bytes is not None and (
                sum(lags.values()) * UNMEASURED_BYTES_PER_OFFSET <= budget.backlog_max_bytes):
            # Even records of Kafka's largest size would fit the byte budget: nothing to
            # measure (a measurement costs a fetch per partition, 0.1-0.3 s).
            return end, BatchPlan(bounded_by, None, budget.backlog_max_bytes, learned)
        sizes = reported_sizes(sizes_read, lags)
        unreported = {b: n for b, n in lags.items() if b not in sizes}
        with step_timings.step("driver.record_sizes"):
            if any(unreported.values()):
                sizes.update(self._sizes.bytes_per_offset(read_from, unreported))
        typical = statistics.median(sizes.values()) if sizes else UNMEASURED_BYTES_PER_OFFSET
        previous = start.plan.bytes if start.plan is not None else None
        bound, why = catch_up_bytes(budget.backlog_max_bytes, budget.backlog_target_ms, learned, previous)
        if bound is not None:
            by_bytes = byte_limit(read_from, end, bound, sizes, typical)
            if by_bytes != end:
                end, bounded_by = by_bytes, why
        planned = int(sum((end[b] - read_from[b]) * sizes.get(b, typical) for b in end))
        return end, BatchPlan(bounded_by, planned, bound, learned)

    def _learned_rate(self, start: SourceOffset) -> float | None:
        """The catch-up throughput learnt up to the batch that ended at ``start``: the
        checkpointed figure, with that batch folded in when this run planned it (its
        duration is the time from its plan to this one)."""
        if self._learned is not None and self._learned[0] == start:
            return self._learned[1]
        learned = start.plan.bytes_per_s if start.plan is not None else None
        if self._last_planned is not None and self._last_planned[0] == start:
            _, planned_at, planned_bytes = self._last_planned
            learned = learn_rate(learned, planned_bytes, self._clock() - planned_at)
        self._learned = (start, learned)
        return learned

    def _delay_batch(self, available: int, min_records: int) -> bool:
        """Spark's ``KafkaMicroBatchStream.delayBatch``: skip while fewer than ``min_records``
        are available, unless ``maxTriggerDelay`` has passed since the last trigger that ran;
        the clock starts at 0, so the first trigger of a run always runs."""
        now = self._clock()
        if self._last_trigger_at is not None and (now - self._last_trigger_at) * 1000 < self._settings.max_trigger_delay_ms:
            if available < min_records:
                return True
        self._last_trigger_at = now
        return False

    # ---------------------------------------------------------------- step 5: the offset

    def _offset(self, start: SourceOffset, settled: Settled, view: View, plan: Plan) -> SourceOffset:
        """The next offset, or ``start`` when the batch would read nothing: no batch without
        records, as in Spark (a state change that arrives without data is carried by the
        next batch with data; its spans are exported now)."""
        trace, finished_spans = advance(start.trace, start.source_id, plan.backlog.boundaries, settled.finishes,
                                        view.read_from, self._now_ms(), spans=exporter.enabled())
        self._spans.export(finished_spans)
        snapshot_unread = bool(start.snapshot and start.snapshot.pending)
        if plan.end == start.positions and not view.starts and not snapshot_unread:
            return start
        if trace is not None and trace.open:
            trace = trace.counted(plan.batch)  # a batch of the open backlog phase
        events_position = settled.events_position
        if plan.backlog.finishing and self._control is not None:
            # The events of this batch's readers are published after this point.
            log_end = self._control.log_end()  # None: the run goes on without the control topic
            events_position = max(events_position, log_end) if log_end is not None else events_position
        return SourceOffset(
            source_id=start.source_id,
            positions=plan.end,
            backlog=plan.backlog,
            starts=view.starts,
            events_position=events_position,
            trace=trace,
            # This batch reads every snapshot still pending (see partitions()).
            snapshot=replace(start.snapshot, pending={}) if start.snapshot else None,
            topic_ids=view.topic_ids,
            plan=plan.batch,
            intervals=self._intervals(),
        )

    # ---------------------------------------------------------------- helpers

    def _intervals(self) -> TriggerIntervals | None:
        """The query's own trigger intervals for ``install``, if its options set any."""
        high = self._settings.backlog_high_throughput_interval_ms
        low = self._settings.backlog_low_latency_interval_ms
        return None if high is None and low is None else TriggerIntervals(high, low)

    def _log_boundaries(self, source_id: str, boundaries: Mapping[Bucket, int], positions: Mapping[Bucket, int]) -> None:
        for bucket in sorted(boundaries):
            log.info("source %s: %s is in backlog from %d to its boundary %d", source_id, bucket, positions[bucket],
                     boundaries[bucket])

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)
