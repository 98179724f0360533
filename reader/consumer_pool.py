"""Kafka consumers kept across tasks by one Python worker, as Spark's Kafka source pools its own.

Which process: a Python worker on an executor. Spark reuses a worker for task after task
(``spark.python.worker.reuse``, on by default) and ends it after a minute idle, so the pool
lives as long as the worker and holds at most :data:`CAPACITY` idle consumers.

Why: a fresh consumer first connects, asks for metadata and connects to each leader before
the first record (measured by ``benchmarks/consumer_reuse.py``), paid by every task of every
small live batch; a kept consumer skips all of it.

The contract that keeps reuse safe:

* A consumer is given back only by a read that finished normally: every range reached its
  end, no out-of-range or vanished partition was handled, nothing was raised and the read
  was not stopped early. Any other end closes it.
* Given back, it is resumed (librdkafka keeps a partition's pause flag across
  unassign/assign: a later split of that partition stalled) and unassigned, which drops
  what it had fetched ahead. Whatever a later ``consume()`` could still hold of an earlier
  assignment is outdated by librdkafka's version barrier on ``assign()``, and the reader
  keeps only records inside its ranges.
* It is handed only to a read with the same client settings and topics (its key is a digest
  of them: the settings hold secrets and are never kept in clear), except a ``group.id`` the
  source generated (a fresh one per consumer; the source's consumers never join a group).
* A consumer idle for more than :data:`IDLE_TIMEOUT_S` is closed, not reused (Spark's
  ``spark.kafka.consumer.cache.timeout`` is 5 minutes), by the next borrow or by the
  worker's evictor thread, which looks every :data:`EVICT_EVERY_S` (Spark's
  ``spark.kafka.consumer.cache.evictorThreadRunInterval``, 1 minute). Without the evictor a
  kept consumer whose cluster went away reconnected (and logged "Connection refused") for
  as long as its worker lived, when no later read had its key.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer

log = logging.getLogger(__name__)

#: Idle consumers one worker keeps; a task reads one split with one consumer at a time, and
#: a few keys cover the fetch sizes of small and large splits of one or two sources.
CAPACITY = 4
#: Longer idle than this and a consumer is closed instead of reused.
IDLE_TIMEOUT_S = 300.0
#: How often the worker pool's evictor thread closes consumers idle longer than that.
EVICT_EVERY_S = 60.0


def settings_key(settings: dict, topics: Iterable[str], *, generated_group_id: bool) -> str:
    """A digest of a consumer's settings and the topics it reads (never the settings
    themselves: they hold secrets). A generated ``group.id`` is left out: it differs for
    every consumer and means nothing. The topics are in the key, as in Spark's pool (keyed by
    topic-partition): a kept consumer assigned a topic it had not read waited ~0.6-1 s for
    its first records on Apache Kafka, where a new consumer needs ~10-30 ms."""
    kept = {k: v for k, v in settings.items() if not (generated_group_id and k == "group.id")}
    described = (sorted((k, repr(v)) for k, v in kept.items()), sorted(set(topics)))
    return hashlib.sha256(repr(described).encode()).hexdigest()


@dataclass
class _Idle:
    consumer: object
    since: float


class ConsumerPool:
    """Idle consumers by settings key, least recently used first. A Python worker runs one
    task at a time, so one thread borrows and gives back; a lock guards the idle consumers
    against the evictor thread only.

    A read calls :meth:`borrow`, then exactly one of :meth:`give_back` (it ended cleanly,
    see the module's contract) or :meth:`discard` (anything else).

    ``evict_every_s``: start a daemon evictor thread (at the first give-back, so in the
    worker process, never in a process that forks it) that runs :meth:`evict_idle` that
    often; None runs none (unit tests call :meth:`evict_idle` themselves)."""

    def __init__(self, factory: Callable[[dict], object] = Consumer, *, capacity: int = CAPACITY,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, clock: Callable[[], float] = time.monotonic,
                 evict_every_s: float | None = None) -> None:
        self._factory = factory
        self._capacity = capacity
        self._idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._idle: OrderedDict[str, _Idle] = OrderedDict()
        self._lock = threading.Lock()
        self._evict_every_s = evict_every_s
        self._evictor: threading.Thread | None = None
        self.created = self.reused = self.evicted = 0

    def __len__(self) -> int:
        return len(self._idle)

    def borrow(self, settings: dict, key: str):
        """A consumer with ``settings``: a kept one with the same ``key``, or a new one."""
        with self._lock:
            idle = self._idle.pop(key, None)
        if idle is not None:
            if self._clock() - idle.since <= self._idle_timeout_s:
                self.reused += 1
                return idle.consumer
            _close(idle.consumer)
        self.created += 1
        return self._factory(settings)

    def give_back(self, key: str, consumer) -> None:
        """Keep ``consumer`` for the next read with ``key``: resumed and unassigned. Closed
        instead when the pool keeps nothing or it cannot be reset."""
        if self._capacity <= 0:
            _close(consumer)
            return
        try:
            assigned = consumer.assignment()
            if assigned:
                consumer.resume(assigned)
                consumer.unassign()
        except Exception as exc:  # a consumer that cannot be reset is not reused
            log.info("closing a Kafka consumer that could not be reset for reuse: %s", type(exc).__name__)
            _close(consumer)
            return
        with self._lock:
            previous = self._idle.pop(key, None)
            self._idle[key] = _Idle(consumer, self._clock())
            surplus = [self._idle.popitem(last=False)[1] for _ in range(len(self._idle) - self._capacity)]
        for idle in ([previous] if previous is not None else []) + surplus:
            _close(idle.consumer)
        self._start_evictor()

    def discard(self, consumer) -> None:
        """Close ``consumer``: its read failed, lost data or stopped early."""
        _close(consumer)

    def evict_idle(self) -> int:
        """Close every consumer idle longer than the idle timeout; how many were closed."""
        now = self._clock()
        with self._lock:
            expired = [key for key, idle in self._idle.items() if now - idle.since > self._idle_timeout_s]
            closing = [self._idle.pop(key) for key in expired]
        for idle in closing:
            _close(idle.consumer)
        self.evicted += len(closing)
        if closing:
            log.debug("closed %d Kafka consumer(s) idle for more than %.0f s", len(closing), self._idle_timeout_s)
        return len(closing)

    def _start_evictor(self) -> None:
        if self._evict_every_s is None or (self._evictor is not None and self._evictor.is_alive()):
            return
        self._evictor = threading.Thread(target=self._evict_forever, name="backlog-source-consumer-evictor",
                                         daemon=True)
        self._evictor.start()

    def _evict_forever(self) -> None:
        # A daemon thread ends with its worker; it never holds the lock while closing.
        while True:
            time.sleep(self._evict_every_s)
            try:
                self.evict_idle()
            except Exception:  # noqa: BLE001 - the evictor must outlive one failed close
                log.debug("evicting idle Kafka consumers failed", exc_info=True)

    def idle_consumers(self) -> list:
        """The consumers kept now (tests stage what may happen to them while idle)."""
        with self._lock:
            return [idle.consumer for idle in self._idle.values()]

    def close_all(self) -> None:
        with self._lock:
            closing = list(self._idle.values())
            self._idle.clear()
        for idle in closing:
            _close(idle.consumer)


def _close(consumer) -> None:
    try:
        consumer.close()
    except Exception as exc:  # already closed, or the broker gone: nothing left to release
        log.debug("closing a Kafka consumer failed: %s", type(exc).__name__)


#: This worker's pool (module state lives as long as the Python worker process).
WORKER_POOL = ConsumerPool(evict_every_s=EVICT_EVERY_S)
