"""Kafka consumers kept across tasks by one Python worker, as Spark's Kafka source pools its own.

Which process: a Python worker on an executor. Spark reuses a worker for task after task
(``spark.python.worker.reuse``, on by default) and ends it after a minute idle, so the pool
lives as long as the worker and holds at most 4 idle consumers (``core/client_pool.py``).

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
* A consumer idle for more than 5 minutes is closed, not reused, by the next borrow or by
  the worker's evictor thread, as every pool of ``core/client_pool.py`` does.
"""

from __future__ import annotations

from confluent_kafka import Consumer

from backlog_source.core.client_pool import EVICT_EVERY_S, ClientPool


class ConsumerPool(ClientPool):
    """A worker's idle consumers (:class:`~backlog_source.core.client_pool.ClientPool`): a
    read borrows one, then gives it back after a clean read (the module's contract) or
    discards it. Given back, a consumer is resumed and unassigned."""

    kind = "consumer"

    def __init__(self, factory=Consumer, **kwargs) -> None:
        super().__init__(factory, **kwargs)

    def _reset(self, consumer) -> None:
        assigned = consumer.assignment()
        if assigned:
            consumer.resume(assigned)
            consumer.unassign()


#: This worker's pool (module state lives as long as the Python worker process).
WORKER_POOL = ConsumerPool(evict_every_s=EVICT_EVERY_S)
