"""Export finished spans with the OpenTelemetry SDK, configured only by standard variables.

Which process: any. Each process that exports (the enumerator's Python worker on the
driver, executors' Python workers, the driver program running the mode-switch controller)
builds its own tracer provider on first use, from its own environment:

* ``OTEL_SDK_DISABLED=true``: nothing is exported.
* ``OTEL_TRACES_EXPORTER``: ``otlp``, ``console`` or ``none`` (comma-separated for several).
  When unset, spans are exported over OTLP only if ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; with nothing set, nothing is exported and
  the only cost is one environment lookup per process.
* ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``: ``http/protobuf`` (default) or ``grpc`` (needs
  the ``otlp-grpc`` extra). Endpoint, headers, timeout, compression, ``OTEL_SERVICE_NAME``,
  ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` and ``OTEL_BSP_*`` are read by the
  SDK and exporters themselves, as everywhere else.

Spans are batched in the background (``BatchSpanProcessor``); :func:`flush` forces them out.
Readers flush before a split's generator returns, so a short-lived worker loses nothing.
Exporting never raises into the caller: a broken collector costs spans, not the query.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import signal
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from backlog_source.core import __version__
from backlog_source.core.errors import ConfigError
from backlog_source.core.tracing.context import SpanRecord

# The OpenTelemetry SDK and exporters are imported only once a process turns tracing on:
# with no OTEL_* variable set, tracing must cost nothing but an environment lookup, and
# importing the SDK and the OTLP exporter costs every executor's Python worker ~0.1 s.

log = logging.getLogger(__name__)

EXPORTERS = ("otlp", "console", "none")
#: The exporters each signal supports: Prometheus is pulled, so only metrics have it.
SIGNAL_EXPORTERS = {"traces": EXPORTERS, "metrics": (*EXPORTERS, "prometheus")}
PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_SERVICE_NAME = "backlog-source"
#: Upper bound of a reader's flush at the end of a split (the exporter's own timeout,
#: OTEL_EXPORTER_OTLP_TIMEOUT, bounds each attempt).
FLUSH_TIMEOUT_MS = 30_000



class _Unset:
    """This process has not read its OTEL_* settings yet."""


_UNSET = _Unset()
_lock = threading.Lock()
_state: "_Tracing | None | _Unset" = _UNSET
_state_pid: int | None = None
_warned = False


def exporter_names(env: Mapping[str, str] | None = None, signal: str = "traces") -> list[str]:
    """The exporters the environment asks for, for ``signal`` (``"traces"`` or
    ``"metrics"``; empty: that signal is off).

    ``OTEL_{SIGNAL}_EXPORTER`` names them; when it is unset, OTLP is used only if
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_{SIGNAL}_ENDPOINT`` is set.
    Raises :class:`ConfigError` naming the variable for an unknown exporter or protocol.
    """
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    raw = env.get(variable)
    if raw is None or not raw.strip():
        endpoint = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        names = ["otlp"] if endpoint else []
    else:
        names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    supported = SIGNAL_EXPORTERS[signal]
    unknown = [n for n in names if n not in supported]
    if unknown:
        raise ConfigError(
            f"{variable}={raw!r} names unknown exporter(s) {', '.join(unknown)}; "
            f"backlog-source supports {', '.join(supported)}"
        )
    names = [n for n in names if n != "none"]
    if "otlp" in names:
        otlp_protocol(env, signal)
    return names


def otlp_protocol(env: Mapping[str, str] | None = None, signal: str = "traces") -> str:
    env = os.environ if env is None else env
    variable = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    protocol = env.get(variable)
    if not protocol:
        variable = "OTEL_EXPORTER_OTLP_PROTOCOL"
        protocol = env.get(variable) or "http/protobuf"
    protocol = protocol.strip().lower()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{variable}={protocol!r} is not supported; use one of {', '.join(PROTOCOLS)}")
    return protocol


def service_resource():
    """The OpenTelemetry resource of this process: the SDK's (``OTEL_SERVICE_NAME``,
    ``OTEL_RESOURCE_ATTRIBUTES``), named ``backlog-source`` when no service name is set."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create()
    if resource.attributes.get(SERVICE_NAME, "").startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def validate_environment() -> None:
    """Check this process's OTEL_* settings; raises :class:`ConfigError` naming the variable.

    Called where a mistake should stop the job early (the source's ``load()``,
    :func:`~backlog_source.mode_switch.start_backlog_aware`); executors only log it.
    """
    if "otlp" in exporter_names() and otlp_protocol() == "grpc":
        grpc_exporter_class()


def enabled() -> bool:
    """True when this process exports spans (builds the exporter on first call)."""
    return _tracing() is not None


def export(records: Iterable[SpanRecord]) -> None:
    """Hand finished spans to the exporter (no-op when tracing is off). Never raises."""
    tracing = _tracing()
    if tracing is None:
        return
    for record in records:
        try:
            tracing.emit(record)
        except Exception as exc:  # process boundary: a telemetry exporter; telemetry must not fail the query
            log.warning("could not export span %s: %s", record.name, exc)


