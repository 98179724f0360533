"""start_backlog_aware on Apache Kafka and real Spark: in place, and by restart."""

from __future__ import annotations

import json
import threading
from datetime import datetime

import pytest
from pyspark.sql.streaming import StreamingQueryListener

from backlog_source import ConfigError, start_backlog_aware
from backlog_source.mode_switch import switchers
from backlog_source.mode_switch.writer_info import describe_writer
from tests.integration.helpers import fill, log_end_offsets, make_topic, reader, start_aware, wait_for

pytestmark = pytest.mark.integration


def end_offset(progress) -> dict:
    return json.loads(progress["sources"][0]["endOffset"])


def positions(query, topic):
    progress = query.lastProgress
    if not progress or not progress["sources"][0]["endOffset"]:
        return None
    return end_offset(progress)["positions"].get(topic)


def wait_caught_up(handle, broker, topic, timeout=180):
    def done():
        end = {str(p): o for p, o in log_end_offsets(broker, topic).items()}
        return positions(handle.query, topic) == end

    wait_for(done, timeout, "the query to reach the log end")


def trigger_times(progresses) -> list[float]:
    return [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() for p in progresses]


class LiveTraffic:
    """Records into ``partitions`` partitions from a thread, in small bursts, until stopped."""

    def __init__(self, broker, topic, partitions, start, per_burst=50):
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(broker, topic, partitions, start, per_burst))

    def _run(self, broker, topic, partitions, n, per_burst):
        while not self.stop_event.is_set():
            fill(broker, topic, partitions, per_burst, start=n)
            n += per_burst
            self.stop_event.wait(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(timeout=120)


def trigger_slots(progresses, interval_s) -> list[int]:
    """The grid slot (``floor(start / interval)``) each trigger started in."""
    interval_ms = round(interval_s * 1000)
    return [round(start * 1000) // interval_ms for start in trigger_times(progresses)]


def assert_paced_by(progresses, interval_s):
    """Spark's ProcessingTimeExecutor starts a trigger at the next multiple of the interval,
    or at once when the previous batch overran it (so in a later slot): at most one trigger
    starts in each slot of the grid, however loaded the machine. A 0 s trigger that reads
    records arriving faster than the interval starts several in one slot."""
    slots = trigger_slots(progresses, interval_s)
    assert slots == sorted(set(slots)), [p["timestamp"] for p in progresses]


def spark_trigger_interval_ms(query) -> int:
    """The interval the running query's trigger executor holds now, read from the JVM."""
    executor = switchers._java_query(query).triggerExecutor()
    field = executor.getClass().getDeclaredField(switchers.INTERVAL_FIELD)
    field.setAccessible(True)
    return int(field.getLong(executor))


def assert_low_latency_pacing(handle, broker, topic, interval_s, probes=5):
    """The running executor holds the low-latency interval, and triggers keep to its grid:
    single records produced back to back (each as soon as the previous one was read) would
    start several triggers per slot under a 0 s trigger; here each waits for its slot."""
    assert spark_trigger_interval_ms(handle.query) == round(interval_s * 1000)
    seen = len(handle.query.recentProgress)
    for probe in range(probes):
        fill(broker, topic, 1, 1, start=5_000_000 + probe)
        count = len(handle.query.recentProgress)
        wait_for(lambda: len(handle.query.recentProgress) > count, 60, "the probe's batch")
    assert_paced_by(handle.query.recentProgress[seen - 1:], interval_s)


def writer_of(df, sink, out, ckpt):
    if sink == "parquet":
        writer = df.writeStream.format("parquet").option("path", str(out))
    else:
        def write_batch(batch_df, batch_id):
            # Idempotent per batch id, as foreachBatch functions must be for exactly-once.
            batch_df.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

        writer = df.writeStream.foreachBatch(write_batch)
    return writer.option("checkpointLocation", str(ckpt))


def assert_exactly_once(spark, broker, topic, out):
    expected = sum(log_end_offsets(broker, topic).values())
    rows = spark.read.parquet(str(out)).select("partition", "offset")
    assert rows.count() == expected
    assert rows.distinct().count() == expected


@pytest.mark.parametrize("sink", ["parquet", "foreachBatch"])
def test_in_place_switches_keep_the_query_and_run_and_lose_nothing(spark, broker, topic_name, tmp_path, sink):
    """Backlog -> low latency -> re-entry -> low latency, all in place, under live traffic:
    one query object, one run id, the low-latency cadence after the switch, exactly once."""
    make_topic(broker, topic_name, 2, per_partition=30_000)
    out = tmp_path / "out"
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=2_000,
                **{"backlog.maxOffsetsPerTrigger": 20_000, "backlog.reenterLag": 10_000})
    handle = start_aware(writer_of(df, sink, out, tmp_path / "ckpt"), "0 seconds", "1 second")
    query, run_id = handle.query, str(handle.query.runId)
    try:
        assert handle.switch_method == "in-place" and handle.mode == "high-throughput"
        with LiveTraffic(broker, topic_name, 2, start=30_000):
            wait_for(lambda: handle.mode == "low-latency", 180, "the switch to low latency")
            # A burst well above backlog.reenterLag, in one go: had it trickled in, the query
            # could catch up halfway and enter backlog twice.
            fill(broker, topic_name, 2, 25_000, start=1_000_000, burst=True)
            wait_for(lambda: len(handle.transitions) == 3, 180, "re-entry and its end")
            wait_for(lambda: handle.transitions[-1].effective_seconds is not None, 60, "the last switch to take effect")
        wait_caught_up(handle, broker, topic_name)
        assert_low_latency_pacing(handle, broker, topic_name, interval_s=1.0)
        assert [(t.from_mode, t.to_mode, t.method) for t in handle.transitions] == [
            ("high-throughput", "low-latency", "in-place"), ("low-latency", "high-throughput", "in-place"),
            ("high-throughput", "low-latency", "in-place")]
        assert handle.query is query and str(query.runId) == run_id  # never restarted
        assert [q.id for q in spark.streams.active] == [query.id]
        last_switch = handle.transitions[-1]
        effective = last_switch.at + last_switch.effective_seconds
        assert_paced_by([p for p in query.recentProgress if trigger_times([p])[0] >= effective], 1.0)
        batch_ids = [p["batchId"] for p in query.recentProgress]
        assert batch_ids == sorted(set(batch_ids))  # no batch interrupted or replayed
    finally:
        handle.stop()
    assert_exactly_once(spark, broker, topic_name, out)


def test_a_restart_after_downtime_is_backlog_again(spark, broker, topic_name, tmp_path):
    """The headline case (issue 12): drain with backlog.maxOffsetsPerTrigger=10000, reach low
    latency, stop; 120k records arrive; restart on the same checkpoint with the same
    options: high-throughput with 10k batches, then low latency at the new boundaries.
    (Issue 12's figures, 300k records in 20k batches, made fifteen capped batches; twelve
    show the same at less than half the reading.)"""
    make_topic(broker, topic_name, 2, per_partition=10_000)
    out = tmp_path / "out"

    def start():
        df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest",
                    **{"backlog.maxOffsetsPerTrigger": 10_000})
        return start_aware(writer_of(df, "parquet", out, tmp_path / "ckpt"), "0 seconds", "1 second")

    handle = start()
    try:
        wait_for(lambda: handle.mode == "low-latency", 180, "the first catch-up")
        wait_caught_up(handle, broker, topic_name)
    finally:
        handle.stop()
    fill(broker, topic_name, 2, 60_000, start=10_000)  # 120k records while the job is down
    handle = start()
    try:
        assert handle.mode == "high-throughput"
        wait_for(lambda: handle.mode == "low-latency", 240, "the switch after the restart's backlog")
        wait_caught_up(handle, broker, topic_name)
        progresses = handle.query.recentProgress
        backlog_batches = [p for p in progresses if end_offset(p)["processing_backlog"]]
        assert len(backlog_batches) >= 10  # 120k records at 10k per batch, not one uncapped batch
        assert all(p["numInputRows"] <= 10_002 for p in progresses)
        first = end_offset(progresses[0])
        restart_boundaries = {**first["backlog"]["pending"].get(topic_name, {}),
                              **first["backlog"]["finishing"].get(topic_name, {})}
        assert restart_boundaries == {str(p): o for p, o in log_end_offsets(broker, topic_name).items()}
        assert [(t.from_mode, t.to_mode) for t in handle.transitions] == [("high-throughput", "low-latency")]
    finally:
        handle.stop()
    assert_exactly_once(spark, broker, topic_name, out)


