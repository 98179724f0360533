"""Run Spark's own ``format("kafka")`` and ``format("backlog")`` on the same topic with the
same options, and return what a user's sink sees of each: the rows of every batch, every
column (key, value, topic, partition, offset, timestamp, timestampType, headers).

Both queries run in the test session (Spark's connector is on its ``spark.jars``), each into
a ``foreachBatch`` that collects its batch on the driver, so rows and batch boundaries are
compared exactly. Options are the ones both sources take; ``backlog_only`` adds
``format("backlog")``'s own (``backlog.*``). Batch reads (:func:`both`) are compared the
same way, one ``collect()`` each.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.errors import StreamingQueryException

from tests.integration.helpers import start_query, wait_for

#: The source's columns, in Spark's order (``KafkaRecordToRowConverter``).
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
#: The first record's timestamp in :func:`fill_counts`.
BASE_TS = 1_700_000_000_000


def row_tuple(row) -> tuple:
    values = tuple(row[c] for c in COLUMNS)
    if "headers" in row.__fields__:
        headers = row["headers"]
        values += (None if headers is None else tuple((h["key"], bytes(h["value"]) if h["value"] is not None else None)
                                                      for h in headers),)
    return tuple(bytes(v) if isinstance(v, (bytearray, memoryview)) else v for v in values)


@dataclass
class Collected:
    """The batches one query delivered: ``batches[i]`` is the sorted rows of batch ``i``
    (empty batches included, as the sink saw them)."""

    batches: list[list[tuple]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _hold: threading.Event = field(default_factory=threading.Event)
    _held: threading.Event = field(default_factory=threading.Event)
    _release: threading.Event = field(default_factory=threading.Event)
    _before_read: list = field(default_factory=list)
    #: What an action of :meth:`before_reading_next_batch` raised (it never fails the batch).
    action_errors: list = field(default_factory=list)

    def add(self, batch_df, batch_id: int) -> None:
        if self._before_read:
            # Spark reads a foreachBatch's batch only when the function collects it: what
            # runs here happens after the batch was planned and before any of it is read.
            try:
                self._before_read.pop()()
            except Exception as exc:  # noqa: BLE001 - kept for the test to assert on
                self.action_errors.append(exc)
        rows = sorted((row_tuple(r) for r in batch_df.collect()), key=lambda r: (r[2], r[3], r[4]))
        with self.lock:
            while len(self.batches) <= batch_id:
                self.batches.append([])
            self.batches[batch_id] = rows
        if self._hold.is_set() and rows:
            # The query cannot plan its next batch while this one is in the sink: whatever
            # the test does to Kafka meanwhile is all there when the next plan looks.
            self._hold.clear()
            self._held.set()
            self._release.wait(300)

    def before_reading_next_batch(self, action) -> None:
        """Run ``action()`` once, in the sink, after the next batch is planned and before it is read."""
        self._before_read.append(action)

    def hold_next_batch(self) -> None:
        """The next non-empty batch waits in the sink until :meth:`release`."""
        self._release.clear()
        self._held.clear()
        self._hold.set()

    def wait_held(self, timeout_s: float = 120) -> None:
        if not self._held.wait(timeout_s):
            raise TimeoutError(f"no batch reached the sink within {timeout_s:.0f} s")

    def release(self) -> None:
        self._release.set()

    def rows(self) -> list[tuple]:
        with self.lock:
            return sorted((r for batch in self.batches for r in batch), key=lambda r: (r[2], r[3], r[4]))

    def non_empty_batch_sizes(self) -> list[int]:
        with self.lock:
            return [len(b) for b in self.batches if b]


def stream(spark, source: str, bootstrap: str, options: dict, backlog_only: dict | None = None):
    reader = spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
    for key, value in {**options, **((backlog_only or {}) if source == "backlog" else {})}.items():
        reader = reader.option(key, str(value))
    return reader.load()


def start(spark, source: str, bootstrap: str, options: dict, checkpoint, *, trigger: dict,
          backlog_only: dict | None = None):
    """Start one query into a collecting ``foreachBatch``; returns ``(query, collected)``."""
    collected = Collected()
    writer = (stream(spark, source, bootstrap, options, backlog_only).writeStream.foreachBatch(collected.add)
              .option("checkpointLocation", str(checkpoint)).trigger(**trigger))
    return start_query(writer.start, what=f"format({source!r})"), collected


def outcome(spark, bootstrap: str, options: dict, tmp_path, *, trigger: dict | None = None,
            backlog_only: dict | None = None, timeout_s: float = 180) -> dict[str, "Collected | SourceFailed"]:
    """Both sources, one after the other, each on its own checkpoint under ``tmp_path``, with
    an ending trigger (AvailableNow by default). A failure is an outcome too: ``{"kafka":
    Collected or SourceFailed, "backlog": ...}``. Raises TimeoutError if a query does not end."""
    results: dict[str, Collected | SourceFailed] = {}
    for source in ("kafka", "backlog"):
        query, collected = start(spark, source, bootstrap, options, tmp_path / f"ckpt-{source}",
                                 trigger=trigger or {"availableNow": True}, backlog_only=backlog_only)
        try:
            _await(query, timeout_s)
            if query.isActive:
                raise TimeoutError(f"format({source!r}) did not end within {timeout_s:.0f} s")
            results[source] = SourceFailed(source, str(query.exception())) if query.exception() else collected
        finally:
            query.stop()
    return results


def run_to_end(spark, bootstrap: str, options: dict, tmp_path, **kwargs) -> dict[str, Collected]:
    """Like :func:`outcome`, where both sources must succeed: a failure is raised, tagged
    with its source."""
    results = outcome(spark, bootstrap, options, tmp_path, **kwargs)
    for result in results.values():
        if isinstance(result, SourceFailed):
            raise result
    return results


class SourceFailed(AssertionError):
    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"format({source!r}) failed: {message[:3000]}")
        self.source, self.message = source, message


def wait_rows(collected: Collected, count: int, query, timeout_s: float = 120, what: str = "rows") -> None:
    def check():
        if query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        return len(collected.rows()) >= count

    wait_for(check, timeout_s, what)


def _await(query, timeout_s: float) -> None:
    try:
        query.awaitTermination(timeout_s)
    except StreamingQueryException:
        pass  # the caller reads query.exception()


# ---------------------------------------------------------------- batch reads


def batch_read(spark, source: str, bootstrap: str, options: dict):
    """The sorted rows of a batch read, or the failure's text (a failure is an outcome)."""
    reader = spark.read.format(source).option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    try:
        rows = reader.load().collect()
    except Exception as exc:  # noqa: BLE001 - compared: both sources must fail alike
        return f"failed: {str(exc)[:6000]}"
    return sorted((row_tuple(r) for r in rows), key=lambda r: (r[2], r[3], r[4]))


def fill_counts(bootstrap: str, topic: str, counts: list[int], headers=None) -> None:
    """``counts[p]`` records in partition ``p``: keys ``k<n>``, every seventh value null,
    timestamps one second apart from :data:`BASE_TS`."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for p, count in enumerate(counts):
        for n in range(count):
            producer.produce(topic, partition=p, key=f"k{n}".encode(), value=None if n % 7 == 3 else f"{p}-{n}".encode(),
                             headers=headers, timestamp=BASE_TS + n * 1000)
    assert producer.flush(30) == 0


def delete_records_before(broker, topic: str, offsets: dict[int, int]) -> None:
    """Kafka's DeleteRecords: partition ``p`` of ``topic`` keeps its records from ``offsets[p]``."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in offsets.items()])
    for future in futures.values():
        future.result(30)


def both(spark, broker, options):
    return (batch_read(spark, "kafka", broker.bootstrap_servers, options),
            batch_read(spark, "backlog", broker.bootstrap_servers, options))
