"""How to reach the Kafka cluster, and the one factory of librdkafka configuration dicts.

:class:`KafkaClientConfig` is what every process that talks to Kafka needs and nothing more:
the bootstrap servers, the user's ``kafka.*`` settings (secrets held as :class:`Secret`) and
the group id. It is frozen and picklable, so it is what crosses from the driver to
executors (inside :class:`~backlog_source.core.settings.ReaderConfig`). It is a plain
dataclass: every Python process that unpickles it (the source's runner on the driver, each
executor worker) imports this module, and a model library would be imported with it.

:meth:`KafkaClientConfig.librdkafka` builds the configuration of every client the project
creates, by :class:`ClientRole`; the settings a role relies on (never join a group, never
commit, report end of partition, never create topics implicitly) are fixed here, in one
table, and override anything the user set. The dicts it returns hold secrets in clear text:
they are handed to confluent-kafka and never logged.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backlog_source.core.text_enum import TextEnum


class Secret:
    """A secret setting's value: masked in ``repr`` and ``str`` (so in logs, tracebacks and
    error messages); :meth:`get_secret_value` is the one way to read it. Picklable."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    def __str__(self) -> str:
        return "**********"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self):
        return Secret, (self._value,)


class IsolationLevel(TextEnum):
    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


class ClientRole(TextEnum):
    """Every Kafka client the project creates, by what it is for (also its ``client.id``)."""

    ADMIN = "admin"  # driver: metadata, offsets, control-topic creation
    READER = "reader"  # executors: the split consumer
    CONTROL_READER = "events-reader"  # driver: reads BacklogFinishEvents
    EVENT_PRODUCER = "events"  # executors: publishes BacklogFinishEvents
    SIZE_SAMPLER = "size-sampler"  # driver: measures record sizes where a catch-up batch starts
    GROUP_OFFSETS = "group-offsets"  # driver: copies committed offsets to a consumer group (backlog.commitOffsetsToGroup)


#: Defaults a user may override with ``kafka.*`` options.
#:
#: ``fetch.queue.backoff.ms``: once a partition's local queue holds ``queued.min.messages``
#: (100k) or ``queued.max.messages.kbytes`` (librdkafka's 64 MiB, the readers' 16 MiB below),
#: librdkafka postpones its next fetch by this much, 1 s by default: a reader that drains the
#: queue in a fraction of that waits out the rest. A 10 ms backoff keeps the reader fed:
#: librdkafka's documented remedy for such gaps, faster than a larger queue and smaller
#: (benchmarks/README.md, "read_throughput").
#:
#: ``isolation.level``: librdkafka's default is ``read_committed``, the Java client's (and so
#: Spark's) ``read_uncommitted``. The driver plans to the high watermark unless the user asks
#: for ``read_committed``; a reader left on librdkafka's default would then stop at the last
#: stable offset (an open transaction: the read waits out ``kafkaConsumer.pollTimeoutMs``) and
#: drop aborted records Spark returns.
#:
#: ``fetch.wait.max.ms``: how long the broker may hold a fetch for records that do not exist
#: yet (500 ms by default). A reader only asks for records that exist, so a held fetch is
#: the one librdkafka sends on its own right after a range's last records, at the log end.
#: A consumer the executors' pool keeps would make its next read wait until the broker gives
#: up whenever no record arrives on those partitions meanwhile: 10 ms bounds that wait
#: (benchmarks/README.md, "consumer_reuse").
#:
#: ``queued.max.messages.kbytes``: librdkafka fetches ahead until its queue holds this much
#: (64 MiB by default), and a range that ends before the log end (every catch-up range) drops
#: what was fetched past its end: the broker's, librdkafka's and the network's work for
#: nothing, on the cores the readers share. 16 MiB bounds that waste at about half a catch-up
#: task's range while a long read alone stays close to its speed with the default queue
#: (benchmarks/README.md, "fetch_ahead"). Without a
#: ``fetch.max.bytes`` of the user's, librdkafka also lowers a fetch request's size to the
#: queue's (from 50 MiB).
_READ_DEFAULTS = {"fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 10, "isolation.level": "read_uncommitted",
                  "queued.max.messages.kbytes": 16_384}
_OVERRIDABLE: dict[ClientRole, dict[str, Any]] = {
    ClientRole.READER: _READ_DEFAULTS,
    ClientRole.SIZE_SAMPLER: _READ_DEFAULTS,
}

_NEVER_COMMITS = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # The source's consumers only assign(); a topic that does not exist must stay missing.
    "allow.auto.create.topics": False,
}

