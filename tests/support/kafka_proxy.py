"""Test and benchmark tooling: a TCP proxy in front of an Apache Kafka broker that counts the
Kafka requests passing through it, by client id and API; and a listener that never answers.

Start the broker with the proxy's address as its advertised listener (see
:func:`counting_broker`), so every client connects through the proxy, including the
connections it opens after reading the cluster metadata. Each request frame is
``length (int32) | api_key (int16) | api_version (int16) | correlation_id (int32) |
client_id (nullable string) | ...``; the proxy reads those headers and forwards the bytes
unchanged.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from backlog_source.demo.apache_kafka import KafkaCluster, free_port, start_kafka

#: Kafka API keys worth naming in reports.
API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 18: "ApiVersions", 19: "CreateTopics",
             32: "DescribeConfigs", 75: "DescribeTopicPartitions"}


class CountingProxy:
    """Forwards ``127.0.0.1:port`` to ``target`` and counts request frames."""

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self._target = target
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", port))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name="kafka-proxy", daemon=True).start()

    def counts(self) -> Counter[tuple[str, str]]:
        """Requests seen so far, by ``(client_id, api name)``."""
        with self._lock:
            return Counter(self._counts)

    def requests(self, client_id_prefix: str = "", apis: set[str] | None = None) -> int:
        return sum(n for (client, api), n in self.counts().items()
                   if client.startswith(client_id_prefix) and (apis is None or api in apis))

    def close(self) -> None:
        self._closed.set()
        self._server.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:  # the broker is gone (stopped before the proxy): refuse this client
                client.close()
                continue
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    def _requests(self, source: socket.socket, sink: socket.socket) -> None:
        """Forward client -> broker, counting each request frame."""
        buffer = b""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
                buffer += data
                while len(buffer) >= 4:
                    (size,) = struct.unpack(">i", buffer[:4])
                    if len(buffer) < 4 + size:
                        break
                    self._count(buffer[4:4 + size])
                    buffer = buffer[4 + size:]
        except OSError:
            pass
        finally:
            _shut_down(source, sink)

    def _count(self, frame: bytes) -> None:
        api_key, _version, _correlation, client_length = struct.unpack(">hhih", frame[:10])
        client_id = frame[10:10 + client_length].decode(errors="replace") if client_length >= 0 else ""
        with self._lock:
            self._counts[(client_id, API_NAMES.get(api_key, str(api_key)))] += 1


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _shut_down(source, sink)


def _shut_down(*ends: socket.socket) -> None:
    """Shut both directions of each socket, so the thread piping the other way ends too."""
    for end in ends:
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed by the peer


@contextmanager
def counting_broker() -> Iterator[tuple[KafkaCluster, CountingProxy]]:
    """Apache Kafka reachable only through a :class:`CountingProxy`: yields the broker (whose
    ``bootstrap_servers`` is the proxy's address) and the proxy."""
    proxy_port = free_port()
    broker = start_kafka(advertised_port=proxy_port)
    proxy = CountingProxy(("127.0.0.1", broker.nodes[0].port), port=proxy_port)
    try:
        yield broker, proxy
    finally:
        proxy.close()
        broker.stop()


@contextmanager
def silent_listener() -> Iterator[str]:
    """A loopback address that accepts TCP connections and never answers a byte: a broker
    that hangs, staged on this machine. Yields ``"127.0.0.1:<port>"``."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)  # the kernel completes the handshakes; nobody ever reads or writes
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
