"""One exception tree for the whole project.

Every error backlog-source raises derives from :class:`BacklogSourceError`, so a job can
catch them together: a class per kind of cause (as Spark's ``KAFKA_*`` error classes),
raised where the cause is known, its message naming what to change. Errors raised on
executors travel back to the driver by pickling, so every class here keeps its message in
``args`` and pickles (confluent-kafka's own ``KafkaError`` objects are never stored; their
text is copied in, after secrets are removed).

::

    BacklogSourceError
    ├── ConfigError            an option, variable or argument is not allowed (also a ValueError)
    │   └── AccessRefusedError Kafka refused this client: authentication, TLS or an ACL (the message leads with which)
    ├── OffsetFormatError      a persisted value (offset dict, split) has an unknown version or shape
    ├── MalformedEvent         a control-topic message this release cannot read (a message, not an offset)
    ├── MalformedRecordError   a Kafka record the output schema cannot hold (Spark fails the same way)
    ├── DataLossError          records the query should have read are gone
    ├── KafkaUnavailableError  Kafka did not answer in time
    ├── ControlTopicError      the control topic cannot be created, is missing, or changed
    ├── SnapshotError          a snapshot is missing, malformed or does not fit
    ├── ModeSwitchError        start_backlog_aware could not start or switch the query
    └── SparkVersionError      the PySpark running the source is older than this release supports

Errors that one module raises and handles live with it: ``AccessRefusedError`` with the
messages of each refusal in :mod:`backlog_source.core.kafka_refusals`, ``NoValidOffsets`` (an
answer holding no valid offset: a failed request) in :mod:`backlog_source.core.kafka_answers`,
``TopicsDeletedError`` and ``TopicsRecreatedError`` in :mod:`backlog_source.enumerator.kafka_admin`,
``GroupCommitError`` (logged, never raised into a query) in :mod:`backlog_source.enumerator.group_commits`,
``TopicNotCreatedError`` (raised by the admin client, told as a ``ControlTopicError``) in
:mod:`backlog_source.events.control_topic`, ``StopTimeoutError`` (a ``ModeSwitchError``) and
``QueryFailedError`` (a query's failure known only by its text) in
:mod:`backlog_source.mode_switch.controller`, the demo's and the brokers' in
:mod:`backlog_source.demo.errors`. All derive from :class:`BacklogSourceError`.

A broad ``except Exception`` is for process boundaries only (a thread's entry, Spark's
listener thread, calls into the JVM through py4j, telemetry, best-effort work, cleanup), and
says so on its line (``tests/unit/test_broad_catches.py``).
"""

from __future__ import annotations


class BacklogSourceError(Exception):
    """Root of every error raised by backlog-source."""


class ConfigError(BacklogSourceError, ValueError):
    """An option is missing, unknown or has a value that is not allowed.

    The message names the option and what is allowed, and never contains a secret value.
    """


class OffsetFormatError(BacklogSourceError, ValueError):
    """An offset dict or split has an unknown version or a malformed shape."""


class MalformedEvent(BacklogSourceError, ValueError):
    """A control-topic message (a BacklogFinishEvent or a RecordSizesReport) that this
    release cannot read. It is a message another reader wrote, not an offset this query
    persisted: readers skip it, where a malformed offset fails the query."""


class MalformedRecordError(BacklogSourceError):
    """A Kafka record whose values the output schema cannot hold (for example a timestamp
    beyond what a Spark timestamp can represent). The message names the topic, partition,
    offset and the value, as Spark's ``KAFKA_MALFORMED_RECORD_TIMESTAMP`` does."""


class DataLossError(BacklogSourceError):
    """Records the query should have read are gone (``failOnDataLoss=true``).

    Raised for a partition that vanished, offsets that moved backwards, or a range whose
    records were deleted by retention before they were read. The message names the topic,
    partition and offsets.
    """


class KafkaUnavailableError(BacklogSourceError):
    """Kafka did not answer within the configured retries or timeouts. The message names the
    servers tried and the option that bounds the wait."""


class ControlTopicError(BacklogSourceError):
    """The control topic named by ``backlog.eventsTopic`` cannot be created, is missing, or
    changed (deleted and re-created) while the query ran."""


class SnapshotError(BacklogSourceError):
    """A snapshot is missing, malformed or does not fit the topic; the message says which."""


class ModeSwitchError(BacklogSourceError):
    """``start_backlog_aware`` could not start the query or switch its trigger."""


class SparkVersionError(BacklogSourceError):
    """The PySpark that registers or loads the source is older than this release supports;
    the message names both versions and what the older one lacks."""
