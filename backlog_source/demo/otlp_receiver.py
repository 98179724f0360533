"""Test and demo tooling: a minimal OTLP/HTTP trace and metrics receiver on loopback.

It accepts what OpenTelemetry's OTLP/HTTP exporters send (``POST /v1/traces`` and
``POST /v1/metrics``, protobuf, optionally gzip), decodes it with the ``opentelemetry-proto``
package, and keeps each span and each metric data point as a plain dict (spans optionally
appended to a JSONL file, points to a second one). Not a collector: no auth, no retries,
loopback only.

Usage::

    with OtlpReceiver() as receiver:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        ...
        receiver.wait_for(lambda spans: len(spans) >= 3, timeout=30)
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"


def _value(any_value) -> Any:
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in any_value.kvlist_value.values}
    return getattr(any_value, kind)


def _attributes(key_values) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in key_values}


def decode_spans(payload: bytes) -> list[dict[str, Any]]:
    """The spans of one ``ExportTraceServiceRequest`` as dicts (ids as lowercase hex)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(payload)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append({
                    "name": span.name,
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex() or None,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                    "attributes": _attributes(span.attributes),
                    "events": [
                        {"name": e.name, "at_ns": e.time_unix_nano, "attributes": _attributes(e.attributes)}
                        for e in span.events
                    ],
                    "status": {0: "unset", 1: "ok", 2: "error"}.get(span.status.code, "unset"),
                    "resource": resource,
                    "scope": scope_spans.scope.name,
                })
    return spans


def decode_points(payload: bytes) -> list[dict[str, Any]]:
    """The number data points of one ``ExportMetricsServiceRequest`` as dicts: the metric's
    name, unit and kind (``gauge`` or ``sum``), the point's value, attributes and time.
    Histograms and summaries are skipped (this package exports none)."""
    request = ExportMetricsServiceRequest()
    request.ParseFromString(payload)
    points = []
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind not in ("gauge", "sum"):
                    continue
                for point in getattr(metric, kind).data_points:
                    points.append({
                        "name": metric.name,
                        "unit": metric.unit,
                        "kind": kind,
                        "value": getattr(point, point.WhichOneof("value")) if point.WhichOneof("value") else None,
                        "attributes": _attributes(point.attributes),
                        "at_ns": point.time_unix_nano,
                        "resource": resource,
                        "scope": scope_metrics.scope.name,
                    })
    return points


class OtlpReceiver:
    """Collects spans exported to ``endpoint``; thread-safe; a context manager."""

    def __init__(self, jsonl_path: str | Path | None = None, port: int = 0,
                 metrics_jsonl_path: str | Path | None = None) -> None:
        self._spans: list[dict[str, Any]] = []
        self._points: list[dict[str, Any]] = []
        self._requests = 0
        self._cond = threading.Condition()
        self._jsonl = Path(jsonl_path) if jsonl_path else None
        self._metrics_jsonl = Path(metrics_jsonl_path) if metrics_jsonl_path else None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                path = self.path.rstrip("/")
                if path not in (TRACES_PATH, METRICS_PATH):
                    self.send_error(404, f"only {TRACES_PATH} and {METRICS_PATH} are served")
                    return
                try:
                    if path == TRACES_PATH:
                        receiver._add(receiver._spans, decode_spans(body), receiver._jsonl)
                    else:
                        receiver._add(receiver._points, decode_points(body), receiver._metrics_jsonl)
                except Exception as exc:  # process boundary: HTTP handler; the sender's problem (400)
                    self.send_error(400, f"not an OTLP export request: {exc}")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass  # quiet: the demo owns the terminal

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        """The value for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (exporters append ``/v1/traces`` and
        ``/v1/metrics``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def spans(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._spans)

    @property
    def points(self) -> list[dict[str, Any]]:
        """Every metric data point received, in arrival order."""
        with self._cond:
            return list(self._points)

    @property
    def requests(self) -> int:
        """Export requests received (spans or not)."""
        with self._cond:
            return self._requests

    def wait_for(self, condition: Callable[[list[dict[str, Any]]], bool], timeout: float) -> list[dict[str, Any]]:
        """The spans once ``condition(spans)`` holds; raises TimeoutError with what arrived."""
        return self._wait(self._spans, "spans", condition, timeout)

    def wait_for_points(self, condition: Callable[[list[dict[str, Any]]], bool],
                        timeout: float) -> list[dict[str, Any]]:
        """The metric data points once ``condition(points)`` holds; raises TimeoutError
        naming the metrics that arrived."""
        return self._wait(self._points, "metrics", condition, timeout)

    def _wait(self, items: list[dict[str, Any]], what: str, condition: Callable[[list[dict[str, Any]]], bool],
              timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not condition(list(items)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({item["name"] for item in items})
                    raise TimeoutError(f"{what} received after {timeout} s did not satisfy the condition: {names}")
                self._cond.wait(left)
            return list(items)

    def _add(self, items: list[dict[str, Any]], received: list[dict[str, Any]], jsonl: Path | None) -> None:
        """Keep ``received`` (spans or points) in ``items`` and append them to ``jsonl``."""
        with self._cond:
            self._requests += 1
            items.extend(received)
            if jsonl is not None and received:
                with jsonl.open("a") as out:
                    for item in received:
                        out.write(json.dumps(item) + "\n")
            self._cond.notify_all()

    def start(self) -> "OtlpReceiver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "OtlpReceiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
