"""Export :class:`~backlog_source.metrics.state.BacklogMetrics` with the OpenTelemetry SDK,
configured only by the standard variables, as the traces are.

Which process: the user's driver program (the metrics are the session's; executors and the
planner's worker export none). Off unless asked for: ``OTEL_METRICS_EXPORTER`` (``otlp``,
``console``, ``prometheus``, ``none``), or, when it is unset, ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``; ``OTEL_SDK_DISABLED=true`` turns it off. With
nothing set the SDK is never imported. Every instrument is observable: the SDK's reader
(``PeriodicExportingMetricReader``, every ``OTEL_METRIC_EXPORT_INTERVAL`` ms, 60 s by
default) asks :class:`BacklogMetrics` for the current values on its own thread, so the
listener's thread only updates a dictionary. Exporting never raises into the query.

``prometheus`` (the ``prometheus`` extra: OpenTelemetry's Prometheus exporter) serves the
metrics for a Prometheus to scrape, at ``http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT/metrics``
(``localhost:9464`` by default, as the specification says), from an HTTP server thread of the
driver program; each scrape observes the values then. The server and its registry are this
exporter's own, so a second exporter after :meth:`MetricsExport.shutdown` can take the port again.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping

from backlog_source.core import __version__
from backlog_source.core.errors import ConfigError
from backlog_source.core.tracing import exporter as tracing_exporter
from backlog_source.metrics import names
from backlog_source.metrics.state import BacklogMetrics

log = logging.getLogger(__name__)

SIGNAL = "metrics"
#: Observed as cumulative sums; the others are gauges.
COUNTERS = (names.CATCH_UP_BATCHES, names.RECORDS_IN, names.BYTES_IN, names.MODE_SWITCHES)
SHUTDOWN_TIMEOUT_MS = 10_000
#: The specification's defaults for the Prometheus exporter's server.
PROMETHEUS_HOST, PROMETHEUS_PORT = "localhost", 9464


def exporter_names(env: Mapping[str, str] | None = None) -> list[str]:
    """The metric exporters the environment asks for (empty: metrics off). Raises
    :class:`ConfigError` naming the variable for an unknown exporter or protocol, or for
    ``grpc`` without the gRPC exporter installed."""
    found = tracing_exporter.exporter_names(env, SIGNAL)
    if "otlp" in found and tracing_exporter.otlp_protocol(env, SIGNAL) == "grpc":
        tracing_exporter.grpc_exporter_class(SIGNAL)
    if "prometheus" in found:
        prometheus_address(env)
        _prometheus_reader_class()
    return found


def prometheus_address(env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Where the Prometheus exporter serves: ``OTEL_EXPORTER_PROMETHEUS_HOST`` and
    ``OTEL_EXPORTER_PROMETHEUS_PORT``. Raises :class:`ConfigError` naming the variable for a
    port that is not one."""
    env = os.environ if env is None else env
    host = (env.get("OTEL_EXPORTER_PROMETHEUS_HOST") or "").strip() or PROMETHEUS_HOST
    raw = (env.get("OTEL_EXPORTER_PROMETHEUS_PORT") or "").strip() or str(PROMETHEUS_PORT)
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"OTEL_EXPORTER_PROMETHEUS_PORT={raw!r} is not a port; use a number from 1 to 65535")
    return host, int(raw)


def _prometheus_reader_class():
    """OpenTelemetry's ``PrometheusMetricReader``; raises :class:`ConfigError` saying how to
    install it when the ``prometheus`` extra is missing."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
    except ImportError:
        raise ConfigError("OTEL_METRICS_EXPORTER=prometheus needs the Prometheus exporter: "
                          "pip install 'backlog-source[prometheus]'") from None
    return PrometheusMetricReader


class MetricsExport:
    """One meter provider exporting one :class:`BacklogMetrics`; ``flush`` and ``shutdown``
    never raise."""

    def __init__(self, metrics: BacklogMetrics, exporters: list[str]) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        self._server = None
        # The server first: a port it cannot take fails before any reader's thread starts.
        readers = [self._serve_prometheus()] if "prometheus" in exporters else []
        readers += [PeriodicExportingMetricReader(_exporter(name)) for name in exporters if name != "prometheus"]
        self.provider = MeterProvider(metric_readers=readers, resource=tracing_exporter.service_resource())
        meter = self.provider.get_meter(names.METER, __version__)
        for instrument in names.ALL:
            create = meter.create_observable_counter if instrument in COUNTERS else meter.create_observable_gauge
            create(instrument.name, callbacks=[_callback(metrics, instrument)], unit=instrument.unit,
                   description=instrument.description)
        self._shut = False
        atexit.register(self.shutdown)

    def _serve_prometheus(self):
        """A Prometheus reader on a registry of its own, served over HTTP. Raises
        :class:`ConfigError` naming the variables when the address cannot be served."""
        from prometheus_client import CollectorRegistry, start_http_server

        host, port = prometheus_address()
        registry = CollectorRegistry(auto_describe=True)
        reader = _prometheus_reader_class()(registry=registry)
        try:
            self._server, _ = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ConfigError(f"the Prometheus exporter cannot serve on {host}:{port} ({exc.strerror or exc}): "
                              "choose another OTEL_EXPORTER_PROMETHEUS_PORT or OTEL_EXPORTER_PROMETHEUS_HOST") from None
        self.prometheus_address = (host, self._server.server_address[1])
        log.info("backlog metrics are served for Prometheus at http://%s:%d/metrics", *self.prometheus_address)
        return reader

    def flush(self, timeout_ms: int = SHUTDOWN_TIMEOUT_MS) -> bool:
        """Collect and export now; False when that did not finish in time or failed."""
        try:
            return bool(self.provider.force_flush(timeout_ms))
        except Exception as exc:  # process boundary: a telemetry exporter; exporting must not fail the query
            log.warning("could not export metrics: %s", exc)
            return False

    def shutdown(self) -> None:
        """Export a last time and stop the reader's thread. Idempotent."""
        if self._shut:
            return
        self._shut = True
        try:
            self.provider.shutdown(timeout_millis=SHUTDOWN_TIMEOUT_MS)
        except Exception as exc:  # process boundary: a telemetry exporter's cleanup
            log.debug("metrics shutdown: %s", exc)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def start(metrics: BacklogMetrics) -> MetricsExport | None:
    """Export ``metrics`` as the environment asks, or None when metrics are off. A bad
    setting raises :class:`ConfigError` (called where it should stop the job early)."""
    exporters = exporter_names()
    return MetricsExport(metrics, exporters) if exporters else None


def _callback(metrics: BacklogMetrics, instrument: names.Instrument):
    from opentelemetry.metrics import Observation

    def observe(options):
        try:
            return [Observation(value, attributes) for value, attributes in metrics.observe(instrument)]
        except Exception as exc:  # process boundary: the reader's thread loses a point, not itself
            log.warning("could not observe %s: %s", instrument.name, exc)
            return []

    return observe


def _exporter(name: str):
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if tracing_exporter.otlp_protocol(None, SIGNAL) == "grpc":
        return tracing_exporter.grpc_exporter_class(SIGNAL)()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()
