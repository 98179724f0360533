"""Benchmarks: measurements, never timed assertions.

Each module is one benchmark, run from the repository root as ``python -m benchmarks.<name>``
(or ``make bench-<name>``); ``--help`` says what it measures and its options. They share one
harness (:mod:`benchmarks.harness`: a Spark session as a user gets it, rotated rounds after
a warm-up, medians with their spread, latency from progress events, results writing) and
record each run as ``results/<benchmark>/<run name>.{json,md,png}``, with the command that
produced it. benchmarks/README.md holds the figures and what they mean.
"""