def test_traffic_around_the_reentry_threshold_costs_no_switch_and_a_real_burst_one(spark, broker, topic_name, tmp_path):
    """Issue 12.2: bursts above backlog.reenterLag that one low-latency batch reads anyway, and
    a new topic matching the pattern whose records fit one batch, never leave low latency;
    a burst larger than one batch re-enters backlog once and comes back. Each burst is read
    before the next is produced, so no two add up (the count does not depend on timing)."""
    make_topic(broker, topic_name, 2, per_partition=1_000)
    df = reader(spark, broker, subscribePattern=f"{topic_name}.*", startingOffsets="earliest",
                maxOffsetsPerTrigger=500, **{"backlog.reenterLag": 300, "backlog.maxOffsetsPerTrigger": 1_500})
    handle = start_aware(df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt")),
                         "0 seconds", "200 milliseconds")
    produced = 1_000
    try:
        wait_for(lambda: handle.mode == "low-latency", 180, "the first catch-up")
        for _ in range(5):  # 400-record bursts: above the re-entry lag, within one 500-record batch
            fill(broker, topic_name, 2, 200, start=produced)
            produced += 200
            wait_caught_up(handle, broker, topic_name)
        newcomer = f"{topic_name}-new"
        make_topic(broker, newcomer, 1, per_partition=100)
        wait_caught_up(handle, broker, newcomer)
        assert [t.to_mode for t in handle.transitions] == ["low-latency"]
        # 4,000 records in one go: more than one batch in either mode.
        fill(broker, topic_name, 2, 2_000, start=produced, burst=True)
        wait_caught_up(handle, broker, topic_name)
        wait_for(lambda: handle.mode == "low-latency" and len(handle.transitions) == 3, 60, "the way back")
        assert [t.to_mode for t in handle.transitions] == ["low-latency", "high-throughput", "low-latency"]
        assert {t.method for t in handle.transitions} == {"in-place"}
        assert handle.query.exception() is None
    finally:
        handle.stop()


