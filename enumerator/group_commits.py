"""Each committed batch's end offsets copied to a Kafka consumer group, for the lag tools
operators already use (``kafka-consumer-groups.sh``, Burrow, Kafka UI, Prometheus' Kafka
exporters): the opt-in option ``backlog.commitOffsetsToGroup``, as Flink's KafkaSource commits
its checkpointed offsets (``commit.offsets.on.checkpoint``). Spark's Kafka source commits
nothing, so those tools show nothing for it.

Monitoring only: nothing reads the group back. Where a query starts and resumes is its
checkpoint's, whatever the group holds, and a failed commit never fails the query.

Which process: the driver's planner worker, where Spark calls the stream reader's hooks
(:mod:`backlog_source.stream_reader`). The group is ``kafka.group.id``, else
``<groupIdPrefix>-<source id>`` (:meth:`KafkaClientConfig.lag_group_id`: stable across
restarts, unlike Spark's per-run group).

When: an offset is offered once Spark has committed the batch it ends. ``latestOffset(start)``
gets the end of the last batch Spark committed (the enumerator's settle step relies on the
same), and Spark's ``commit(end)`` says so explicitly; but Spark calls ``commit`` for a batch
only when it writes the next batch to its offset log
(``MicroBatchExecution.cleanUpLastExecutedMicroBatch``), so with ``commit`` alone an idle
query's group would stay one batch behind, and an AvailableNow run's last batch would never
be committed. A query's initial offset (no batch read yet) is never offered. The offsets are
the positions of :attr:`SourceOffset.log_positions` (a bucket whose snapshot is still pending
has none).

How: confluent-kafka's ``AdminClient.alter_consumer_group_offsets``, Kafka's OffsetCommit sent
from outside the group (no member id, generation -1): nothing joins the group, so no
rebalance; Kafka accepts it while the group has no active members. It needs READ on the
group (which implies the DESCRIBE that finding its coordinator needs) and READ on the topics,
which the query has already: READ on the group is the only extra ACL. A group another
application consumes with (active members) refuses it; that is logged like any failure.

Cost: :class:`GroupCommitter` hands each offset to one thread of its own and returns at once,
so a slow or unreachable broker never delays a batch; the newest offset wins over one not
sent yet. Failures are logged as warnings, once per kind of failure and then at most once every
:data:`LOG_INTERVAL_S`, librdkafka's text redacted; the same offsets are tried again after
:data:`RETRY_INTERVAL_S`. Spark stops the planner worker by terminating its process
(``core/tracing/exporter.py``), usually without ``stop()``: a commit in flight then is lost,
and the next run commits the checkpoint's offsets at its first plan.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import BacklogSourceError
from backlog_source.core.kafka_config import ClientRole, KafkaClientConfig
from backlog_source.core.kafka_refusals import Refusal, access_refused
from backlog_source.enumerator.state import SourceOffset

log = logging.getLogger(__name__)

OPTION = "backlog.commitOffsetsToGroup"
#: After a failure, at most one warning this often per kind of failure (a broker down for an
#: hour under a "0 seconds" trigger must not write a line per batch).
LOG_INTERVAL_S = 300.0
#: Offsets whose commit failed are offered again at every trigger of an idle query: they are
#: sent again no sooner than this.
RETRY_INTERVAL_S = 30.0
#: How long ``close()`` waits for the commit in flight and the one pending (a stop must not hang
#: on a broker that is gone).
CLOSE_TIMEOUT_S = 5.0
#: Errors that mean the group has active members: Kafka takes offsets from outside a group only
#: while it has none (classic groups and KIP-848 consumer groups alike).
#: Answers that a moment later are different: the group's coordinator is loading or moving.
_COORDINATOR_MOVING = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.NOT_COORDINATOR}
_BACKOFF_S, _BACKOFF_MAX_S = 0.1, 1.0
_GROUP_IN_USE = {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS,
                 KafkaError.FENCED_INSTANCE_ID, getattr(KafkaError, "STALE_MEMBER_EPOCH", -1)}


class GroupCommitError(BacklogSourceError):
    """Kafka did not take a group's offsets; the message says why (cause first, then the ACL or
    option to change), secrets removed; ``code`` is librdkafka's error code, if any (the kind
    of failure warnings are rate-limited by). Logged, never raised into a query."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self):
        return type(self), (self.args[0], self.code)


