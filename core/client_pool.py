"""librdkafka clients kept across tasks by one Python worker: what the consumer pool
(``reader/consumer_pool.py``) and the control topic's producer pool
(``events/control_topic.py``) share.

Which process: a Python worker on an executor. Spark reuses a worker for task after task
(``spark.python.worker.reuse``, on by default), so a pool lives as long as its worker and
holds at most ``capacity`` idle clients.

Why: a fresh client first connects (TLS and SASL handshakes included, on a secured cluster)
and asks for metadata before its first request; a kept one skips all of it.

What every pool keeps to:

* A client is given back only by a user that ended cleanly (each subclass says what that
  means); any other end closes it. Given back, it is made ready for its next user
  (:meth:`ClientPool._reset`), or closed if that fails.
* It is handed only to a user with the same key: a digest of its settings and whatever
  else must match (:func:`settings_key`; the settings hold secrets and are never kept in
  clear).
* A client idle for more than ``idle_timeout_s`` (default :data:`IDLE_TIMEOUT_S`, Spark's
  ``spark.kafka.consumer.cache.timeout``, 5 minutes) is closed, not reused, by the next
  borrow or by the pool's evictor thread, which looks every ``evict_every_s`` (Spark's
  ``spark.kafka.consumer.cache.evictorThreadRunInterval``, 1 minute). Without the evictor a
  kept client whose cluster went away reconnected (and logged "Connection refused") for as
  long as its worker lived, when no later user had its key.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Idle clients one worker keeps per pool by default.
CAPACITY = 4
#: Longer idle than this and a client is closed instead of reused.
IDLE_TIMEOUT_S = 300.0
#: How often a worker pool's evictor thread closes clients idle longer than that.
EVICT_EVERY_S = 60.0


def settings_key(settings: dict, topics: Iterable[str] = (), *, generated_group_id: bool = False) -> str:
    """A digest of a client's settings and the topics it reads (never the settings
    themselves: they hold secrets). A generated ``group.id`` is left out: it differs for
    every consumer and means nothing. The topics are in a consumer's key, as in Spark's pool
    (keyed by topic-partition): a kept consumer assigned a topic it had not read waited
    ~0.6-1 s for its first records on Apache Kafka, where a new consumer needs ~10-30 ms."""
    kept = {k: v for k, v in settings.items() if not (generated_group_id and k == "group.id")}
    described = (sorted((k, repr(v)) for k, v in kept.items()), sorted(set(topics)))
    return hashlib.sha256(repr(described).encode()).hexdigest()


@dataclass
class _Idle:
    client: object
    since: float


class ClientPool:
    """Idle clients by settings key, least recently used first. A Python worker runs one
    task at a time, so one thread borrows and gives back; a lock guards the idle clients
    against the evictor thread only.

    A user calls :meth:`borrow`, then exactly one of :meth:`give_back` (it ended cleanly)
    or :meth:`discard` (anything else). Subclasses say how a client is made ready for its
    next user (:meth:`_reset`) and how it is closed (:meth:`_close`); :attr:`kind` names the
    clients in logs and in the evictor thread's name.

    ``evict_every_s``: start a daemon evictor thread (at the first give-back, so in the
    worker process, never in a process that forks it) that runs :meth:`evict_idle` that
    often; None runs none (unit tests call :meth:`evict_idle` themselves).
    """

    kind = "client"

    def __init__(self, factory: Callable[[dict], object], *, capacity: int = CAPACITY,
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
        """A client with ``settings``: a kept one with the same ``key``, or a new one."""
        with self._lock:
            idle = self._idle.pop(key, None)
        if idle is not None:
            if self._clock() - idle.since <= self._idle_timeout_s:
                self.reused += 1
                return idle.client
            self._close_quietly(idle.client)
        self.created += 1
        return self._factory(settings)

    def give_back(self, key: str, client) -> None:
        """Keep ``client`` for the next user with ``key``, made ready by :meth:`_reset`.
        Closed instead when the pool keeps nothing or it cannot be reset."""
        if self._capacity <= 0:
            self._close_quietly(client)
            return
        try:
            self._reset(client)
        except Exception as exc:  # process boundary: cleanup; a client that cannot be reset is closed, not reused
            log.info("closing a Kafka %s that could not be reset for reuse: %s", self.kind, type(exc).__name__)
            self._close_quietly(client)
            return
        with self._lock:
            previous = self._idle.pop(key, None)
            self._idle[key] = _Idle(client, self._clock())
            surplus = [self._idle.popitem(last=False)[1] for _ in range(len(self._idle) - self._capacity)]
        for idle in ([previous] if previous is not None else []) + surplus:
            self._close_quietly(idle.client)
        self._start_evictor()

    def discard(self, client) -> None:
        """Close ``client``: its user failed or stopped early."""
        self._close_quietly(client)

    def evict_idle(self) -> int:
        """Close every client idle longer than the idle timeout; how many were closed."""
        now = self._clock()
        with self._lock:
            expired = [key for key, idle in self._idle.items() if now - idle.since > self._idle_timeout_s]
            closing = [self._idle.pop(key) for key in expired]
        for idle in closing:
            self._close_quietly(idle.client)
        self.evicted += len(closing)
        if closing:
            log.debug("closed %d Kafka %s(s) idle for more than %.0f s", len(closing), self.kind, self._idle_timeout_s)
        return len(closing)

    def idle_clients(self) -> list:
        """The clients kept now (tests stage what may happen to them while idle)."""
        with self._lock:
            return [idle.client for idle in self._idle.values()]

    def close_all(self) -> None:
        with self._lock:
            closing = list(self._idle.values())
            self._idle.clear()
        for idle in closing:
            self._close_quietly(idle.client)

    # -- what subclasses say ------------------------------------------------------------

    def _reset(self, client) -> None:
        """Make ``client`` ready for its next user; raise if it cannot be."""

    def _close(self, client) -> None:
        client.close()

    # -- internals ----------------------------------------------------------------------

    def _close_quietly(self, client) -> None:
        try:
            self._close(client)
        except Exception as exc:  # process boundary: cleanup; closed already, or the broker gone
            log.debug("closing a Kafka %s failed: %s", self.kind, type(exc).__name__)

    def _start_evictor(self) -> None:
        if self._evict_every_s is None or (self._evictor is not None and self._evictor.is_alive()):
            return
        self._evictor = threading.Thread(target=self._evict_forever, name=f"backlog-source-{self.kind}-evictor",
                                         daemon=True)
        self._evictor.start()

    def _evict_forever(self) -> None:
        # A daemon thread ends with its worker; it never holds the lock while closing.
        while True:
            time.sleep(self._evict_every_s)
            try:
                self.evict_idle()
            except Exception:  # process boundary: the evictor thread must outlive one failed close
                log.debug("evicting idle Kafka %ss failed", self.kind, exc_info=True)
