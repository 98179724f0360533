"""The benchmarks' one harness: what every benchmark shares, one module a concern.

* :mod:`.broker_and_spark`: Apache Kafka and a Spark session as a user gets it, started
  (and stopped) for a run, with its progress log and a warm-up query;
* :mod:`.pyspark_layout`: where an installed PySpark keeps what its Python processes import;
* :mod:`.progress`: every progress event of a query, and what they say: batch ends, commit
  times, Spark's steps per batch;
* :mod:`.record_latency`: end-to-end latency of each record, from progress events and what a
  live producer delivered (the definition is that module's docstring);
* :mod:`.traffic`: live topics, the live producer in its own process, log end offsets,
  catching up with live traffic;
* :mod:`.runs`: running a measured query (``Trigger.AvailableNow`` drains, polling) and the
  rotated order of configurations in a round;
* :mod:`.stats`: percentiles, medians with their spread, formatting figures;
* :mod:`.results`: where a run's results go (JSON, Markdown, PNG) and the batch timeline
  pictures;
* :mod:`.costs`: whose cost a run is: memory peaks, CPU per process kind, Spark's task
  metrics, py-spy profiles of the Python workers;
* :mod:`.bare_consumers`: bare confluent-kafka loops, the baseline without Spark;
* :mod:`.trivial_source`: a Python streaming source that does nothing, PySpark's own cost.

The sink is ``noop`` unless a benchmark says otherwise, so the figures are the source's and
Spark's, not a sink's.
"""