def flush(timeout_ms: int = FLUSH_TIMEOUT_MS) -> bool:
    """Export every span handed over so far; False if that did not finish in time."""
    tracing = _tracing(build=False)
    if tracing is None:
        return True
    try:
        return tracing.provider.force_flush(timeout_ms)
    except Exception as exc:  # process boundary: a telemetry exporter; telemetry must not fail the query
        log.warning("could not flush spans: %s", exc)
        return False


def reset() -> None:
    """Flush and drop this process's exporter; the next call reads the environment again.

    For programs (and tests) that change OTEL_* variables at run time.
    """
    global _state, _state_pid
    with _lock:
        state, _state, _state_pid = _state, _UNSET, None
    if isinstance(state, _Tracing):
        state.provider.shutdown()


def _tracing(build: bool = True) -> "_Tracing | None":
    global _state, _state_pid, _warned
    if _state_pid == os.getpid() and not isinstance(_state, _Unset):
        return _state
    if not build:
        return None
    with _lock:
        if _state_pid != os.getpid() or isinstance(_state, _Unset):
            try:
                names = exporter_names()
                _state = _Tracing(names) if names else None
            except Exception as exc:  # process boundary: telemetry must not fail an executor's read
                if not _warned:
                    log.error("tracing disabled in this process: %s", exc)
                    _warned = True
                _state = None
            _state_pid = os.getpid()
            if isinstance(_state, _Tracing):
                atexit.register(_state.provider.shutdown)
                _flush_on_sigterm()
    return _state  # type: ignore[return-value]


#: How long a SIGTERM waits for queued spans to be exported before the process ends.
SIGTERM_FLUSH_MS = 5_000


def _flush_on_sigterm() -> None:
    """Export queued spans when the process is terminated, then terminate as before.

    Spark stops the driver-side Python worker of a stream reader (the enumerator) by
    destroying the process (SIGTERM), without calling the reader's ``stop()``; spans still in
    the batch processor's queue, such as those of the phase that just ended, were lost (seen
    in CI). Installed only in a main thread whose SIGTERM handling is the default, so it
    never replaces a handler someone else installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def handler(signum, frame) -> None:
        flush(SIGTERM_FLUSH_MS)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


#: The gRPC OTLP exporter class of each signal: (module under
#: ``opentelemetry.exporter.otlp.proto.grpc``, class).
_GRPC_EXPORTERS = {"traces": ("trace_exporter", "OTLPSpanExporter"),
                   "metrics": ("metric_exporter", "OTLPMetricExporter")}


def grpc_exporter_class(signal: str = "traces"):
    """The gRPC OTLP exporter class for ``signal``; raises :class:`ConfigError` saying how to
    install it when the ``otlp-grpc`` extra is missing."""
    module, name = _GRPC_EXPORTERS[signal]
    try:
        return getattr(importlib.import_module(f"opentelemetry.exporter.otlp.proto.grpc.{module}"), name)
    except ImportError:
        raise ConfigError(
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the gRPC exporter: pip install 'backlog-source[otlp-grpc]' "
            "(or use http/protobuf)"
        ) from None


class _Tracing:
    """One process's tracer provider; spans get the ids their records carry."""

    def __init__(self, exporter_names: list[str]) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self._ids = _preset_id_generator()
        self.provider = TracerProvider(resource=service_resource(), id_generator=self._ids)
        for name in exporter_names:
            self.provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
        self.tracer = self.provider.get_tracer("backlog_source", __version__)

    def emit(self, record: SpanRecord) -> None:
        from opentelemetry import context as context_api
        from opentelemetry import trace

        if record.parent is not None:
            parent = trace.SpanContext(
                record.parent.trace_id, record.parent.span_id, is_remote=True,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )
            ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent))
        else:
            ctx = context_api.Context()
        with self._ids.preset(record.ids.trace_id, record.ids.span_id):
            span = self.tracer.start_span(
                record.name, context=ctx, attributes=dict(record.attributes), start_time=record.start_ns
            )
        for event in record.events:
            span.add_event(event.name, dict(event.attributes), timestamp=event.at_ns)
        if record.error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, record.error))
        span.end(end_time=record.end_ns)


def _exporter(name: str):
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if otlp_protocol() == "grpc":
        return grpc_exporter_class()()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _preset_id_generator():
    """Random ids, except inside ``preset(trace_id, span_id)``, where the next span gets them.

    The SDK asks its id generator for a trace id (roots only) and a span id on every
    ``start_span``; presetting them is how a span that started elsewhere, whose ids splits
    and offsets already carry, is exported with those ids.
    """
    from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

    class PresetIdGenerator(IdGenerator):
        def __init__(self) -> None:
            self._random = RandomIdGenerator()
            self._local = threading.local()

        @contextmanager
        def preset(self, trace_id: int, span_id: int) -> Iterator[None]:
            self._local.ids = (trace_id, span_id)
            try:
                yield
            finally:
                self._local.ids = None

        def generate_trace_id(self) -> int:
            ids = getattr(self._local, "ids", None)
            return ids[0] if ids else self._random.generate_trace_id()

        def generate_span_id(self) -> int:
            ids = getattr(self._local, "ids", None)
            return ids[1] if ids else self._random.generate_span_id()

    return PresetIdGenerator()
