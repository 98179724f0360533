"""One exception tree for the whole project.

Every error the source raises derives from :class:`BacklogSourceError`, so a job can catch
them together. Errors raised on executors travel back to the driver by pickling, so every
class here keeps its message in ``args`` and pickles (confluent-kafka's own ``KafkaError``
objects are never stored; their text is copied in, after secrets are removed).
"""

from __future__ import annotations


class BacklogSourceError(Exception):
    """Root of every error raised by backlog-source."""


class ConfigError(BacklogSourceError, ValueError):
    """An option is missing, unknown or has a value that is not allowed.

    The message names the option and what is allowed, and never contains a secret value.
    """


class OffsetFormatError(BacklogSourceError, ValueError):
    """An offset dict, split or event has an unknown version or a malformed shape."""


class DataLossError(BacklogSourceError):
    """Records the query should have read are gone (``failOnDataLoss=true``).

    Raised for a partition that vanished, offsets that moved backwards, or a range whose
    records were deleted by retention before they were read. The message names the topic,
    partition and offsets.
    """


class KafkaUnavailableError(BacklogSourceError):
    """Kafka did not answer within the configured retries or timeouts."""


class ControlTopicError(BacklogSourceError):
    """The control topic named by ``backlog.eventsTopic`` cannot be created or used."""