@pytest.mark.parametrize("how", ["forced", "field-not-found"])
def test_the_restart_method_keeps_the_same_guarantees(spark, broker, topic_name, tmp_path, how, monkeypatch):
    make_topic(broker, topic_name, 2, per_partition=40_000)
    if how == "field-not-found":  # a Spark whose executor has no such field: fall back, say why
        monkeypatch.setattr(switchers, "INTERVAL_FIELD", "noSuchField")
    out = tmp_path / "out"
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=5_000,
                **{"backlog.maxOffsetsPerTrigger": 30_000})
    handle = start_aware(writer_of(df, "foreachBatch", out, tmp_path / "ckpt"), "0 seconds", "500 milliseconds",
                         switch_method="restart" if how == "forced" else "auto")
    first = handle.query
    try:
        assert handle.switch_method == "restart"
        with LiveTraffic(broker, topic_name, 2, start=40_000, per_burst=20):
            wait_for(lambda: handle.mode == "low-latency", 180, "the switch to low latency")
        wait_caught_up(handle, broker, topic_name)
        (transition,) = handle.transitions
        assert transition.method == "restart" and transition.restart_seconds > 0
        assert handle.query is not first and handle.query.id == first.id and handle.query.runId != first.runId
    finally:
        handle.stop()
    assert_exactly_once(spark, broker, topic_name, out)


class HoldBoundaryProgress(StreamingQueryListener):
    """Holds back the progress event of the batch that leaves backlog until the next batch
    is inside the sink. When it is registered before the session's listener (the first
    backlog-aware query of the session registers that one, and it stays), Spark's listener
    bus hands it each event first, and the switch is decided and applied while that batch is
    running, every time. When the session's listener came first, the switch races the next
    batch to its sink; the sink holds that batch until the switch either way."""

    def __init__(self, next_batch_in_sink: threading.Event) -> None:
        self.next_batch_in_sink = next_batch_in_sink

    def onQueryStarted(self, event):
        pass

    def onQueryProgress(self, event):
        offset = event.progress.sources[0].endOffset if event.progress.sources else None
        if offset and json.loads(offset).get("processing_backlog") is False:
            self.next_batch_in_sink.wait(120)

    def onQueryIdle(self, event):
        pass

    def onQueryTerminated(self, event):
        pass


