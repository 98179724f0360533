"""Runs the demo: broker, backlog, live traffic, a backlog-aware query into Parquet, tracing
to a local JSONL file, the live view, then the summary and ``timeline.png``.

Which process: the user's driver program. Everything it starts (broker, receiver, producer,
query, Spark) is stopped on the way out, also after Ctrl-C or a failure.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import signal
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from rich.console import Console
from rich.live import Live
from rich.progress import Progress

from backlog_source.core.buckets import Bucket
from backlog_source.core.settings import parse_options
from backlog_source.core.tracing import exporter
from backlog_source.datasource import set_worker_environment
from backlog_source.demo.apache_kafka import kafka_version, start_kafka
from backlog_source.demo.embedded_broker import start_broker
from backlog_source.demo.errors import DemoError, interruption_in
from backlog_source.demo.monitor import QueryMonitor
from backlog_source.demo.otlp_receiver import OtlpReceiver
from backlog_source.demo.report import HIGH, LOW, mode_at, summarize, summary_table, write_timeline
from backlog_source.demo.settings import DemoSettings
from backlog_source.demo.topics import create_topic, produce
from backlog_source.demo.traffic import LIVE_KEY_PREFIX, LiveProducer
from backlog_source.demo.view import render
from backlog_source.enumerator.kafka_admin import KafkaAdmin
from backlog_source.mode_switch import start_backlog_aware
from backlog_source.mode_switch.session_metrics import session_metrics

#: What the demo writes under ``--output``; only these are removed when a demo starts again.
OUTPUT_ENTRIES = ("parquet", "checkpoint", "spans.jsonl", "timeline.png", "summary.json", "spark.log")


class StopRequested(BaseException):
    """Stop everything in order (:class:`_StopSignals`). A BaseException, as KeyboardInterrupt
    is: raised from a signal handler anywhere, a broad ``except Exception`` on its way (the
    seeding's, a library's) must not turn it into a failure; where a C extension wrapped it in
    a SystemError, :func:`~backlog_source.demo.errors.interruption_in` finds it."""


class _StopSignals:
    """Ctrl-C (SIGINT), a plain ``kill`` or a supervisor (SIGTERM) and a closed terminal (SIGHUP)
    stop the demo in order; a second one interrupts at once. The exit code is 128 + the signal.

    SIGTERM and SIGHUP are caught from the demo's first step (:meth:`catch_termination`):
    left to Python's default they ended the process on the spot, without its cleanup, and the
    broker (in a session of its own) ran on with its log dir. Until Spark has started they
    raise :class:`StopRequested`, which unwinds everything started so far. SIGINT is taken
    over only once Spark started (:meth:`install`): PySpark's own handler cancels every job and
    raises, which would fail the query mid-batch instead of stopping it."""

    CAUGHT_FROM_THE_START = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signum = signal.SIGINT  # a KeyboardInterrupt before install() is Ctrl-C
        self._installed = False
        self._previous: dict[int, object] = {}

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def catch_termination(self) -> None:
        self._take(self.CAUGHT_FROM_THE_START)

    def install(self) -> None:
        self._installed = True
        self._take((signal.SIGINT,))

    def restore(self) -> None:
        """Put back the handlers found before (the demo may run inside a longer program)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _take(self, signums) -> None:
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            for signum in signums:
                self._previous.setdefault(signum, signal.getsignal(signum))
                signal.signal(signum, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        if not self._installed:
            raise StopRequested
        if self.requested.is_set():
            raise KeyboardInterrupt
        self.requested.set()


def run(settings: DemoSettings, console: Console | None = None) -> int:
    """Run the demo; returns the process exit code (0 ok, 1 failed, 128 + the signal when stopped by
    one: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP)."""
    console = console or Console()
    stop_signals = _StopSignals()
    with ExitStack() as resources:
        stop_signals.catch_termination()
        resources.callback(stop_signals.restore)
        try:
            summary = _run(settings, console, resources, stop_signals)
        except (KeyboardInterrupt, StopRequested):
            return _stopping(console, stop_signals)
        except Exception as exc:  # process boundary: the demo's top; a stop a library wrapped ends it as a stop
            if interruption_in(exc) is not None:
                return _stopping(console, stop_signals)
            if not isinstance(exc, DemoError):
                raise
            console.print(f"[red]demo failed:[/] {exc}")
            spark_log = Path(settings.output) / "spark.log"
            if spark_log.exists():
                console.print(f"Spark's own output is in {spark_log}")
            return 1
    return 0 if summary["exactly_once"] else 1


def _stopping(console: Console, stop_signals: _StopSignals) -> int:
    console.print("[yellow]stopping: the producer, the query (at a batch boundary), Spark, the broker[/]")
    return stop_signals.exit_code


def _run(settings: DemoSettings, console: Console, resources: ExitStack, stop_signals: _StopSignals) -> dict:
    out = _prepare_output(settings.output)
    receiver = resources.enter_context(OtlpReceiver(jsonl_path=out / "spans.jsonl",
                                                    metrics_jsonl_path=out / "metrics.jsonl"))
    bootstrap = settings.bootstrap_servers
    if bootstrap is None:
        name = "Apache Kafka " + kafka_version() if settings.broker == "kafka" else "the embedded broker (Tansu)"
        with console.status(f"starting {name}"):
            broker = start_kafka() if settings.broker == "kafka" else start_broker()
        resources.callback(broker.stop)
        bootstrap = broker.bootstrap_servers
        console.print(f"local broker at {bootstrap}: {name}")
    seeded = _seed(settings, bootstrap, console) if settings.seeding else 0

    spark = _spark(receiver.endpoint, console, resources.enter_context(open(out / "spark.log", "w")))
    resources.callback(spark.stop)
    stop_signals.install()
    monitor = QueryMonitor()
    spark.streams.addListener(monitor)
    resources.callback(lambda: spark.streams.removeListener(monitor))

    reader = spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
    options = {
        "subscribe": settings.topic,
        "startingOffsets": "earliest",
        **settings.source_options,
        **{key: value.get_secret_value() for key, value in settings.kafka_options.items()},
    }
    df = reader.options(**options).load().withColumn("processed_at", F.current_timestamp())
    writer = (df.writeStream.format("parquet").option("path", str(out / "parquet"))
              .option("checkpointLocation", str(out / "checkpoint")))

    partitions = _partition_count(bootstrap, settings)
    producer = LiveProducer(bootstrap, settings.topic, partitions, settings.live_records_per_second,
                            settings.value_size, _producer_config(settings))
    start_positions, _ = _log_range(bootstrap, settings)  # startingOffsets=earliest
    started_at = time.time()
    handle = start_backlog_aware(writer, settings.high_throughput_interval, settings.low_latency_interval)
    resources.callback(handle.stop)
    initial_mode = handle.mode
    monitor.watch(str(handle.query.id))
    producer.start()
    resources.callback(producer.stop)
    console.print(f"query started in {initial_mode} mode; writing Parquet to {out / 'parquet'}")

    _watch(settings, console, handle, monitor, producer, started_at, initial_mode, stop_signals.requested)
    producer.stop()
    if producer.failed:
        raise DemoError(f"{producer.failed} live record(s) were not acknowledged: {producer.first_error}")
    _wait_caught_up(bootstrap, settings, monitor, handle)
    metrics = session_metrics(spark)
    if metrics is not None:
        metrics.export.flush()  # the last values before the query's series end with it
    handle.stop()
    receiver.wait_for(lambda spans: any(s["name"] == "backlog.phase" for s in spans), timeout=15)

    snapshot = monitor.snapshot()
    latencies, written, distinct = _read_output(spark, out / "parquet", snapshot.batches, initial_mode, handle.transitions)
    final_positions = snapshot.batches[-1].positions if snapshot.batches else start_positions
    read_range = sum(final_positions.get(b, start) - start for b, start in start_positions.items())
    # Only on the embedded broker is the demo sure to be the topic's only producer.
    produced = seeded + producer.delivered if settings.starts_broker else None
    summary = summarize(snapshot.batches, handle.transitions, initial_mode, started_at, latencies, written, distinct,
                        read_range, produced)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_timeline(out / "timeline.png", snapshot.batches, handle.transitions, initial_mode, started_at, receiver.spans,
                   receiver.points)
    console.print(summary_table(summary))
    console.print(f"timeline: {out / 'timeline.png'}   spans: {out / 'spans.jsonl'}   "
                  f"metrics: {out / 'metrics.jsonl'}   summary: {out / 'summary.json'}")
    return summary


def _prepare_output(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_ENTRIES:  # a new demo starts from scratch (and a new checkpoint)
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    return out


def _seed(settings: DemoSettings, bootstrap: str, console: Console) -> int:
    """Create the topic (if it does not exist) and produce the backlog; returns the records
    produced (Tansu's seal records included, see ``DemoSettings.needs_seals``)."""
    try:
        create_topic(bootstrap, settings.topic, settings.partitions)
    except Exception as exc:  # process boundary: the demo's own setup; the topic may exist on a real cluster: add to it
        stop = interruption_in(exc)
        if stop is not None:
            raise stop from None
        console.print(f"topic {settings.topic} not created ({exc}); seeding into the existing topic")
    partitions = _partition_count(bootstrap, settings)
    value = b"s" * settings.value_size
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"seeding {settings.backlog_records:,} records", total=settings.backlog_records)

        def records():
            for i in range(settings.backlog_records):
                if i % 20_000 == 0:
                    progress.update(task, completed=i)
                yield i % partitions, b"seed-%d" % i, value

        started = time.perf_counter()
        produced = produce(bootstrap, settings.topic, records(), seal=settings.needs_seals)
    console.print(f"seeded {settings.backlog_records:,} records over {partitions} partitions "
                  f"in {time.perf_counter() - started:.1f} s")
    return produced


def _spark(otlp_endpoint: str, console: Console, log_file) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = (SparkConf().setMaster("local[2]").setAppName("backlog-source-demo").set("spark.ui.enabled", "false")
            .set("spark.sql.shuffle.partitions", "2").set("spark.driver.memory", "2g"))
    with console.status("starting Spark"):
        if SparkContext._active_spark_context is None:
            # The JVM (and the Python workers it starts) in its own session, so a Ctrl-C
            # in the terminal does not kill tasks mid-batch; the demo stops the query. Its
            # output goes to spark.log: Python workers cut off while Spark shuts down print
            # ConnectionResetError tracebacks there, not over the live view.
            gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True, "stderr": log_file,
                                                         "stdout": log_file})
            SparkContext(conf=conf, gateway=gateway)
        spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # Traces go to the demo's own receiver: this process (the mode switch) and, through
    # SparkContext.environment, the driver's and executors' Python workers. Metrics go there
    # from this process, every second (a dashboard's scrape would be slower).
    tracing = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint,
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "backlog-source-demo",
               "OTEL_BSP_SCHEDULE_DELAY": "500", "OTEL_METRIC_EXPORT_INTERVAL": "1000"}
    os.environ.update(tracing)
    exporter.reset()
    set_worker_environment(spark, tracing)
    return spark


