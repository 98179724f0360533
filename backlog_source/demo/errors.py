"""The errors of the demo and of the brokers it starts (Apache Kafka, the embedded Tansu
broker); tests and benchmarks start the same brokers. Never raised on a query's path."""

from __future__ import annotations

from backlog_source.core.errors import BacklogSourceError


class EmbeddedBrokerError(BacklogSourceError):
    """The embedded broker (tests, benchmarks, demo) could not be started."""


class DemoError(BacklogSourceError):
    """The demo could not finish; the message says why."""


def interruption_in(exc: BaseException) -> BaseException | None:
    """The interruption (a KeyboardInterrupt, the demo's ``StopRequested``: any BaseException
    that is not an Exception) ``exc`` was raised from, if any; a broad ``except Exception``
    re-raises it rather than carry on.

    A signal handler raises wherever the main thread is. Inside a C extension that calls back
    into Python (confluent-kafka's ``create_topics``, for one) the handler's exception comes
    back as ``SystemError: ... returned a result with an exception set``, caused by it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if not isinstance(exc, Exception):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
