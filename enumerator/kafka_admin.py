"""The enumerator's narrow view of Kafka: metadata and offsets, nothing else.

:class:`OffsetsClient` is the protocol the enumerator depends on; :class:`KafkaAdmin`
implements it with confluent-kafka's ``AdminClient`` and is the only module of the
enumerator that imports confluent_kafka. Unit tests use an in-memory fake instead.

Which process: the driver's planner worker (and, for a probe, the user's driver program).
The AdminClient is created on first use, kept for the life of the client (one connection
for every batch of the run), and never pickled.

Every call is bounded by one deadline, ``kafka.default.api.timeout.ms`` (30 s by default),
retries included (Spark's Kafka source gives each of its attempts the Java admin client's
timeout of that name, 60 s by default). Inside the deadline a failed request is retried
``fetchOffset.numRetries`` times, ``fetchOffset.retryIntervalMs`` apart (1 s, Spark's), and a request
that fails fast ("not leader for partition" from a broker that just came back) is asked
again inside its attempt, as the Java admin client does (:meth:`KafkaAdmin._call`). Errors that
retrying cannot fix (a rejected configuration, failed authentication, an untrusted
certificate, missing authorization) are raised at once, a refusal as
:class:`~backlog_source.core.kafka_refusals.AccessRefusedError` leading with its cause and
naming the topic an ACL refused; a wrong password or CA, which a request sees only as a
timeout, is told by the client's error callback, which is watched while the request waits and
ends it as soon as it reports one (:meth:`KafkaAdmin._watched`). Each offsets call is one batched
``ListOffsets`` request for all buckets (per broker, in calls of at most ``_OFFSETS_PER_CALL``
partitions sent together), not one request per partition.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import confluent_kafka
from confluent_kafka import IsolationLevel as KafkaIsolation
from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from backlog_source.core.buckets import Bucket, TopicIdentity
from backlog_source.core.errors import BacklogSourceError, ConfigError, KafkaUnavailableError
from backlog_source.core.kafka_answers import check_offsets
from backlog_source.core.offset_maps import keys_below
from backlog_source.core.kafka_config import ClientRole, IsolationLevel, KafkaClientConfig
from backlog_source.core.kafka_refusals import (
    AUTHORIZATION_CODES,
    CONNECTION_REFUSALS,
    AccessRefusedError,
    Refusal,
    access_refused,
    refusal_of,
)
from backlog_source.core.settings import SourceSettings
from backlog_source.events.control_topic import TopicNotCreatedError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Errors no retry can fix: they are configuration problems and are raised at once.
_NOT_RETRIABLE = {
    KafkaError._INVALID_ARG,
    KafkaError._SSL,
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
}
#: What describing a missing topic answers (broker error, or librdkafka's own).
_UNKNOWN_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}
#: ListOffsets failures a deleted topic causes: librdkafka finds no leader for its partitions
#: ("Failed to query partition leaders: No leaders found", ``_NOENT``) or the broker no longer
#: knows them. After one of these the client asks whether the topics still exist.
_MAYBE_DELETED = _UNKNOWN_TOPIC | {KafkaError._NOENT, KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}


class TopicsChangedError(BacklogSourceError):
    """Topics a request named changed while the query was asking Kafka about them, so the
    listing the request was made from is out of date; ``topics`` names them. Subclasses say
    how (``_CHANGE``)."""

    _CHANGE = "changed"

    def __init__(self, topics: "list[str] | tuple[str, ...]") -> None:
        self.topics = tuple(sorted(topics))
        super().__init__(self.topics)

    def __str__(self) -> str:
        return f"topic(s) {', '.join(self.topics)} {self._CHANGE} while the query asked Kafka for their offsets"


class TopicsDeletedError(TopicsChangedError):
    """Topics a request named no longer exist. The planner catches it and applies the
    data-loss rule to their partitions (as it does for a topic gone before the request);
    elsewhere it reaches the user with this message."""

    _CHANGE = "no longer exist: deleted"


class TopicsRecreatedError(TopicsChangedError):
    """Topics a request named have fewer partitions than it asked about: deleted and created
    again (Kafka never takes partitions away) after the planner listed them. The planner
    catches it and plans again from a fresh listing, where the new topic id tells it the
    topic was re-created; elsewhere it reaches the user with this message."""

    _CHANGE = "have fewer partitions than a moment ago: deleted and created again"


class OffsetsClient(Protocol):
    """What the enumerator asks of Kafka. All methods may raise :class:`KafkaUnavailableError`;
    the offsets methods raise :class:`TopicsDeletedError` when a topic they were asked about
    no longer exists, and :class:`TopicsRecreatedError` when it has fewer partitions than
    asked about (found out after a failed request: a topic deleted, or re-created, since the
    planner listed it)."""

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """The partition count of each of ``topics`` that exists, from a description of those
        topics only (never a listing of the cluster). A topic named is counted whatever its
        name, as an explicit ``subscribe`` reads it; Kafka's internal topics are left out of a
        pattern only, by the broker's flag (:attr:`TopicIdentity.internal`)."""

    def topic_names(self) -> set[str]:
        """The names of every topic the cluster lists, including topics being created or
        deleted and Kafka's internal topics (:meth:`describe_topics` tells which exist and which
        are internal)."""

    def describe_topics(self, topics: Iterable[str]) -> dict[str, TopicIdentity]:
        """The id and partition count of each of ``topics`` that exists; a topic that does
        not exist (never created, or deleted) is left out. A topic id (KIP-516) changes when a
        topic is deleted and re-created under the same name."""

    def earliest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        """The first available offset of each bucket."""

    def send_latest_offsets(self, buckets: Iterable[Bucket]) -> "object | None":
        """Ask for the log end offsets of ``buckets`` now, without waiting for the answer: a
        handle for :meth:`latest_offsets` (``sent``), which takes that answer for its first
        attempt when it is asked about exactly these buckets, in the same order (the order its
        answer comes back in). None when nothing could be sent
        (the request proper then reports why). A handle never used is dropped; its request
        ends on its own."""

    def latest_offsets(self, buckets: Iterable[Bucket], known: Mapping[Bucket, int] | None = None,
                       sent: "object | None" = None) -> dict[Bucket, int]:
        """The log end offset of each bucket: the high watermark, or the last stable offset
        under ``isolation.level=read_committed``. With ``known`` (offsets this query already
        reached), an answer below one of them is asked again ``fetchOffset.numRetries``
        times before it is returned: a log end moving backwards means lost records, so it
        must be what the broker says, not a stale answer (Spark's ``fetchLatestOffsets``
        audits the same way, for KAFKA-7703). ``sent``: a :meth:`send_latest_offsets`
        handle, whose answer is the first attempt's if it asked about the same buckets in the
        same order. The offsets come back in the order of ``buckets``."""

    def offsets_for_timestamps(self, timestamps: Mapping[Bucket, int]) -> dict[Bucket, int | None]:
        """The first offset whose timestamp is >= the given one, or None when there is none."""

    def ensure_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` if it is missing. Raises :class:`TopicNotCreatedError` if Kafka
        refuses to, :class:`AccessRefusedError` if an ACL does."""

    def topic_identity(self, topic: str) -> TopicIdentity | None:
        """The topic's id and partition count, or None when it does not exist."""

    def authorized_operations(self, topic: str) -> frozenset[str] | None:
        """The ACL operations (``READ``, ``WRITE``, ...) Kafka allows this client on ``topic``
        (KIP-430), or None when Kafka does not say (a broker older than 2.3) or the topic
        does not exist. Raises :class:`AccessRefusedError` when DESCRIBE is refused."""

    def close(self) -> None:
        """Release the client; it may be used again afterwards (it is recreated)."""


@dataclass(frozen=True)
class RequestPolicy:
    """How long and how often driver-side requests are tried (see the module docstring)."""

    timeout_ms: int = 30_000
    num_retries: int = 3
    retry_interval_ms: int = 1_000

    @classmethod
    def of(cls, settings: SourceSettings) -> "RequestPolicy":
        return cls(settings.api_timeout_ms, settings.fetch_offset_num_retries, settings.fetch_offset_retry_interval_ms)


class _LastFailure(logging.Handler):
    """Keeps what librdkafka last said about a broker connection, so an error can say why
    instead of "transport failure" or "timed out": the latest line it logged (``Connection
    refused``, ``Failed to resolve ...``), and the latest refusal of the connection its error
    callback (``error_cb``) or log reported (wrong credentials, an untrusted certificate),
    which a request only sees as a timeout.

    librdkafka retries a dead broker every few hundred milliseconds and logs each attempt; the
    lines go here rather than to the job's log, and one warning per failed request says it.
    Both are handed over by the admin client's ``poll()``.
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.line: str | None = None
        self.refusal: Refusal | None = None
        self.refusal_text = ""
        # A logger of this client's own, made directly rather than by logging.getLogger: one
        # is made for every admin client, and a failed request drops its client, so a Kafka
        # down for a day made ~100,000 loggers that logging's registry keeps forever. Made
        # directly, it goes with its client.
        self.logger = logging.Logger(f"{__name__}.librdkafka")
        self.logger.propagate = False
        self.logger.setLevel(logging.WARNING)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        # "FAIL [rdkafka#producer-1] [thrd:...]: host:port/bootstrap: Connect to ... failed: ..."
        self.line = record.getMessage().split("]: ", 2)[-1]
        self._note(None, self.line)

    def on_error(self, error: KafkaError) -> None:
        """librdkafka's ``error_cb``: ``_AUTHENTICATION``, ``_SSL``, ``_TRANSPORT``, ... for
        the client as a whole."""
        self._note(error.code(), error.str())

    def _note(self, code: int | None, text: str) -> None:
        refusal = refusal_of(code, text)
        if refusal in CONNECTION_REFUSALS:
            self.refusal, self.refusal_text = refusal, text


class KafkaAdmin:
    """:class:`OffsetsClient` over confluent-kafka's AdminClient, bounded by a
    :class:`RequestPolicy`."""

    def __init__(self, kafka: KafkaClientConfig, policy: RequestPolicy = RequestPolicy(), *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 admin_factory: Callable[[dict], "OffsetsAdminClient"] | None = None) -> None:
        """``clock``, ``sleep`` and ``admin_factory`` are replaced by unit tests only
        (``admin_factory`` None: :class:`OffsetsAdminClient`)."""
        self._kafka = kafka
        self._policy = policy
        self._clock = clock
        self._sleep = sleep
        self._admin_factory = admin_factory if admin_factory is not None else OffsetsAdminClient
        self._admin: OffsetsAdminClient | None = None
        self._failure: _LastFailure | None = None
        # The last buckets and specs ListOffsets asked about, and their TopicPartitions (_asked).
        self._last_asked: "tuple[tuple[tuple[Bucket, ...], tuple[int, ...]], list[TopicPartition]] | None" = None

    @classmethod
    def from_settings(cls, settings: SourceSettings) -> "KafkaAdmin":
        return cls(settings.kafka, RequestPolicy.of(settings))

    def __getstate__(self) -> dict:
        # A live AdminClient cannot be pickled; a copy reconnects on first use.
        return {**self.__dict__, "_admin": None, "_failure": None, "_last_asked": None}

    def _client(self) -> "OffsetsAdminClient":
        if self._admin is None:
            self._failure = _LastFailure()
            try:
                self._admin = self._admin_factory(self._kafka.librdkafka(
                    ClientRole.ADMIN, logger=self._failure.logger, error_cb=self._failure.on_error))
            except KafkaException as exc:
                raise ConfigError(f"the kafka.* options are not a valid client configuration: "
                                  f"{self._kafka.redact(_error_text(exc))}") from None
        return self._admin

    def close(self) -> None:
        # AdminClient has no close(); dropping the last reference ends its threads.
        self._admin = None

    def _call(self, what: str, request: Callable[[float], T]) -> T:
        """Run ``request(timeout_s)`` until it succeeds, a non-retriable error occurs, the
        retries are used up or the deadline passed.

        The deadline (``kafka.default.api.timeout.ms``) is shared out among the attempts
        (``fetchOffset.numRetries`` + 1): each gets the time left divided by the attempts left
        (at least 2 s, or all that is left). A request to a broker that died waited out the
        whole deadline in one attempt (librdkafka keeps sending to the cached leader), although
        the partition had a new leader seconds later (seen on three Apache Kafka brokers).

        Inside its share an attempt asks again, after a backoff, whenever a request fails
        fast: a broker that just came back answers "not leader for partition" at once for
        its first seconds (~2 s here after a 15 s pause, longer under load), and four
        attempts spent in 50 ms failed the query. The Java admin client behind Spark's Kafka
        source retries such answers inside each call the same way, until its timeout
        (``retry.backoff.ms`` 100 ms, doubling to ``retry.backoff.max.ms`` 1 s: the same
        here). Every failed request drops the admin client, so the next one starts from
        fresh metadata, as Spark's ``withRetries`` resets its admin."""
        policy = self._policy
        deadline = self._clock() + policy.timeout_ms / 1000
        attempts = policy.num_retries + 1
        for attempt in range(1, attempts + 1):
            remaining = deadline - self._clock()
            share_end = self._clock() + _attempt_share_s(remaining, attempts - attempt + 1)
            backoff = _BACKOFF_S
            while True:
                outcome = self._try(what, request, max(share_end - self._clock(), 0.001))
                if outcome.failure is None:
                    return outcome.answer
                reason = outcome.failure
                self.close()
                if self._clock() + backoff >= share_end:
                    break
                log.debug("%s failed fast, asking again in %.1f s: %s", what, backoff, reason)
                self._sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
            remaining = deadline - self._clock()
            if attempt > policy.num_retries or remaining <= policy.retry_interval_ms / 1000:
                raise KafkaUnavailableError(
                    f"no answer from Kafka at {self._kafka.bootstrap_servers} within {policy.timeout_ms} ms "
                    f"(kafka.default.api.timeout.ms; {attempt} attempt(s), fetchOffset.numRetries="
                    f"{policy.num_retries}) while {what}: {reason}. Check kafka.bootstrap.servers and that the "
                    "brokers are reachable from the driver"
                ) from None
            log.warning("%s failed (attempt %d), retrying: %s", what, attempt, reason)
            self._sleep(policy.retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def _try(self, what: str, request: Callable[[float], T], timeout_s: float) -> "_Attempt[T]":
        """One request: its answer, or why it failed when asking again may help (the reason,
        redacted). Raises what retrying cannot fix: :class:`AccessRefusedError` when Kafka
        refused this client (its message leads with why), :class:`ConfigError` for a request
        it refused as invalid."""
        self._client()  # before the request, so the watch below sees its callback from the start
        self._forget_refusals()
        try:
            return _Attempt(answer=self._watched(request, timeout_s))
        except KafkaException as exc:
            if _error_code(exc) in _NOT_RETRIABLE:
                raise self._refused(what, exc) from None
            failure: Exception = exc
        except (ConfigError, TopicsChangedError):
            raise  # the client could not be created, or the topic is gone or new: retrying changes nothing
        except Exception as exc:  # process boundary: librdkafka's futures raise plain errors too
            failure = exc
        refused = self._connection_refused()
        if refused is not None:
            # Wrong credentials or an untrusted certificate show up as a timeout, with the
            # reason only in the error callback and the connection log; retrying cannot fix them.
            raise refused from None
        return _Attempt(failure=self._reason(failure))

    def _watched(self, request: Callable[[float], T], timeout_s: float) -> T:
        """``request(timeout_s)``, run on a worker thread while this one serves librdkafka's
        error callback and connection log every ``_WATCH_S``: a refusal in ``_ENDS_REQUEST``
        reported meanwhile is raised at once (:class:`AccessRefusedError`), leaving the
        request to end on its own; else the request's answer or exception.

        A wrong password or an untrusted certificate reaches a request only as its timeout
        (its share of ``kafka.default.api.timeout.ms``), while the callback tells it within a
        second of the connection: the Java client behind ``format("kafka")`` fails as soon as
        its connection is refused, and so does this."""
        in_flight = _InFlight(request, timeout_s)
        while not in_flight.wait(_WATCH_S):
            refused = self._connection_refused(_ENDS_REQUEST)
            # A request that answered meanwhile keeps its answer: the refusal may be another
            # broker's connection, and what Kafka answered is the truth.
            if refused is not None and not in_flight.wait(0):
                raise refused
        return in_flight.result()

    def _refused(self, what: str, exc: KafkaException) -> ConfigError:
        """The error for a request Kafka refused at once (a code in ``_NOT_RETRIABLE``)."""
        refusal = refusal_of(_error_code(exc), _error_text(exc))
        if refusal is None:
            return ConfigError(f"Kafka at {self._kafka.bootstrap_servers} refused {what} as invalid: "
                               f"{self._reason(exc)}. Check the kafka.* options")
        if refusal in CONNECTION_REFUSALS:
            # The callback's words say more ("certificate verify failed") than the request's code.
            return self._connection_refused() or access_refused(refusal, self._kafka, _error_text(exc))
        return access_refused(refusal, self._kafka, _error_text(exc))

    def _connection_refused(self, refusals: frozenset[Refusal] = CONNECTION_REFUSALS) -> AccessRefusedError | None:
        """The error for the refusal of the connection librdkafka reported last, if it is one
        of ``refusals``."""
        self._serve_log()
        if self._failure is None or self._failure.refusal not in refusals:
            return None
        return access_refused(self._failure.refusal, self._kafka, self._failure.refusal_text)

    def _forget_refusals(self) -> None:
        """Only a refusal reported during a request explains its failure: a kept client may
        have seen one long ago (a TLS handshake cut short by a broker shutting down)."""
        self._serve_log()
        if self._failure is not None:
            self._failure.refusal = None

    def _serve_log(self) -> None:
        """Hand librdkafka's queued log lines and errors to :class:`_LastFailure`."""
        if self._admin is not None:
            self._admin.poll(0)

    def _reason(self, exc: BaseException) -> str:
        text = _error_text(exc)
        self._serve_log()
        if self._failure is not None and self._failure.line:
            text = f"{text} (last connection error: {self._failure.line})"
        return self._kafka.redact(text)

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        return {name: identity.partitions for name, identity in self.describe_topics(topics).items()}

    def topic_names(self) -> set[str]:
        def request(timeout_s: float) -> set[str]:
            metadata = self._client().list_topics(timeout=timeout_s)
            # A topic error here (being created, being deleted, leaders moving) is left for
            # describe_topics to settle: a listing is only the candidates a pattern selects from.
            # Internal topics are listed too: the listing has no flag for them, the description has.
            return set(metadata.topics)

        return self._call("listing topics", request)

    def describe_topics(self, topics: Iterable[str]) -> dict[str, TopicIdentity]:
        """One DescribeTopicPartitions request for the named topics (a metadata request for
        the whole cluster costs more the more topics it has)."""
        names = sorted(set(topics))
        if not names:
            return {}

        def request(timeout_s: float) -> dict[str, TopicIdentity]:
            futures = self._client().describe_topics(TopicCollection(names), request_timeout=timeout_s)
            found = {}
            for name, future in futures.items():
                try:
                    description = future.result(timeout=timeout_s)
                except KafkaException as exc:
                    if _error_code(exc) == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                        raise access_refused(Refusal.TOPIC_AUTHORIZATION, self._kafka, _error_text(exc), topic=name,
                                             operation="DESCRIBE") from None
                    if _error_code(exc) not in _UNKNOWN_TOPIC:
                        raise
                    continue
                found[name] = TopicIdentity(str(description.topic_id), len(description.partitions),
                                            internal=bool(description.is_internal))
            return found

        return self._call(f"describing {_topics_text(names)}", request)

    def earliest_offsets(self, buckets: Iterable[Bucket]) -> dict[Bucket, int]:
        return self._list_offsets("fetching earliest offsets", dict.fromkeys(buckets, _EARLIEST))

    def send_latest_offsets(self, buckets: Iterable[Bucket]) -> "_Sent | None":
        specs = dict.fromkeys(buckets, _LATEST)
        if not specs:
            return None
        try:
            admin = self._client()
            return _Sent(tuple(specs), admin, self._send_offsets(admin, specs, self._first_attempt_s()))
        except (KafkaException, ConfigError):
            return None  # sending early only saves time: the request proper raises what is wrong

    def latest_offsets(self, buckets: Iterable[Bucket], known: Mapping[Bucket, int] | None = None,
                       sent: "_Sent | None" = None) -> dict[Bucket, int]:
        specs = dict.fromkeys(buckets, _LATEST)
        latest = self._list_offsets("fetching latest offsets", specs, sent=sent)
        for attempt in range(1, self._policy.num_retries + 1):
            behind = [] if not known else sorted(
                f"{b} (read to {known[b]}, log end {latest[b]})" for b in keys_below(latest, known))
            if not behind:
                break
            log.warning("log end below the offset already read for %s; asking again (attempt %d of "
                        "fetchOffset.numRetries=%d)", ", ".join(behind), attempt, self._policy.num_retries)
            self._sleep(self._policy.retry_interval_ms / 1000)
            latest = self._list_offsets("fetching latest offsets", specs)
        return latest

    def offsets_for_timestamps(self, timestamps: Mapping[Bucket, int]) -> dict[Bucket, int | None]:
        found = self._list_offsets(
            "fetching offsets for timestamps", {b: int(ts) for b, ts in timestamps.items()},
            lowest=-1,
        )
        # Kafka answers -1 when no record has a timestamp >= the one asked for.
        return {bucket: (offset if offset >= 0 else None) for bucket, offset in found.items()}

    def _list_offsets(self, what: str, specs: Mapping[Bucket, int], lowest: int = 0,
                      sent: "_Sent | None" = None) -> dict[Bucket, int]:
        """One ListOffsets request for ``specs`` (what to ask of each bucket: :data:`_LATEST`,
        :data:`_EARLIEST` or a timestamp in ms; per broker, made of calls of at most
        :data:`_OFFSETS_PER_CALL` partitions, all in flight at once). An answer below
        ``lowest`` is a failed attempt (:class:`~backlog_source.core.kafka_answers.NoValidOffsets`),
        retried like any other: taken for a log end, a timed-out request's -1001 reads as offsets moving
        backwards, i.e. false data loss, or a rewind to the earliest offset. ``sent``: calls
        :meth:`send_latest_offsets` sent earlier, the first attempt's if they asked about these
        buckets."""
        if not specs:
            return {}
        unknown_before: set[str] = set()  # the topics unknown at this call's last check
        early = [sent] if sent is not None and sent.buckets == tuple(specs) else []

        def request(timeout_s: float) -> dict[Bucket, int]:
            try:
                if early:
                    sent_early = early.pop()  # the first attempt only
                    calls = sent_early.calls
                else:
                    admin = self._client()  # keep referenced until the futures resolve
                    calls = self._send_offsets(admin, specs, timeout_s)
                answers = _offsets_of(calls, timeout_s, self._kafka)
            except KafkaException as exc:
                if _error_code(exc) in _MAYBE_DELETED:
                    self._raise_if_changed(specs.keys(), timeout_s, unknown_before)
                raise
            # In the order asked (_offsets_of), not in the order the brokers' answers came back:
            # the planner's maps are in bucket order, which to_nested then sorts in one pass.
            return check_offsets(answers, lowest)

        return self._call(what, request)

    def _send_offsets(self, admin: "OffsetsAdminClient", specs: Mapping[Bucket, int],
                      timeout_s: float) -> "list[_OffsetsCall]":
        """The ListOffsets calls for ``specs`` (at most :data:`_OFFSETS_PER_CALL` partitions
        each), all sent before any is awaited."""
        isolation = (
            KafkaIsolation.READ_COMMITTED
            if self._kafka.isolation_level is IsolationLevel.READ_COMMITTED
            else KafkaIsolation.READ_UNCOMMITTED
        )
        buckets, asked = self._asked(specs)
        calls = []
        for first in range(0, len(asked), _OFFSETS_PER_CALL):
            call = asked[first:first + _OFFSETS_PER_CALL]
            calls.append(_OffsetsCall(call, admin.list_offsets_at_once(call, isolation_level=isolation,
                                                                       request_timeout=timeout_s),
                                      buckets[first:first + _OFFSETS_PER_CALL]))
        return calls

    def _asked(self, specs: Mapping[Bucket, int]) -> "tuple[tuple[Bucket, ...], list[TopicPartition]]":
        """The buckets of ``specs`` in order, and a ``TopicPartition`` asking each its spec.
        Every plan asks the latest offsets of the same buckets: at ten thousand partitions,
        making their ``TopicPartition``s again cost more than comparing the buckets with the
        last ones asked (confluent-kafka only reads them), so the last ones are kept."""
        key = (tuple(specs), tuple(specs.values()))
        if self._last_asked is None or self._last_asked[0] != key:
            self._last_asked = (key, [TopicPartition(b.topic, b.partition, spec) for b, spec in specs.items()])
        return key[0], self._last_asked[1]

    def _first_attempt_s(self) -> float:
        """The first attempt's share of the deadline (:meth:`_call`)."""
        return _attempt_share_s(self._policy.timeout_ms / 1000, self._policy.num_retries + 1)

    def _raise_if_changed(self, buckets: Iterable[Bucket], timeout_s: float, unknown_before: set[str]) -> None:
        """After a failed offsets request: raise :class:`TopicsDeletedError` for the asked
        topics that no longer exist, or :class:`TopicsRecreatedError` for those that now
        have fewer partitions than were asked about (re-created: a partition that does not
        exist fails the request with "Unknown partition" until the deadline, whatever the
        retries). A topic deleted after the planner listed it fails
        ListOffsets with "No leaders found" (its partitions have no leader any more), which
        retrying until ``kafka.default.api.timeout.ms`` cannot fix; it killed the query as
        "Kafka unavailable". If the check itself fails, the request's own failure stands.

        Unknown twice in a row within one call, not once: a topic created moments ago (the
        control topic on a query's first start, a topic created just before the query) is
        unknown to brokers its metadata has not reached yet, and its partitions have no
        leader there either; read as deleted, it failed a query's start on three brokers. The
        first time, the request is asked again after its backoff. ``unknown_before``: the
        topics unknown at the previous check of the same request's retries; updated here."""
        highest: dict[str, int] = {}
        for bucket in buckets:
            highest[bucket.topic] = max(highest.get(bucket.topic, -1), bucket.partition)
        try:
            futures = self._client().describe_topics(TopicCollection(sorted(highest)), request_timeout=timeout_s)
            deleted, shrunk = [], []
            for name, future in futures.items():
                try:
                    partitions = len(future.result(timeout=timeout_s).partitions)
                except KafkaException as exc:
                    if _error_code(exc) in _UNKNOWN_TOPIC:
                        deleted.append(name)
                    continue
                if partitions <= highest[name]:
                    shrunk.append(name)
        except Exception:  # process boundary: a check after a failure; if it fails too, the original failure is retried
            return
        if shrunk:
            raise TopicsRecreatedError(shrunk)
        confirmed = [name for name in deleted if name in unknown_before]
        unknown_before.clear()
        unknown_before.update(deleted)
        if confirmed:
            raise TopicsDeletedError(confirmed)

    def topic_identity(self, topic: str) -> TopicIdentity | None:
        return self.describe_topics([topic]).get(topic)

    def authorized_operations(self, topic: str) -> frozenset[str] | None:
        def request(timeout_s: float) -> frozenset[str] | None:
            future = self._client().describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                                    request_timeout=timeout_s)[topic]
            try:
                operations = future.result(timeout=timeout_s).authorized_operations
            except KafkaException as exc:
                if _error_code(exc) == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise access_refused(Refusal.TOPIC_AUTHORIZATION, self._kafka, _error_text(exc), topic=topic,
                                         operation="DESCRIBE") from None
                if _error_code(exc) in _UNKNOWN_TOPIC:
                    return None
                raise
            return None if operations is None else frozenset(getattr(op, "name", str(op)) for op in operations)

        return self._call(f"asking which operations the ACLs allow on topic {topic!r}", request)

    def ensure_topic(self, topic: str, partitions: int) -> None:
        if topic in self.partition_counts([topic]):
            return
        admin = self._client()
        timeout_s = self._policy.timeout_ms / 1000
        future = admin.create_topics([NewTopic(topic, partitions)], request_timeout=timeout_s)[topic]
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if _error_code(exc) in AUTHORIZATION_CODES:  # Kafka takes CREATE on the topic or on the cluster
                raise access_refused(Refusal.TOPIC_AUTHORIZATION, self._kafka, _error_text(exc), topic=topic,
                                     operation="CREATE") from None
            if _error_code(exc) != KafkaError.TOPIC_ALREADY_EXISTS:  # else another query created it first
                raise TopicNotCreatedError(topic, self._kafka.redact(_error_text(exc))) from None
        self._await_leaders(topic)

    def _await_leaders(self, topic: str) -> None:
        """Wait until every partition of a topic just created has a leader, within
        ``kafka.default.api.timeout.ms``. On a cluster of several brokers a new topic's
        leaders take a moment to reach every broker, and this client's metadata cache kept
        "no leader" for the topic: the ListOffsets that follows failed every retry ("Failed to
        query partition leaders: No leaders found"). Describing the topic refreshes the cache."""
        def request(timeout_s: float) -> None:
            description = self._client().describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
            partitions = description.result(timeout=timeout_s).partitions
            leaderless = [p.id for p in partitions if p.leader is None or p.leader.id < 0]
            if leaderless:
                raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                                f"partitions {leaderless} of {topic} have no leader yet"))

        self._call(f"waiting for the leaders of the new topic {topic!r}", request)


#: What ListOffsets asks of a partition other than a timestamp (Kafka's protocol values).
_LATEST, _EARLIEST = -1, -2


class OffsetsAdminClient(AdminClient):
    """confluent-kafka's AdminClient with ListOffsets answered by one future per call.

    ``AdminClient.list_offsets`` makes a ``concurrent.futures.Future`` per partition and
    resolves each from the call's one answer: at a thousand partitions that Python work cost
    more than the request itself (10 ms against 1 ms), on the path of every batch's plan. This
    sends the same request through the method ``list_offsets`` itself calls once it has checked
    its arguments (``super(AdminClient, self).list_offsets(partitions, future, **kwargs)``,
    the same from confluent-kafka 2.4 to 2.16), with one future for the whole call. That method
    is not public: a release where it is missing or takes other arguments gets the public
    ``list_offsets``, its futures gathered into one (:func:`_gathered`), same answers, slower."""

    #: Whether the one-future call is known not to work with the installed confluent-kafka.
    _public_only = False

    def list_offsets_at_once(self, topic_partitions: list[TopicPartition], *, isolation_level: KafkaIsolation,
                             request_timeout: float) -> Future:
        """One ListOffsets call for ``topic_partitions`` (each with its ``offset`` set to what
        to ask: :data:`_LATEST`, :data:`_EARLIEST` or a timestamp in ms). Its future's result
        maps each ``TopicPartition`` to a ``ListOffsetsResultInfo`` or to the ``KafkaError``
        that partition failed with; a call that failed as a whole raises its
        ``KafkaException`` from ``result()``."""
        if not OffsetsAdminClient._public_only:
            answer: Future = Future()
            answer.set_running_or_notify_cancel()
            try:
                self._send_list_offsets(topic_partitions, answer, isolation_level_value=isolation_level.value,
                                        request_timeout=request_timeout)
                return answer
            except (AttributeError, TypeError) as exc:  # what a changed private method raises before sending
                OffsetsAdminClient._public_only = True
                log.info("confluent-kafka %s: ListOffsets through its public list_offsets (%s)",
                         confluent_kafka.version()[0], exc)
        return _gathered(self.list_offsets(
            {TopicPartition(tp.topic, tp.partition): _offset_spec(tp.offset) for tp in topic_partitions},
            isolation_level=isolation_level, request_timeout=request_timeout,
        ))

    def _send_list_offsets(self, topic_partitions: list[TopicPartition], answer: Future, **kwargs: object) -> None:
        """The request ``AdminClient.list_offsets`` sends, answered on ``answer``."""
        super(AdminClient, self).list_offsets(topic_partitions, answer, **kwargs)  # type: ignore[misc]


def _offset_spec(asked: int) -> OffsetSpec:
    """The public ``OffsetSpec`` for what :meth:`OffsetsAdminClient.list_offsets_at_once` asks."""
    if asked == _LATEST:
        return OffsetSpec.latest()
    if asked == _EARLIEST:
        return OffsetSpec.earliest()
    return OffsetSpec.for_timestamp(asked)


def _gathered(per_partition: Mapping[TopicPartition, Future]) -> Future:
    """One future for the public ``list_offsets``' per-partition futures, answering what
    :meth:`OffsetsAdminClient.list_offsets_at_once` answers: each partition's result or its
    ``KafkaError``; an error other than a ``KafkaException`` (confluent-kafka's own check of
    the answer) fails it as a whole."""
    gathered: Future = Future()
    gathered.set_running_or_notify_cancel()
    answers: dict[TopicPartition, object] = {}
    lock = threading.Lock()

    def one_done(tp: TopicPartition, done: Future) -> None:
        error = done.exception()
        with lock:
            if gathered.done():
                return
            if error is not None and not isinstance(error, KafkaException):
                gathered.set_exception(error)
                return
            answers[tp] = error.args[0] if error is not None else done.result()
            if len(answers) == len(per_partition):
                gathered.set_result(answers)

    if not per_partition:
        gathered.set_result({})
    for tp, answer in per_partition.items():
        answer.add_done_callback(lambda done, tp=tp: one_done(tp, done))
    return gathered


#: The most partitions one ListOffsets call (:meth:`OffsetsAdminClient.list_offsets_at_once`)
#: names. librdkafka merges each broker's answer into the call's result with a linear search
#: per partition, so one call's cost grows with the square of its partitions; calls of this
#: size, sent together, keep it linear at the price of one more request per broker per call.
_OFFSETS_PER_CALL = 500
#: How often a request in flight looks at what librdkafka's error callback and log reported.
_WATCH_S = 0.2
#: The refusals that end a request still in flight: each says the connection will never be
#: accepted. A bare "SSL handshake failed" (``TLS_HANDSHAKE``) does not end it: a broker shutting
#: down cuts a handshake short with that too; it explains the request's failure once it failed.
_ENDS_REQUEST = frozenset({Refusal.AUTHENTICATION, Refusal.UNTRUSTED_CERTIFICATE, Refusal.CLIENT_CERTIFICATE})
#: The shortest share of the deadline an attempt gets (when that much is left).
_MIN_ATTEMPT_S = 2.0
#: The first wait before a request that failed fast is asked again inside its attempt, and the
#: longest (the Java client's retry.backoff.ms and retry.backoff.max.ms defaults).
_BACKOFF_S, _BACKOFF_MAX_S = 0.1, 1.0


def _attempt_share_s(remaining_s: float, attempts_left: int) -> float:
    """An attempt's share of the time left (:meth:`KafkaAdmin._call`): an equal part, at least
    ``_MIN_ATTEMPT_S`` or all that is left."""
    return max(remaining_s / attempts_left, min(remaining_s, _MIN_ATTEMPT_S))


@dataclass(frozen=True)
class _OffsetsCall:
    """One ListOffsets call: the partitions it asked about, its one future, and the bucket of
    each partition asked (in the same order)."""

    asked: list[TopicPartition]
    answer: Future
    buckets: "tuple[Bucket, ...]"


@dataclass(frozen=True)
class _Sent:
    """ListOffsets calls :meth:`KafkaAdmin.send_latest_offsets` sent: the buckets asked about,
    the client that sent them (kept referenced until they resolve) and their futures."""

    buckets: "tuple[Bucket, ...]"
    admin: "OffsetsAdminClient"
    calls: list[_OffsetsCall]


@dataclass(frozen=True)
class _Attempt(Generic[T]):
    """What one request of :meth:`KafkaAdmin._try` came to: its ``answer`` (which may be
    None) when ``failure`` is None, else ``failure``, the redacted reason it failed."""

    answer: T | None = None
    failure: str | None = None


class _RequestThreads:
    """The daemon threads requests run on (:class:`_InFlight`), each kept once idle for the
    next request: starting a thread per request cost milliseconds on a loaded driver, twice or
    three times in every batch's plan. A thread is started only when none is idle, so there
    are as many as requests were ever in flight at once (one, unless a request was left to end
    on its own). Never stopped: daemon threads, waiting on a queue. A process forked from one
    that has them starts without any (:meth:`reset`)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No threads, none idle. Run in a child process right after ``fork()``: threads do not
        survive it, and the parent's idle ones, still counted, would be handed the child's
        requests, which would then never run, and the request waiting for them never end."""
        self._tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one release per thread waiting for a task
        self.started = 0  # threads started so far

    def run(self, task: Callable[[], None]) -> None:
        """Run ``task`` (which must not raise) on an idle thread, or on a new one."""
        self._tasks.put(task)
        if not self._idle.acquire(blocking=False):
            self.started += 1
            threading.Thread(target=self._serve, name="backlog-kafka-request", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._tasks.get()()
            self._idle.release()


_REQUEST_THREADS = _RequestThreads()
os.register_at_fork(after_in_child=_REQUEST_THREADS.reset)


class _InFlight(Generic[T]):
    """One request running on a daemon thread of its own (:class:`_RequestThreads`):
    :meth:`wait` for it, then :meth:`result`. A request its caller stopped waiting for ends on
    its own, bounded by its timeout; what it answers or raises then is dropped."""

    def __init__(self, request: Callable[[float], T], timeout_s: float) -> None:
        self._done = threading.Event()
        self._answer: T | None = None
        self._error: BaseException | None = None
        _REQUEST_THREADS.run(lambda: self._run(request, timeout_s))

    def _run(self, request: Callable[[float], T], timeout_s: float) -> None:
        try:
            self._answer = request(timeout_s)
        except BaseException as exc:  # process boundary: the request's thread; result() raises it to the caller
            self._error = exc
        finally:
            self._done.set()

    def wait(self, seconds: float) -> bool:
        """True once the request has ended; False after ``seconds`` while it runs."""
        return self._done.wait(seconds)

    def result(self) -> T:
        """The request's answer, or what it raised (only once it has ended)."""
        if self._error is not None:
            raise self._error
        return self._answer  # type: ignore[return-value]


def _offsets_of(calls: "list[_OffsetsCall]", timeout_s: float, kafka: KafkaClientConfig) -> dict[Bucket, int]:
    """The offset each partition of the ListOffsets ``calls`` answered, in the order asked.
    Raises the ``KafkaException`` of a call that failed as a whole or of the first partition
    that failed, :class:`AccessRefusedError` naming the topic whose DESCRIBE an ACL refused
    (what ListOffsets needs), :class:`IncompleteOffsetsAnswer` when an answer leaves out a
    partition it was asked about (a failed attempt, asked again: an offset never goes missing
    unnoticed)."""
    answers: dict[Bucket, int] = {}
    for call in calls:
        answered = call.answer.result(timeout=timeout_s)
        try:
            # Each partition asked looked up in the answer, in C: at ten thousand partitions a
            # Bucket made per answer in Python cost milliseconds of every plan. A partition
            # left out raises KeyError, one that failed AttributeError (a KafkaError has no offset).
            offsets = [answer.offset for answer in map(answered.__getitem__, call.asked)]
        except (KeyError, AttributeError):
            offsets = None
        if offsets is None:
            _raise_failure(call, answered, kafka)
        answers.update(zip(call.buckets, offsets))
    return answers


def _raise_failure(call: "_OffsetsCall", answered: Mapping[TopicPartition, object], kafka: KafkaClientConfig) -> None:
    """Raise why ``answered``, the answer to ``call``, has no offset for some partition asked:
    the first partition that failed, else the partitions left out (:func:`_offsets_of`)."""
    for tp, answer in answered.items():
        if isinstance(answer, KafkaError):
            if answer.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise KafkaException(answer)
            raise access_refused(Refusal.TOPIC_AUTHORIZATION, kafka, answer.str(), topic=tp.topic,
                                 operation="DESCRIBE") from None
    missing = [bucket for bucket, tp in zip(call.buckets, call.asked) if tp not in answered]
    if missing:
        raise IncompleteOffsetsAnswer(f"Kafka's ListOffsets answer left out {len(missing)} of the "
                                      f"{len(call.asked)} partitions asked, e.g. {min(missing)}")
    raise TypeError("a ListOffsets answer without an offset or an error for a partition asked")


class IncompleteOffsetsAnswer(Exception):
    """A ListOffsets answer without a partition it was asked about (confluent-kafka's public
    ``list_offsets`` checks the same: its futures fail with a RuntimeError)."""


def _topics_text(names: list[str], shown: int = 3) -> str:
    """``topic 'a'``, ``topics 'a', 'b'``, or the first few and how many more."""
    if len(names) == 1:
        return f"topic {names[0]!r}"
    listed = ", ".join(repr(name) for name in names[:shown])
    return f"topics {listed}" + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _error_code(exc: KafkaException) -> int | None:
    return exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc) or type(exc).__name__
