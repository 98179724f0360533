"""Demo, test and benchmark tooling, not the source's runtime path: Apache Kafka brokers on
this machine's loopback, started from the jars ``make jvm`` installs (``scripts/install-jvm.sh``
copies ``org.apache.kafka:kafka_2.13`` and its logging binding into ``.jvm/kafka-broker``).

- :func:`start_kafka` starts a single-node KRaft broker (combined broker and controller) on
  free loopback ports with its log dir in a temporary folder, and returns once the broker
  answers a metadata request with itself in it.
- ``start_kafka(nodes=3)`` starts three combined nodes with a static three-voter quorum, for
  leader failover: any one node can be killed and the other two keep a quorum.
- A :class:`KafkaNode` can be stopped (SIGTERM, a controlled shutdown), killed (SIGKILL),
  paused (SIGSTOP: it keeps its connections and answers nothing) and started again on the
  same log dir and ports.

Each JVM's heap is bounded (``heap_mb``, 512 MiB by default, against the start scripts' 1 GiB)
so that Spark keeps its share of a small machine. Measured here (2 cores): a single node
is ready ~3.5 s after the call (format ~1.5 s, JVM start ~2 s) at ~350 MiB resident; three nodes
~10 s; a restart after kill -9 ~5 s (the controller first times out the dead session). Nothing here dials anything but 127.0.0.1.

Raises :class:`~backlog_source.demo.errors.EmbeddedBrokerError` when Java or the jars are missing or
a broker does not come up, naming what to install and the end of the broker's log.
"""

from __future__ import annotations

import base64
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from backlog_source.demo.errors import EmbeddedBrokerError, interruption_in

#: Where ``make jvm`` puts the broker's jars, relative to the repository root.
LIBS_FOLDER = Path(".jvm") / "kafka-broker"
#: Overrides where the broker's jars are looked for.
LIBS_VARIABLE = "BACKLOG_SOURCE_KAFKA_LIBS"

_READY_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0

#: Broker settings every node gets: single-machine replication for Kafka's internal topics
#: (the code default is 3), no wait for a first consumer group to fill, and deleted topics
#: gone at once. ``auto.create.topics.enable`` stays Kafka's default (true) as on most clusters.
_COMMON_SETTINGS = {
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "log.flush.offset.checkpoint.interval.ms": "1000",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "share.coordinator.state.topic.num.partitions": "1",
    # Tests write records with timestamps of years ago (timestamp starts, generated data):
    # Kafka's 7-day retention would delete them while a test reads them, which the source
    # rightly reports as data loss (seen in a generated side-by-side run). Data loss is
    # staged on purpose with DeleteRecords instead.
    "log.retention.ms": "-1",
    # A broker restarted after kill -9 cannot register again until the controller has timed
    # out its previous session (9 s by default): 3 s keeps a restart test short.
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}

_LOG4J2 = """Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
"""


def find_libs() -> Path:
    """The folder of Kafka's jars: ``$BACKLOG_SOURCE_KAFKA_LIBS``, else ``.jvm/kafka-broker``
    in the current directory or one above it, else beside this checkout."""
    return find_installed(LIBS_FOLDER, "kafka_2.13-*.jar", LIBS_VARIABLE)


def find_installed(relative: Path, marker: str, variable: str) -> Path:
    """The folder of jars ``make jvm`` installed at ``relative`` (one holding ``marker``):
    ``$variable``, else ``relative`` in the current directory or one above it, else beside
    this checkout. Raises :class:`EmbeddedBrokerError` naming what to install."""
    if os.environ.get(variable):
        candidates = [Path(os.environ[variable])]
    else:
        here = Path.cwd().resolve()
        candidates = [folder / relative for folder in (here, *here.parents)]
        candidates.append(Path(__file__).resolve().parents[2] / relative)
    for folder in candidates:
        if any(folder.glob(marker)):
            return folder
    raise EmbeddedBrokerError(
        f"{marker} was not found ({', '.join(str(c) for c in candidates[:2])}): run 'make jvm' in the repository "
        f"(it needs Java 17), or point {variable} at a folder holding it and its dependencies"
    )


