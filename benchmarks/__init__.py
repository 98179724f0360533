"""Benchmarks: measurements, never timed assertions.

Each module is one benchmark, run from the repository root as ``python -m benchmarks.<name>``
(or ``make bench-<name>``); ``--help`` says what it measures and its options. They share one
harness (:mod:`benchmarks.harness`: a Spark session as a user gets it, rotated rounds after
a warm-up, medians with their spread, latency from progress events, results writing) and
record each run as ``results/<benchmark>/<run name>.{json,md,png}``, with the command that
produced it. benchmarks/README.md holds the figures and what they mean.
"""

import os

# Benchmarks reach only loopback. Unless told otherwise, Spark binds its driver (RPC, block
# manager) to the host's first non-loopback interface ("your hostname resolves to a loopback
# address ... using <eth0's address> instead"); the sessions and jobs a benchmark starts
# inherit this. It changes the address Spark listens on, not what Spark does.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