@dataclass(frozen=True)
class GroupOffsets:
    """One commit: the next offset of each bucket, for ``group``."""

    group: str
    positions: Mapping[Bucket, int]


class GroupOffsetsClient(Protocol):
    """What the committer asks of Kafka."""

    def commit(self, group: str, positions: Mapping[Bucket, int], timeout_s: float) -> None:
        """Commit ``positions`` (next offsets) to ``group`` from outside it, within
        ``timeout_s``. Raises :class:`GroupCommitError`."""

    def close(self) -> None:
        """Release the client."""


class KafkaGroupOffsets:
    """:class:`GroupOffsetsClient` over confluent-kafka's AdminClient (its own, created on the
    committer's thread: nothing it waits for is shared with planning)."""

    def __init__(self, kafka: KafkaClientConfig, *, admin_factory: Callable[[dict], AdminClient] = AdminClient,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        """``admin_factory``, ``clock`` and ``sleep`` are replaced by unit tests only."""
        self._kafka = kafka
        self._clock = clock
        self._sleep = sleep
        # librdkafka's connection log goes to a logger nobody reads (a broker down for an hour
        # logs every retry); the request's own error says what failed.
        self._admin = admin_factory(kafka.librdkafka(ClientRole.GROUP_OFFSETS, logger=_LIBRDKAFKA_LOG))

    def commit(self, group: str, positions: Mapping[Bucket, int], timeout_s: float) -> None:
        """One OffsetCommit, asked again while the group's coordinator is moving or loading
        (a fresh cluster's first commit to a group answers "coordinator load in progress"),
        until ``timeout_s`` has passed."""
        deadline, backoff = self._clock() + timeout_s, _BACKOFF_S
        while True:
            try:
                return self._commit_once(group, positions, max(deadline - self._clock(), 0.1))
            except GroupCommitError as exc:
                if exc.code not in _COORDINATOR_MOVING or self._clock() + backoff >= deadline:
                    raise
            self._sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def _commit_once(self, group: str, positions: Mapping[Bucket, int], timeout_s: float) -> None:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(b.topic, b.partition, offset) for b, offset in sorted(positions.items())])
        try:
            future = self._admin.alter_consumer_group_offsets([request], request_timeout=timeout_s)[group]
            answer = future.result(timeout=timeout_s + 1)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            code = error.code() if error else None
            raise GroupCommitError(self._message(group, code, error.str() if error else str(exc)), code) from None
        except concurrent.futures.TimeoutError:
            raise GroupCommitError(self._message(group, KafkaError._TIMED_OUT, "no answer"),
                                   KafkaError._TIMED_OUT) from None
        finally:
            self._admin.poll(0)  # hand over (and drop) librdkafka's queued log lines
        refused = [tp for tp in answer.topic_partitions if tp.error is not None]
        if refused:
            first = refused[0]
            raise GroupCommitError(self._message(group, first.error.code(), first.error.str(), topic=first.topic),
                                   first.error.code())

    def close(self) -> None:
        # AdminClient has no close(); dropping the last reference ends its threads.
        self._admin = None

    def _message(self, group: str, code: int | None, text: str, topic: str | None = None) -> str:
        """Why ``group`` did not take the offsets: the cause first, then what to change."""
        kafka = self._kafka
        head = f"could not commit offsets to consumer group {group!r} ({OPTION}; monitoring only, the query goes on)"
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return f"{head}: {access_refused(Refusal.GROUP_AUTHORIZATION, kafka, text, operation='READ')}"
        if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            refused = access_refused(Refusal.TOPIC_AUTHORIZATION, kafka, text, topic=topic, operation="READ")
            return f"{head}: {refused}"
        if code in _GROUP_IN_USE:
            return (f"{head}: the group has active members ({kafka.redact(text)}): another application consumes "
                    "with it, and Kafka takes offsets from outside a group only while it has none. Set "
                    "kafka.group.id to a group of this query's own, or leave it unset")
        return f"{head}: Kafka at {kafka.bootstrap_servers} did not take them ({kafka.redact(text)})"


_LIBRDKAFKA_LOG = logging.getLogger(f"{__name__}.librdkafka")
_LIBRDKAFKA_LOG.propagate = False
_LIBRDKAFKA_LOG.addHandler(logging.NullHandler())