def kafka_version(libs: Path | None = None) -> str:
    """The version of the installed broker, read from its jar's name."""
    [jar] = sorted((libs or find_libs()).glob("kafka_2.13-*.jar"))
    return jar.name.removeprefix("kafka_2.13-").removesuffix(".jar")


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise EmbeddedBrokerError("java not found: Apache Kafka needs Java 17 or newer (e.g. 'apt-get install openjdk-17-jre-headless')")
    return java


#: The lowest port :func:`free_port` picks; it picks below the kernel's ephemeral range.
_LISTEN_PORTS_FROM = 20_000
#: Ports this process handed out: never twice, though a server may not have bound one yet.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 for a server this process starts soon after (a Kafka
    node, a Spark master, a proxy). Picked at random below the kernel's ephemeral port range
    and checked free by binding it: a port ``bind(0)`` hands out comes from that range, from
    which every outgoing connection of the machine takes its own local port too, and between
    this answer and the server's bind one of them could take it (a Kafka node of a three-node
    cluster once failed to start, its acceptor refused its port). ``bind(0)`` only when no
    port below the range is free."""
    low = _ephemeral_ports_start()
    below = [random.randrange(_LISTEN_PORTS_FROM, low) for _ in range(100)] if low > _LISTEN_PORTS_FROM else []
    for port in [*below, 0, 0, 0]:
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise EmbeddedBrokerError("no free TCP port on 127.0.0.1")


def _ephemeral_ports_start() -> int:
    """The first port of the kernel's ephemeral range (Linux: ``ip_local_port_range``;
    elsewhere 32768, below Linux's default and macOS's 49152)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _cluster_id() -> str:
    # Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 random bytes, no padding,
    # never starting with '-' (a command line would read it as an option).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


