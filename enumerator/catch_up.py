"""How many bytes the next catch-up batch may read: the byte budget
(``backlog.maxBytesPerTrigger``) and the time budget (``backlog.targetBatchDuration``).

FLIP-309 stretches the checkpoint interval while a source processes backlog. In Spark every
micro-batch is a checkpoint, so the lever is how much a catch-up batch reads: enough that its
fixed cost (planning, commits, task start) is small against its reading, never so much that a
sink which holds the batch in memory fails, and sized in bytes, because a record count right
for 100-byte records is a hundred times too much for 10 KB ones.

Pure: no Kafka, no clock. The enumerator measures (record sizes where the batch starts, the
previous batch's duration) and asks :func:`catch_up_bytes`; :func:`learn_rate` folds one
batch's throughput into what was learnt, which the offset dict keeps (``plan.bytes_per_s``)
so a restart mid-backlog goes on from it.
"""

from __future__ import annotations

from backlog_source.enumerator.state import BoundedBy

#: The first batch under a time budget with nothing learnt yet reads at most this much, and
#: each batch at most :data:`GROWTH` times the previous one: batches start small and grow to
#: the target, instead of one long first batch whose length nobody could predict.
FIRST_TIMED_BATCH_BYTES = 16 << 20
GROWTH = 4
#: Weight of the newest batch's throughput in what is learnt: a change of record sizes or of
#: the cluster's speed is followed within about three batches, one slow batch does not halve
#: the next.
NEWEST_WEIGHT = 0.6
#: Bytes per offset assumed where nothing could be measured: Kafka's default largest record
#: (``message.max.bytes``, about 1 MiB), so a batch planned blind stays within its budget.
UNMEASURED_BYTES_PER_OFFSET = float(1 << 20)


def catch_up_bytes(max_bytes: int | None, target_ms: int | None, learned_bytes_per_s: float | None,
                   previous_bytes: int | None) -> tuple[int | None, BoundedBy]:
    """The byte bound of the next catch-up batch and which budget set it (None: unbounded).

    The byte budget bounds every catch-up batch. A time budget sizes the batch to take about
    ``target_ms`` at the learnt throughput, from :data:`FIRST_TIMED_BATCH_BYTES` when nothing
    is learnt, growing at most :data:`GROWTH` times per batch; the smaller bound wins."""
    bound, why = max_bytes, BoundedBy.BYTES
    if target_ms is not None:
        timed = FIRST_TIMED_BATCH_BYTES if learned_bytes_per_s is None else learned_bytes_per_s * target_ms / 1000
        if previous_bytes:
            timed = min(timed, GROWTH * previous_bytes)
        timed = max(1, int(timed))
        if bound is None or timed < bound:
            bound, why = timed, BoundedBy.TIME
    return bound, why


def learn_rate(learned: float | None, batch_bytes: int, batch_seconds: float) -> float | None:
    """``learned`` with one more batch folded in: ``batch_bytes`` read in ``batch_seconds``
    (planning to the next plan: reading, the sink and Spark's commits)."""
    if batch_bytes <= 0 or batch_seconds <= 0:
        return learned
    newest = batch_bytes / batch_seconds
    return newest if learned is None else NEWEST_WEIGHT * newest + (1 - NEWEST_WEIGHT) * learned