def _watch(settings, console, handle, monitor, producer, started_at, initial_mode, stop_requested) -> None:
    """Show the live view until the job has run ``live_seconds`` in low-latency mode.
    Raises :class:`StopRequested` after a stop signal."""
    live_since = None
    deadline = started_at + settings.drain_timeout_seconds
    printed = 0
    with Live(console=console, refresh_per_second=4, transient=False) if settings.live_view else ExitStack() as live:
        while True:
            if stop_requested.is_set():
                raise StopRequested
            if handle.await_termination(timeout=0.25):  # raises the query's failure
                raise DemoError("the query stopped unexpectedly")
            now = time.time()
            if handle.mode == LOW and live_since is None:
                live_since = now
            left = None if live_since is None else settings.live_seconds - (now - live_since)
            status = ("draining the backlog in high-throughput mode" if live_since is None
                      else f"caught up: low-latency mode, {max(0, left):.0f} s of live traffic left")
            snapshot = monitor.snapshot()
            if settings.live_view:
                live.update(render(snapshot, handle.mode, status, started_at, producer.delivered))
            else:
                for batch in snapshot.batches[printed:]:
                    console.print(f"batch {batch.batch_id}: {batch.records:,} records in {batch.seconds:.2f} s, "
                                  f"lag {batch.lag:,}, mode {mode_at(batch.started_at, initial_mode, handle.transitions)}")
                printed = len(snapshot.batches)
            if left is not None and left <= 0:
                return
            if live_since is None and now > deadline:
                raise DemoError(f"the backlog was not drained within {settings.drain_timeout_seconds:.0f} s "
                                 "(--drain-timeout-seconds)")