@dataclass
class KafkaNode:
    """One broker+controller JVM. Ports and log dir stay the same across restarts."""

    node_id: int
    port: int
    controller_port: int
    folder: Path
    java_options: tuple[str, ...]
    classpath: str
    extra_ports: dict[str, int] = field(default_factory=dict)  # listener name -> port
    process: subprocess.Popen | None = None

    @property
    def config_file(self) -> Path:
        return self.folder / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.folder / "broker.log"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise EmbeddedBrokerError(f"Kafka node {self.node_id} is not running: it has no pid")
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the JVM on the node's (formatted) log dir; returns at once (see
        :meth:`KafkaCluster.wait_ready`)."""
        if self.running():
            return
        log = self.log_file.open("ab")
        self.process = subprocess.Popen(
            [_java(), *self.java_options, f"-Dlog4j2.configurationFile={self.folder / 'log4j2.yaml'}",
             "-cp", self.classpath, "kafka.Kafka", str(self.config_file)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            # Its own session: a Ctrl-C in a terminal reaches only the program that started it.
            start_new_session=True,
        )
        log.close()

    def stop(self) -> None:
        """A controlled shutdown (SIGTERM), then SIGKILL if it has not ended in 30 s."""
        if not self.running():
            return
        self.resume()
        self.process.terminate()
        try:
            self.process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """``kill -9``: no shutdown, nothing flushed beyond what the OS already has."""
        if self.running():
            self.process.kill()
            self.process.wait()

    def pause(self) -> None:
        """An unresponsive broker (SIGSTOP): connections stay open, nothing is answered."""
        if self.running():
            os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running():
            os.kill(self.process.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 8) -> str:
        """The node's last ``lines`` log lines, joined, led by its first ERROR line and the
        line after it when those came earlier: a node that fails to start logs its cause
        first, then pages of shutting down."""
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        tail = text[-lines:]
        first_error = next((i for i, line in enumerate(text) if " ERROR " in line), None)
        if first_error is None or first_error >= len(text) - lines:
            return " | ".join(tail)
        return " | ".join([*text[first_error:first_error + 2], "...", *tail])


@dataclass
class KafkaCluster:
    """Apache Kafka on loopback: one node, or three for failover. Use :func:`start_kafka`."""

    nodes: list[KafkaNode]
    folder: Path
    advertised_port: int | None = None
    _owns_folder: bool = True

    @property
    def bootstrap_servers(self) -> str:
        """The PLAINTEXT listeners (or the proxy in front of a single node)."""
        if self.advertised_port:
            return f"127.0.0.1:{self.advertised_port}"
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def listener(self, name: str) -> str:
        """``host:port`` list of an extra listener (e.g. ``SASL_PLAINTEXT``)."""
        return ",".join(f"127.0.0.1:{node.extra_ports[name]}" for node in self.nodes)

    # The single-node view the tests and benchmarks use (as the embedded broker had it).
    @property
    def pid(self) -> int:
        return self.nodes[0].pid

    def pause(self) -> None:
        for node in self.nodes:
            node.pause()

    def resume(self) -> None:
        for node in self.nodes:
            node.resume()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def restart(self, timeout_s: float = _READY_TIMEOUT_S) -> float:
        """Start every stopped or killed node again on its log dir; returns the seconds until
        the cluster answered metadata with every node in it."""
        started = time.monotonic()
        for node in self.nodes:
            node.start()
        self.wait_ready(timeout_s)
        return time.monotonic() - started

    def wait_ready(self, timeout_s: float = _READY_TIMEOUT_S, nodes: int | None = None) -> None:
        """Wait until a metadata request answers with ``nodes`` brokers (all by default)."""
        want = len(self.nodes) if nodes is None else nodes
        deadline = time.monotonic() + timeout_s
        servers = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes if node.running())
        # Quiet: connection refusals are expected until the broker listens.
        config = {"bootstrap.servers": servers, "socket.connection.setup.timeout.ms": 1000, "log_level": 0}
        admin = AdminClient(config)
        last_error = "no answer"
        while time.monotonic() < deadline:
            dead = [node for node in self.nodes if node.process is not None and node.process.poll() is not None
                    and node.process.returncode not in (-signal.SIGKILL, 0, 143)]
            if dead:
                raise EmbeddedBrokerError(f"Kafka node {dead[0].node_id} exited with {dead[0].process.returncode}: "
                                          f"{dead[0].log_tail()}")
            try:
                brokers = admin.list_topics(timeout=2).brokers
                if len(brokers) >= want:
                    return
                last_error = f"{len(brokers)} of {want} brokers registered"
            except Exception as exc:  # process boundary: a broker starting up; any client error means "wait"
                interrupted = interruption_in(exc)
                if interrupted is not None:
                    raise interrupted from None
                last_error = str(exc)
                # A fresh client asks the nodes' own ports again: this one may have learned an
                # advertised address nothing listens on yet (a test's proxy, started once the
                # broker is ready), and it kept asking there until the deadline.
                admin = AdminClient(config)
            time.sleep(0.1)
        raise EmbeddedBrokerError(f"Apache Kafka did not become ready in {timeout_s:.0f} s ({last_error}): "
                                  f"{self.nodes[0].log_tail()}")

    def node_of(self, broker_id: int) -> KafkaNode:
        return next(node for node in self.nodes if node.node_id == broker_id)

    def stop(self) -> None:
        """Stop every node and remove the log dirs (when the cluster made its own folder)."""
        for node in self.nodes:
            node.stop()
        if self._owns_folder:
            shutil.rmtree(self.folder, ignore_errors=True)


def start_kafka(
    nodes: int = 1,
    *,
    advertised_port: int | None = None,
    listeners: Mapping[str, Mapping[str, str]] | None = None,
    settings: Mapping[str, str] | None = None,
    heap_mb: int = 512,
    folder: Path | None = None,
) -> KafkaCluster:
    """Format and start Apache Kafka on free loopback ports; return once it answers metadata.

    ``nodes``: 1 (combined broker+controller) or 3 (static three-voter quorum).
    ``advertised_port``: single node only; clients are told to connect there (a proxy).
    ``listeners``: extra client listeners by name (e.g. ``{"SASL_PLAINTEXT": {...}}``), each
    with the broker settings it needs; the name is also its security protocol.
    ``settings``: more ``server.properties`` entries for every node.
    The JVM options ``KAFKA_OPTS`` holds (environment) are added to every node's, as Kafka's
    own start scripts add them.
    """
    if nodes not in (1, 3):
        raise ValueError("nodes must be 1 or 3")
    if advertised_port and nodes != 1:
        raise ValueError("advertised_port is for a single node")
    libs = find_libs()
    classpath = str(libs / "*")
    own_folder = folder is None
    folder = Path(tempfile.mkdtemp(prefix="kafka-")) if folder is None else folder
    # KAFKA_OPTS is added last, as Kafka's own kafka-run-class.sh does (e.g. the tests' JIT setting).
    java_options = (f"-Xmx{heap_mb}m", f"-Xms{min(heap_mb, 256)}m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                    "-Djava.awt.headless=true", *shlex.split(os.environ.get("KAFKA_OPTS", "")))
    members = [KafkaNode(i + 1, free_port(), free_port(), folder / f"node-{i + 1}", java_options, classpath,
                         {name: free_port() for name in (listeners or {})}) for i in range(nodes)]
    voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in members)
    cluster_id = _cluster_id()
    try:
        for member in members:
            member.folder.mkdir(parents=True)
            (member.folder / "log4j2.yaml").write_text(_LOG4J2)
            _write_config(member, voters, nodes, advertised_port, listeners or {}, settings or {})
        _format(members, cluster_id, classpath, standalone=nodes == 1)
        for member in members:
            member.start()
        cluster = KafkaCluster(members, folder, advertised_port, own_folder)
        try:
            cluster.wait_ready()
        except BaseException:  # cleanup, then re-raised
            cluster.stop()
            raise
        return cluster
    except BaseException:  # cleanup, then re-raised
        for member in members:
            member.kill()
        if own_folder:
            shutil.rmtree(folder, ignore_errors=True)
        raise


@contextmanager
def kafka(nodes: int = 1, **kwargs) -> Iterator[KafkaCluster]:
    """``with kafka() as cluster: ...`` starts and always stops Apache Kafka."""
    cluster = start_kafka(nodes, **kwargs)
    try:
        yield cluster
    finally:
        cluster.stop()


def _write_config(node: KafkaNode, voters: str, nodes: int, advertised_port: int | None,
                  listeners: Mapping[str, Mapping[str, str]], settings: Mapping[str, str]) -> None:
    replication = str(nodes)
    min_isr = "2" if nodes == 3 else "1"
    names = ["PLAINTEXT", *listeners]
    config = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "listeners": ",".join([*(f"{n}://127.0.0.1:{node.port if n == 'PLAINTEXT' else node.extra_ports[n]}"
                                 for n in names), f"CONTROLLER://127.0.0.1:{node.controller_port}"]),
        "advertised.listeners": ",".join(
            f"{n}://127.0.0.1:{(advertised_port or node.port) if n == 'PLAINTEXT' else node.extra_ports[n]}"
            for n in names),
        "listener.security.protocol.map": ",".join([*(f"{n}:{n}" for n in names), "CONTROLLER:PLAINTEXT"]),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(node.folder / "data"),
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": min_isr,
        **_COMMON_SETTINGS,
    }
    if nodes == 1:
        config["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{node.controller_port}"
    else:
        config["controller.quorum.voters"] = voters
        # As production clusters are set: topics created without a replication factor (the
        # source's control topic among them) survive the loss of one broker.
        config["default.replication.factor"] = "3"
        config["min.insync.replicas"] = "2"
    for listener_settings in listeners.values():
        config.update(listener_settings)
    config.update(settings)
    node.config_file.write_text("".join(f"{key}={value}\n" for key, value in config.items()))


def _format(nodes: list[KafkaNode], cluster_id: str, classpath: str, *, standalone: bool) -> None:
    for node in nodes:
        command = [_java(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                   f"-Dlog4j2.configurationFile={node.folder / 'log4j2.yaml'}", "-cp", classpath,
                   "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(node.config_file),
                   "--ignore-formatted"]
        if standalone:
            command.append("--standalone")
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise EmbeddedBrokerError(f"formatting Kafka's log dir failed: {(result.stdout + result.stderr)[-500:]}")
