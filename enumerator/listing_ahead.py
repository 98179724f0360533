"""The subscription listed ahead of the next plan, while Spark runs the batch just planned
(Flink's ``KafkaSourceEnumerator`` discovers partitions the same way, off the planning path).

Which process: the driver's planner runner; each listing runs on a daemon thread of its
own (one at a time), with a Kafka client of its own (:class:`~.kafka_admin.KafkaAdmin` is not
thread-safe, and the plan uses its client meanwhile).

Why: at ten thousand partitions under a pattern, listing the subscription (a metadata
request for the topic names, then DescribeTopicPartitions for the topics matched) cost
~190 ms of the ~270 ms a plan took, nearly all of it confluent-kafka building a Python object
per partition and replica (benchmarks/README.md, partitions_scale). Taken ahead, it is ready
when the next ``latestOffset`` comes.

What a listing taken ahead may miss, and who makes up for it: it is as old as the time
between two plans (at most :data:`MAX_AGE_S`; an older one is dropped and the plan lists
itself). A topic or partition created meanwhile is found by the next plan, as one created
just after a plan always was. A topic deleted meanwhile fails the offsets request, which the
plan already handles. A topic deleted and re-created meanwhile would look like the same
topic, its offsets answered by the new one: so each listing first describes the topics the
plan just made reads records from (:meth:`ListingAhead.start`'s ``verify``), after that plan's
offsets were answered, and ``partitions()`` leaves out the ranges of any whose topic id is no
longer the one the plan recorded (:meth:`~.enumerator.Enumerator.confirm_reads`). Those
descriptions run while Spark writes the batch's offsets to its log, not inside
``latestOffset``; for one topic of ten thousand partitions they were half of every plan. A
topic the batch reads nothing from can be re-created unseen until it has records to read,
which is when the difference matters.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from backlog_source.core import gc_pause, step_timings
from backlog_source.core.buckets import TopicIdentity
from backlog_source.core.settings import SourceSettings
from backlog_source.enumerator.kafka_admin import OffsetsClient
from backlog_source.enumerator.subscription import Covered, Subscription

log = logging.getLogger(__name__)

#: A listing started longer ago than this is not used: the plan lists itself. Under a short
#: trigger interval (``0 seconds``, the low-latency mode's) plans come well within it; under
#: a long one, listing is a small part of the interval and the plan pays for it, so topics
#: and partitions are found when Spark's own source finds them, at the batch after they appear.
MAX_AGE_S = 5.0

Submit = Callable[[Callable[[], Covered]], "Future[Covered]"]


@dataclass(frozen=True)
class Verified:
    """Topics described after a plan's offsets were answered: ``asked``, the topics described;
    ``found``, the identity of each that exists (one asked and not found was deleted)."""

    asked: frozenset[str]
    found: dict[str, TopicIdentity]


class ListingAhead:
    """One listing of the subscription at a time, started by :meth:`start` and taken by
    :meth:`take`, the topics to verify described first (:meth:`verified`). All three are
    called from the planner's thread only (Spark calls serially)."""

    def __init__(self, settings: SourceSettings, client: OffsetsClient, *, clock: Callable[[], float] = time.monotonic,
                 submit: Submit | None = None) -> None:
        """``client``: this listing's own (closed by :meth:`close`). ``clock`` and ``submit``
        (run a listing; None: on this object's background thread) are replaced by unit tests."""
        # wait_for_topics=False: a subscribed topic that does not exist yet is logged by the
        # plan's own listing, once, not again by this one.
        self._subscription = Subscription(settings, client, wait_for_topics=False)
        self._client = client
        self._clock = clock
        self._submit = submit if submit is not None else _on_daemon_thread
        self._ahead: tuple[float, Future[Covered]] | None = None
        self._verified: Future[Verified] | None = None
        # The longest a plan or partitions() waits for it: twice the client's own deadline
        # (kafka.default.api.timeout.ms), which every request ends by unless the client hangs.
        self._wait_s = 2 * settings.api_timeout_ms / 1000
        # How many topics a listing describes: known for subscribe and assign, learnt from the
        # last listing for a pattern (None: not yet).
        named = settings.subscribe if settings.subscribe is not None else (
            {b.topic for b in settings.assign} if settings.assign is not None else None)
        self._described: int | None = len(set(named)) if named is not None else None
        self._learns_described = named is None

    def start(self, verify: frozenset[str] = frozenset()) -> bool:
        """List the subscription now, in the background, for the next plan; nothing when a
        listing started earlier has not been taken yet. Returns whether a listing started.

        ``verify``: the topics the plan just made reads records from; their identities are
        ready for :meth:`verified` as soon as they are described: first, on their own, when
        the listing describes more topics than these; by the listing itself otherwise."""
        if self._ahead is not None:
            return False
        verified: Future[Verified] | None = None
        if verify:
            verified = Future()
            verified.set_running_or_notify_cancel()
        self._verified = verified
        listing = self._submit(lambda: self._list(frozenset(verify), verified))
        if verified is not None:  # however the listing ended, the verification has ended too: never a wait forever
            listing.add_done_callback(lambda _: verified.done() or verified.set_exception(
                RuntimeError("the listing ended before describing the topics to verify")))
        self._ahead = (self._clock(), listing)
        return True

    def verified(self) -> Verified | None:
        """The identities of the topics the last :meth:`start` was asked to verify, once
        described (waiting for them at most twice the client's own deadline); None when it was
        asked none, or their description failed or did not end (the caller describes them
        itself)."""
        if self._verified is None:
            return None
        try:
            return self._verified.result(timeout=self._wait_s)
        except Exception as exc:  # process boundary: the background thread's failure; the caller describes itself
            log.debug("the description taken ahead failed; the topics are described again: %s", exc)
            return None

    def take(self) -> Covered | None:
        """The listing :meth:`start` began, once it has ended (waiting for it at most twice the
        client's own deadline); None when none was started, it began more than
        :data:`MAX_AGE_S` ago, or it failed or did not end (the plan then lists itself, and
        reports what is wrong as its own listing finds it)."""
        if self._ahead is None:
            return None
        started, listing = self._ahead
        self._ahead = None
        if self._clock() - started > MAX_AGE_S:
            return None
        try:
            return listing.result(timeout=self._wait_s)
        except Exception as exc:  # process boundary: the background thread's failure; the plan lists again
            log.debug("the listing taken ahead failed; the plan lists the subscription itself: %s", exc)
            return None

    def close(self) -> None:
        """Drop a listing not taken and close the client (a listing still running ends on its
        own, bounded by its deadline; its thread never holds up the process's exit)."""
        self._ahead = None
        self._verified = None
        self._client.close()

    def _list(self, verify: frozenset[str], verified: Future[Verified] | None) -> Covered:
        # The answer builds an object per partition and replica: the collector held off as
        # the plan holds it (core/gc_pause.py).
        with gc_pause.paused(), step_timings.step("driver.listing_ahead"):
            try:
                if verified is not None and (self._described is None or len(verify) < self._described):
                    verified.set_result(Verified(verify, self._client.describe_topics(verify)))
                covered = self._subscription.covered()
            except BaseException as exc:  # cleanup, then re-raised: the verification fails with the listing
                if verified is not None and not verified.done():
                    verified.set_exception(exc)
                raise
        if verified is not None and not verified.done():
            verified.set_result(Verified(verify, {t: covered.topics[t] for t in verify if t in covered.topics}))
        if self._learns_described:
            self._described = len(covered.topics)
        return covered


def _on_daemon_thread(listing: Callable[[], Covered]) -> "Future[Covered]":
    """Run ``listing`` on a daemon thread of its own (a few a second at most: one per plan).
    Not a ThreadPoolExecutor: Python joins its threads at exit, and a listing waiting on
    brokers that are gone would hold up the runner's exit for its whole deadline."""
    answer: Future[Covered] = Future()
    answer.set_running_or_notify_cancel()

    def run() -> None:
        try:
            answer.set_result(listing())
        except BaseException as exc:  # process boundary: the thread's failure is the future's; take() handles it
            answer.set_exception(exc)

    threading.Thread(target=run, name="backlog-listing-ahead", daemon=True).start()
    return answer
