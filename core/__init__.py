"""The bottom layer of backlog-source: what every other package needs, and nothing above it.

Errors, option parsing and settings, the Kafka client configuration and the checks of
Kafka's answers, buckets and topic identities, versioned codecs, the output schema,
durations, snapshot manifests, span names, trace context and span export. It imports no
other package of the project; ``split``, ``events``, ``enumerator``, ``reader`` and
``backlog_source`` build on it (docs/DESIGN.md, "The map").
"""

#: The package version; also the instrumentation scope version of exported spans.
__version__ = "0.3.0"