class _FailureLog:
    """Warnings about failed commits, rate-limited per kind of failure (the group and the error
    code: librdkafka's words vary from one timeout to the next): the first at once, then at most
    one every ``interval_s`` with the count since; one line when commits work again."""

    def __init__(self, clock: Callable[[], float], interval_s: float = LOG_INTERVAL_S) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._last_logged: dict[tuple[str, int | None], float] = {}
        self._unlogged: dict[tuple[str, int | None], int] = {}
        self._failures = 0

    def failed(self, group: str, error: GroupCommitError) -> None:
        self._failures += 1
        kind, now = (group, error.code), self._clock()
        last = self._last_logged.get(kind)
        if last is not None and now - last < self._interval_s:
            self._unlogged[kind] = self._unlogged.get(kind, 0) + 1
            log.debug("%s", error)
            return
        more = self._unlogged.pop(kind, 0)
        since = f" ({more} more time(s) since the last warning)" if more else ""
        log.warning("%s%s; said at most once every %d s", error, since, self._interval_s)
        self._last_logged[kind] = now

    def succeeded(self, group: str) -> None:
        if self._failures:
            log.info("offsets are committed to consumer group %r again, after %d failed attempt(s)", group,
                     self._failures)
        self._failures = 0
        self._last_logged.clear()
        self._unlogged.clear()


class GroupCommitter:
    """Copies committed offsets to the query's consumer group on a thread of its own.

    :meth:`offer` and :meth:`close` are called by the stream reader's hooks; the Kafka client
    is created on first use, on the committer's thread. ``client_factory`` and ``clock`` are
    replaced by unit tests only."""

    def __init__(self, kafka: KafkaClientConfig, timeout_ms: int, *,
                 client_factory: Callable[[KafkaClientConfig], GroupOffsetsClient] = KafkaGroupOffsets,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._kafka = kafka
        self._timeout_s = timeout_ms / 1000
        self._client_factory = client_factory
        self._clock = clock
        self._client: GroupOffsetsClient | None = None
        self._failures = _FailureLog(clock)
        self._changed = threading.Condition()
        self._pending: GroupOffsets | None = None
        self._in_flight: GroupOffsets | None = None
        self._committed: GroupOffsets | None = None
        self._failed: tuple[GroupOffsets, float] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def offer(self, offset: SourceOffset) -> None:
        """Commit the end of a batch Spark has committed, in the background; returns at once.
        Offsets already committed, in flight or waiting are not sent again; offsets that failed, not
        before :data:`RETRY_INTERVAL_S`."""
        positions = offset.log_positions
        if not positions:
            return
        offsets = GroupOffsets(self._kafka.lag_group_id(offset.source_id), positions)
        with self._changed:
            if self._closed or offsets in (self._committed, self._in_flight, self._pending):
                return
            if self._failed is not None and self._failed[0] == offsets and (
                    self._clock() < self._failed[1] + RETRY_INTERVAL_S):
                return
            self._pending = offsets
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="backlog-group-commits", daemon=True)
                self._thread.start()
            self._changed.notify()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Send what is pending, then end the thread and the client; waits at most
        ``timeout_s``. True when nothing was left unsent."""
        with self._changed:
            self._closed = True
            self._changed.notify()
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                log.info("stopped before the last offsets reached consumer group %s: the next run commits them",
                         self._pending.group if self._pending else "(in flight)")
                return False
        if self._client is not None:
            self._client.close()
            self._client = None
        return True

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._pending is None and not self._closed:
                    self._changed.wait()
                if self._pending is None:
                    return
                offsets, self._pending = self._pending, None
                self._in_flight = offsets
            self._commit(offsets)

    def _commit(self, offsets: GroupOffsets) -> None:
        try:
            if self._client is None:
                self._client = self._client_factory(self._kafka)
            self._client.commit(offsets.group, offsets.positions, self._timeout_s)
        except GroupCommitError as exc:
            self._note_failure(offsets, exc)
        except Exception as exc:  # process boundary: the committer's thread; monitoring must not fail the query
            self._note_failure(offsets, GroupCommitError(
                f"could not commit offsets to consumer group {offsets.group!r} ({OPTION}): "
                f"{self._kafka.redact(str(exc))}"))
        else:
            with self._changed:
                self._committed, self._failed, self._in_flight = offsets, None, None
            self._failures.succeeded(offsets.group)

    def _note_failure(self, offsets: GroupOffsets, error: GroupCommitError) -> None:
        with self._changed:
            self._failed, self._in_flight = (offsets, self._clock()), None
        self._failures.failed(offsets.group, error)