#: Settings each role relies on; they win over the user's ``kafka.*`` options (the options
#: that would contradict them are rejected when the options are parsed).
_FIXED: dict[ClientRole, dict[str, Any]] = {
    ClientRole.ADMIN: {},
    ClientRole.GROUP_OFFSETS: {},
    ClientRole.READER: {
        **_NEVER_COMMITS,
        # The end of a range is detected by position, so end-of-partition events are needed;
        # an out-of-range offset must stop the read (data loss), never reset silently.
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    },
    ClientRole.SIZE_SAMPLER: {**_NEVER_COMMITS, "enable.partition.eof": True, "auto.offset.reset": "error"},
    ClientRole.CONTROL_READER: {
        **_NEVER_COMMITS,
        "enable.partition.eof": True,
        # A control topic trimmed by retention: start at what is left.
        "auto.offset.reset": "earliest",
    },
    ClientRole.EVENT_PRODUCER: {
        # One record per request: the event must be on the topic as soon as the task ends.
        "linger.ms": 0,
        "acks": "all",
        # A publisher must never re-create a deleted control topic with the broker's
        # default partition count (the source creates it, once, with one partition).
        "allow.auto.create.topics": False,
    },
}

_CONSUMERS = {ClientRole.READER, ClientRole.CONTROL_READER, ClientRole.SIZE_SAMPLER}
_CONSUMER_ONLY = ("group.id", "isolation.level", "enable.auto.commit", "enable.auto.offset.store",
                  "enable.partition.eof", "auto.offset.reset", "queued.min.messages", "queued.max.messages.kbytes",
                  "fetch.queue.backoff.ms")


def _secret(key: str, value: Any) -> Secret:
    """``value`` as a :class:`Secret`: a str is wrapped, anything holding a secret value
    (``get_secret_value()``, e.g. pydantic's ``SecretStr``) unwrapped first; the value itself
    is never put in the error."""
    if isinstance(value, Secret):
        return value
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    if not isinstance(value, str):
        raise TypeError(f"the secret setting {key!r} must be a str, got {type(value).__name__}")
    return Secret(value)


@dataclass(frozen=True)
class KafkaClientConfig:
    """The connection and security settings of one source; frozen, picklable, secrets masked.

    ``params`` are the user's non-secret ``kafka.*`` settings (librdkafka names),
    ``secrets`` the secret ones (their values appear only in :meth:`librdkafka`; a plain
    string given here is wrapped in a :class:`Secret`).
    """

    bootstrap_servers: str
    params: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, Secret] = field(default_factory=dict)
    group_id_prefix: str = "spark-kafka-source"

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str):
            raise TypeError(f"bootstrap_servers must be a str, got {type(self.bootstrap_servers).__name__}")
        object.__setattr__(self, "params", {str(k): str(v) for k, v in self.params.items()})
        object.__setattr__(self, "secrets", {str(k): _secret(k, v) for k, v in self.secrets.items()})

    @property
    def isolation_level(self) -> IsolationLevel:
        return IsolationLevel(self.params.get("isolation.level", IsolationLevel.READ_UNCOMMITTED.value))

    def group_id(self) -> str:
        """``kafka.group.id``, or a fresh ``<groupIdPrefix>-<uuid>``: the source's consumers
        never join their group nor commit, so the id only names them in the broker's logs."""
        return self.params.get("group.id") or f"{self.group_id_prefix}-{uuid.uuid4()}"

    def lag_group_id(self, source_id: str) -> str:
        """The consumer group ``backlog.commitOffsetsToGroup`` commits to: ``kafka.group.id``,
        else ``<groupIdPrefix>-<source id>``.

        Spark's Kafka source names its driver's group ``<groupIdPrefix>-<random uuid>-<hash of
        the checkpoint path>`` (its executors' the same plus ``-executor``), new at every run
        (``KafkaSourceProvider.streamingUniqueGroupId``): a lag tool would see a new group at
        each restart. The source id is created with the query's checkpoint and kept in every
        offset, so one query is one group across restarts, and the id is the one the source's
        logs, spans and metrics carry (``backlog.source.id``)."""
        return self.params.get("group.id") or f"{self.group_id_prefix}-{source_id}"

    def librdkafka(self, role: ClientRole, **overrides: Any) -> dict[str, Any]:
        """The configuration dict of a client in ``role``, secrets revealed.

        Precedence, lowest first: the role's overridable defaults, the user's ``kafka.*``
        settings, ``overrides`` (the caller's, e.g. timeouts), the role's fixed settings.
        Never log or raise the returned dict.
        """
        config: dict[str, Any] = {
            **_OVERRIDABLE.get(role, {}),
            "bootstrap.servers": self.bootstrap_servers,
            **self.params,
            **{key: secret.get_secret_value() for key, secret in self.secrets.items()},
            **overrides,
            **_FIXED[role],
        }
        config.setdefault("client.id", f"backlog-source-{role.value}")
        if role in _CONSUMERS:
            config["group.id"] = self.group_id()
        else:
            # Admin clients and producers warn about consumer-only keys (the admin client
            # passes the isolation level with each ListOffsets request instead).
            for key in _CONSUMER_ONLY:
                config.pop(key, None)
        return config

    def secret_values(self) -> list[str]:
        """Every secret value, for :meth:`redact`."""
        return [value for value in (s.get_secret_value() for s in self.secrets.values()) if value]

    def redact(self, text: str) -> str:
        """``text`` with every secret value replaced by ``***`` (for librdkafka's messages,
        which may echo a setting)."""
        for value in sorted(self.secret_values(), key=len, reverse=True):
            text = text.replace(value, "***")
        return text

