"""Tracing's shared parts: names, context and export. Each span is built beside the code it
describes: ``backlog.phase`` and ``backlog.bucket`` in :mod:`backlog_source.enumerator.phase_spans`,
``backlog.read`` in :mod:`backlog_source.reader.read_span`, ``backlog.mode_switch`` in
:mod:`backlog_source.mode_switch.switch_span`.

* :mod:`.names`: every span, event and attribute name (a public interface).
* :mod:`.context`: trace and span ids, W3C ``traceparent``, the finished-span record.
* :mod:`.exporter`: hands finished spans to the OpenTelemetry SDK when ``OTEL_*`` settings
  ask for it, in whatever process runs (driver, planner worker, executor worker).

No module here imports the OpenTelemetry SDK at module level: tracing costs nothing until a
process turns it on.
"""
