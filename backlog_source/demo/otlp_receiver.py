"""Test and demo tooling: a minimal OTLP/HTTP trace receiver on loopback.

It accepts what OpenTelemetry's OTLP/HTTP exporters send (``POST /v1/traces``, protobuf,
optionally gzip), decodes it with the ``opentelemetry-proto`` package, and keeps each span
as a plain dict (optionally appending it to a JSONL file). Not a collector: no auth, no
retries, loopback only.

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

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

TRACES_PATH = "/v1/traces"


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


class OtlpReceiver:
    """Collects spans exported to ``endpoint``; thread-safe; a context manager."""

    def __init__(self, jsonl_path: str | Path | None = None, port: int = 0) -> None:
        self._spans: list[dict[str, Any]] = []
        self._requests = 0
        self._cond = threading.Condition()
        self._jsonl = Path(jsonl_path) if jsonl_path else None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                if self.path.rstrip("/") != TRACES_PATH:
                    self.send_error(404, f"only {TRACES_PATH} is served")
                    return
                try:
                    spans = decode_spans(body)
                except Exception as exc:  # a malformed request is the sender's problem
                    self.send_error(400, f"not an ExportTraceServiceRequest: {exc}")
                    return
                receiver._add(spans)
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
        """The value for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (exporters append ``/v1/traces``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def spans(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._spans)

    @property
    def requests(self) -> int:
        """Export requests received (spans or not)."""
        with self._cond:
            return self._requests

    def wait_for(self, condition: Callable[[list[dict[str, Any]]], bool], timeout: float) -> list[dict[str, Any]]:
        """The spans once ``condition(spans)`` holds; raises TimeoutError with what arrived."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not condition(list(self._spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted(s["name"] for s in self._spans)
                    raise TimeoutError(f"spans received after {timeout} s did not satisfy the condition: {names}")
                self._cond.wait(left)
            return list(self._spans)

    def _add(self, spans: list[dict[str, Any]]) -> None:
        with self._cond:
            self._requests += 1
            self._spans.extend(spans)
            if self._jsonl is not None and spans:
                with self._jsonl.open("a") as out:
                    for span in spans:
                        out.write(json.dumps(span) + "\n")
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