def test_a_slow_sink_does_not_make_an_in_place_switch_slow(spark, broker, topic_name, tmp_path):
    """A batch is in the sink when the switch is decided, and the sink does not return
    until the switch has been applied: an in-place switch that waited for the running batch
    (as a restart does) would never be applied, and the sink's wait would fail. No batch is
    aborted or replayed."""
    make_topic(broker, topic_name, 1, per_partition=5_000)
    written, held = [], []
    in_sink, switched, started = threading.Event(), threading.Event(), threading.Event()
    handle = None

    def slow(batch_df, batch_id):
        written.append(batch_id)
        # On a loaded machine batches run before start_backlog_aware returns: a batch that
        # skipped the check while `handle` was unset would leave the gate waiting forever.
        wait_for(started.is_set, 120, "start_backlog_aware to return")
        if batch_id == 0 or handle.query.lastProgress is None:
            return
        if end_offset(handle.query.lastProgress)["processing_backlog"] is False and not held:
            # The batch after the one that left backlog. Held whether or not the switch came
            # first: the session's listener, once registered by an earlier query, hears each
            # event before the gate, and the switch may then beat this batch to its sink.
            held.append(batch_id)
            in_sink.set()
            # Raises (and fails the query) if the switch waits for this batch to end.
            wait_for(lambda: handle.transitions, 120, f"the switch, while batch {batch_id} is in the sink")
            switched.set()

    gate = HoldBoundaryProgress(in_sink)
    spark.streams.addListener(gate)
    df = reader(spark, broker, subscribe=topic_name, startingOffsets="earliest", **{"backlog.maxOffsetsPerTrigger": 2_000})
    writer = df.writeStream.foreachBatch(slow).option("checkpointLocation", str(tmp_path / "c"))
    try:
        with LiveTraffic(broker, topic_name, 1, start=5_000, per_burst=20):  # the next batch always has records
            handle = start_backlog_aware(writer, "0 seconds", "1 second")
            started.set()
            wait_for(switched.is_set, 180, "the switch, applied while a batch was in the sink")
        (transition,) = handle.transitions
        assert transition.method == "in-place" and len(held) == 1
        wait_caught_up(handle, broker, topic_name)
    finally:
        started.set()
        in_sink.set()
        spark.streams.removeListener(gate)
        if handle is not None:
            handle.stop()
    assert written == sorted(set(written))  # each batch once: none aborted and replayed


def test_a_failed_query_surfaces_its_error_and_is_not_restarted(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 1, per_partition=100)

    def explode(batch_df, batch_id):
        raise ValueError(f"sink failure in batch {batch_id} (test)")

    writer = (
        reader(spark, broker, subscribe=topic_name, startingOffsets="earliest")
        .writeStream.foreachBatch(explode).option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    handle = start_aware(writer, "0 seconds", "1 second")
    with pytest.raises(Exception, match="sink failure in batch 0"):
        handle.await_termination(120)
    assert handle.transitions == [] and all(q.id != handle.query.id for q in spark.streams.active)


def test_validation_says_what_to_change(spark, broker, topic_name, tmp_path):
    make_topic(broker, topic_name, 1)
    df = reader(spark, broker, subscribe=topic_name)
    with pytest.raises(ConfigError, match="set .option\\('checkpointLocation'"):
        start_backlog_aware(df.writeStream.format("noop"))
    with_ckpt = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c"))
    with pytest.raises(ConfigError, match="high_throughput_interval must be a duration such as"):
        start_backlog_aware(with_ckpt, "fast", "1 second")
    with pytest.raises(ConfigError, match="switch_method must be one of auto, in-place, restart"):
        start_backlog_aware(with_ckpt, switch_method="sometimes")
    rate = spark.readStream.format("rate").load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="reads no format\\('backlog'\\) source"):
        start_backlog_aware(rate)
    disabled = reader(spark, broker, subscribe=topic_name, **{"backlog.enabled": "false"})
    with pytest.raises(ConfigError, match="backlog.enabled=false"):
        start_backlog_aware(disabled.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "d")))
    memory = df.writeStream.format("memory").queryName("m").option("checkpointLocation", str(tmp_path / "m"))
    with pytest.raises(ConfigError, match="memory sink cannot restart from its checkpoint"):
        start_backlog_aware(memory, switch_method="restart")
    assert spark.streams.active == []  # nothing was left running


def test_the_writer_is_understood_after_transformations(spark, broker, topic_name, tmp_path):
    # A transformed DataFrame's source leaf is resolved (StreamingRelationV2), not the
    # unresolved one load() returns; both must be found, and only backlog.enabled is read.
    from pyspark.sql import functions as F

    df = reader(spark, broker, subscribe=topic_name, maxOffsetsPerTrigger=7, **{"backlog.enabled": "true"})
    rate = spark.readStream.format("rate").load()
    for transformed in (df, df.withColumn("at", F.current_timestamp()), df.select("value").where("value is not null")):
        info = describe_writer(transformed.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "c")))
        assert info.checkpoint_location == str(tmp_path / "c") and info.sink_format == "parquet"
        assert info.backlog_enabled == ["true"] and info.other_formats == []
    info = describe_writer(rate.select("value").writeStream)
    assert info.backlog_enabled == [] and info.other_formats == ["rate"]
