"""Live traffic: a steady rate of records, produced from a background thread.

Which process: the user's driver program. One record per produce request (``linger.ms=0``,
``batch.num.messages=1``), so the embedded broker's ListOffsets quirk (see
:func:`backlog_source.demo.topics.seal_partitions`) never hides the newest records.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer

LIVE_KEY_PREFIX = b"live-"


class LiveProducer:
    """Produces ``rate`` records/s round-robin over ``partitions`` until :meth:`stop`.

    ``delivered`` counts records the broker acknowledged; ``failed`` those it did not (a
    failure is counted and reported, never dropped silently).
    """

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int, rate: int, value_size: int = 100,
                 config: dict | None = None) -> None:
        self._config = {"bootstrap.servers": bootstrap_servers, "linger.ms": 0, "batch.num.messages": 1,
                        "acks": "all", **(config or {})}
        self._topic, self._partitions, self._rate = topic, partitions, rate
        self._value = b"l" * value_size
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.delivered = 0
        self.failed = 0
        self.first_error: str | None = None
        self._thread = threading.Thread(target=self._run, name="live-producer", daemon=True)

    def start(self) -> "LiveProducer":
        if self._rate > 0:
            self._thread.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        """Stop producing and wait until every record sent is acknowledged or failed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _on_delivery(self, error, message) -> None:
        with self._lock:
            if error is None:
                self.delivered += 1
            else:
                self.failed += 1
                self.first_error = self.first_error or str(error)

    def _run(self) -> None:
        producer = Producer(self._config)
        started = time.perf_counter()
        sent = 0
        while not self._stop.is_set():
            due = int((time.perf_counter() - started) * self._rate)
            while sent < due:
                producer.produce(self._topic, key=LIVE_KEY_PREFIX + str(sent).encode(), value=self._value,
                                 partition=sent % self._partitions, on_delivery=self._on_delivery)
                sent += 1
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(30)