def _offsets_client(bootstrap: str, settings: DemoSettings):
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": settings.topic,
               **{k: v.get_secret_value() for k, v in settings.kafka_options.items()}}
    return KafkaAdmin.from_settings(parse_options(options))


def _producer_config(settings: DemoSettings) -> dict:
    return {k[len("kafka."):]: v.get_secret_value() for k, v in settings.kafka_options.items() if k.startswith("kafka.")}


def _partition_count(bootstrap: str, settings: DemoSettings) -> int:
    client = _offsets_client(bootstrap, settings)
    try:
        count = client.partition_counts([settings.topic]).get(settings.topic)
    finally:
        client.close()
    if not count:
        raise DemoError(f"topic {settings.topic!r} does not exist on {bootstrap}; seed it with --seed")
    return count


def _log_range(bootstrap: str, settings: DemoSettings):
    client = _offsets_client(bootstrap, settings)
    try:
        buckets = [Bucket(settings.topic, p) for p in range(client.partition_counts([settings.topic])[settings.topic])]
        return client.earliest_offsets(buckets), client.latest_offsets(buckets)
    finally:
        client.close()


def _wait_caught_up(bootstrap, settings, monitor, handle, timeout_s: float = 120) -> None:
    """After the producer stopped: wait until a batch has read up to every log end."""
    _, latest = _log_range(bootstrap, settings)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        batches = monitor.snapshot().batches
        if batches and all(batches[-1].positions.get(b, -1) >= end for b, end in latest.items()):
            return
        if handle.await_termination(timeout=0.2):
            raise DemoError("the query stopped before it caught up")
    raise DemoError(f"the query did not catch up with the log end within {timeout_s:.0f} s")


def _read_output(spark, path: Path, batches, initial_mode, transitions):
    """Count what the Parquet sink committed (Spark reads only committed files) and the
    end-to-end latency of each live record, by the mode of the batch that wrote it."""
    df = spark.read.parquet(str(path))
    written = df.count()
    distinct = df.select("partition", "offset").distinct().count()
    live = (df.where(F.col("key").startswith(F.lit(LIVE_KEY_PREFIX)))
            .select(F.unix_millis("timestamp").alias("produced_ms"), F.unix_millis("processed_at").alias("batch_ms"))
            .collect())
    starts = [b.started_at for b in batches]
    latencies: dict[str, list[float]] = {HIGH: [], LOW: []}
    for row in live:
        # The batch that wrote the record: the last one that started at or before its
        # batch timestamp (Spark's current_timestamp() is fixed per micro-batch).
        index = bisect.bisect_right(starts, row.batch_ms / 1000 + 0.5) - 1
        if index < 0:
            continue
        batch = batches[index]
        latencies[mode_at(batch.started_at, initial_mode, transitions)].append(batch.ended_at - row.produced_ms / 1000)
    return latencies, written, distinct
