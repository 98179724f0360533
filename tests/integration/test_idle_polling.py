"""An idle source under a ``0 seconds`` trigger: Spark asks it for new offsets about every
10 ms; the source turns at most one poll per ``backlog.minPollIntervalMs`` into broker
requests. Counted through a proxy in front of the broker, not timed: the bound is checked
against the wall time that actually passed, so a slow machine only makes it looser."""

from __future__ import annotations

import time

from tests.integration.helpers import make_topic, reader, settle, start_noop, wait_for_progress
from tests.support.kafka_proxy import counting_broker

#: A plan asks for the subscribed topics' partitions (Metadata) and their latest offsets
#: (ListOffsets): two requests to a one-broker cluster (docs/reading.md, "Idle polling").
REQUESTS_PER_PLAN = 2


def test_an_idle_zero_second_trigger_asks_kafka_at_most_once_per_min_poll_interval(spark, tmp_path, topic_name):
    interval_ms = 200
    with counting_broker() as (broker, proxy):
        produced = make_topic(broker, topic_name, 2, per_partition=5)
        df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
                    **{"backlog.minPollIntervalMs": interval_ms})
        query = start_noop(df, tmp_path, trigger="0 seconds")
        try:
            wait_for_progress(query, lambda p: p["numInputRows"] == produced, what="the records")
            before, started = proxy.counts(), time.monotonic()
            settle(3.0)  # idle: Spark keeps polling the source
            window, elapsed = proxy.counts() - before, time.monotonic() - started
            # The plans' requests; the control topic is read once after the first batch (it
            # carried the buckets to their boundaries), not per poll.
            requests = window[("backlog-source-admin", "Metadata")] + window[("backlog-source-admin", "ListOffsets")]
            assert query.exception() is None
        finally:
            query.stop()
    plans = elapsed / (interval_ms / 1000) + 1
    assert 0 < requests <= REQUESTS_PER_PLAN * plans, (
        f"{requests} requests in {elapsed:.1f} s, bound {REQUESTS_PER_PLAN} per {interval_ms} ms: {dict(window)}")
