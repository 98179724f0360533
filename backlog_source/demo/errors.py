"""The errors of the demo and of the brokers it starts (Apache Kafka, the embedded Tansu
broker); tests and benchmarks start the same brokers. Never raised on a query's path."""

from __future__ import annotations

from backlog_source.core.errors import BacklogSourceError


class EmbeddedBrokerError(BacklogSourceError):
    """The embedded broker (tests, benchmarks, demo) could not be started."""


class DemoError(BacklogSourceError):
    """The demo could not finish; the message says why."""
