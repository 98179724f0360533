"""Tracing, in one place: domain code reports what happened, this package makes the spans.

* :mod:`.names`: every span, event and attribute name (a public interface).
* :mod:`.context`: trace and span ids, W3C ``traceparent``, the finished-span record.
* :mod:`.spans`: the spans themselves, built from what the enumerator, the readers and
  the mode switch report (a bucket finished, a read crossed its boundary, a switch took
  effect): the only code that knows which attributes a span carries.
* :mod:`.exporter`: hands finished spans to the OpenTelemetry SDK when ``OTEL_*`` settings
  ask for it, in whatever process runs (driver, planner worker, executor worker).

No module here imports the OpenTelemetry SDK at module level: tracing costs nothing until a
process turns it on.
"""
