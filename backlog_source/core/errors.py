"""One exception tree for the whole project.

Every error backlog-source raises derives from :class:`BacklogSourceError`, so a job can
catch them together. Errors raised on executors travel back to the driver by pickling, so
every class here keeps its message in ``args`` and pickles (confluent-kafka's own
``KafkaError`` objects are never stored; their text is copied in, after secrets are
removed).

::

    BacklogSourceError
    ├── ConfigError            an option, variable or argument is not allowed (also a ValueError)
    ├── OffsetFormatError      a persisted value (offset dict, split) has an unknown version or shape
    │   └── MalformedEvent     a control-topic message that is not a BacklogFinishEvent we understand
    ├── MalformedRecordError   a Kafka record the output schema cannot hold (Spark fails the same way)
    ├── DataLossError          records the query should have read are gone
    ├── KafkaUnavailableError  Kafka did not answer in time
    ├── TopicsDeletedError     topics a request named were deleted while it ran
    ├── ControlTopicError      the control topic cannot be created, is missing, or changed
    ├── SnapshotError          a snapshot is missing, malformed or does not fit
    ├── ModeSwitchError        start_backlog_aware could not start or switch the query
    ├── EmbeddedBrokerError    the embedded test/demo broker could not be started
    └── DemoError              the demo could not finish
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


class MalformedEvent(OffsetFormatError):
    """A control-topic message that is not a BacklogFinishEvent this release understands."""


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


class TopicsDeletedError(BacklogSourceError):
    """Topics a request named no longer exist: deleted while the query was asking Kafka
    about them. ``topics`` names them. The planner catches it and applies the data-loss
    rule to their partitions (as it does for a topic gone before the request); elsewhere it
    reaches the user with this message."""

    def __init__(self, topics: "list[str] | tuple[str, ...]") -> None:
        self.topics = tuple(sorted(topics))
        super().__init__(self.topics)

    def __str__(self) -> str:
        return (f"topic(s) {', '.join(self.topics)} no longer exist: deleted while the query asked Kafka for "
                "their offsets")


class ControlTopicError(BacklogSourceError):
    """The control topic named by ``backlog.eventsTopic`` cannot be created, is missing, or
    changed (deleted and re-created) while the query ran."""


class SnapshotError(BacklogSourceError):
    """A snapshot is missing, malformed or does not fit the topic; the message says which."""


class ModeSwitchError(BacklogSourceError):
    """``start_backlog_aware`` could not start the query or switch its trigger."""


class EmbeddedBrokerError(BacklogSourceError):
    """The embedded broker (tests, benchmarks, demo) could not be started."""


class DemoError(BacklogSourceError):
    """The demo could not finish; the message says why."""
