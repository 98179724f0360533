"""Tooling for tests, benchmarks and the demo: the Apache Kafka launcher, the embedded Tansu
broker, a request-counting proxy and a local OTLP receiver.

Nothing in the source's runtime path imports this package; users with a real cluster and a
real collector never need it.
"""
