"""The benchmarks' one harness: what every benchmark shares: a Spark session as a user gets it, a listener that keeps every
progress event, a live producer in its own process that reports what it produced, and
end-to-end latency from those two.

End-to-end latency of a record = the end of the batch that read it (its progress event's
trigger start + ``durationMs.triggerExecution``: the batch committed) - the record's Kafka
timestamp: on the live topics (:func:`create_live_topic`) the broker's append time, when a
consumer could first read it, so the producer's own queueing is left out. Both clocks are this
machine's. The sink is ``noop`` unless a benchmark says otherwise, so the figures are the
source's and Spark's, not a sink's.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from backlog_source.demo.apache_kafka import spark_kafka_connector_jars, start_kafka
from backlog_source.demo.embedded_broker import create_topic, produce
from backlog_source.demo.report import percentile

RESULTS = Path(__file__).resolve().parent / "results"


#: The project's package folders (installed under ``backlog_source`` by the build).
PROJECT_PACKAGES = ("backlog_source", "enumerator", "reader", "events")


def compile_project_bytecode() -> None:
    """Write the project's bytecode, as ``pip install`` of the wheel does. This machine sets
    ``PYTHONDONTWRITEBYTECODE=1`` and the benchmarks run an editable install, so without
    this every fresh Python process (each query's driver-side runner, each new executor
    worker) would compile the project's modules again, which no user's install does."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in PROJECT_PACKAGES:
        compileall.compile_dir(str(root / package), quiet=1)


def spark_session(jars: list | None = None, master: str = "local[*]"):
    """A local session with Spark's defaults (2 cores here), the source registered, and
    Python workers running this interpreter. ``jars``: for ``spark.jars`` (Spark's Kafka
    connector, which a user of ``format("kafka")`` adds too); ``master``: only where a mode
    cannot run on the default (real-time mode needs a task slot per partition)."""
    compile_project_bytecode()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource

    builder = SparkSession.builder.master(master)
    if jars:
        builder = builder.config("spark.jars", ",".join(str(jar) for jar in jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BacklogDataSource)
    return spark


#: The benchmark broker's heap: Kafka's start scripts give 1 GiB; the test launcher's 512 MiB
#: default is for test sessions that run several brokers.
BROKER_HEAP_MB = 1024


@dataclass(frozen=True)
class Bench:
    """What :func:`kafka_and_spark` yields: the broker, the session, every progress event."""

    broker: Any
    spark: Any
    log: "ProgressLog"

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers


@contextmanager
def kafka_and_spark(*, connector: bool = False, warm_up_query: bool = True) -> Iterator[Bench]:
    """Apache Kafka (a single node from ``make jvm``), a session as a user gets it
    (:func:`spark_session`; with ``connector``, Spark's Kafka connector on ``spark.jars`` for
    ``format("kafka")``), a :class:`ProgressLog` registered, and one small warm-up query
    (``warm_up_query``), so no measured run pays the JVM's or the Python workers' cold start.
    Spark stops before the broker, whatever happens."""
    broker = start_kafka(heap_mb=BROKER_HEAP_MB)
    try:
        spark = spark_session(jars=spark_kafka_connector_jars() if connector else None)
        try:
            log = ProgressLog()
            spark.streams.addListener(log.listener)
            if warm_up_query:
                warm_up(spark, broker.bootstrap_servers)
            yield Bench(broker, spark, log)
        finally:
            spark.stop()
    finally:
        broker.stop()


def timestamp_s(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


#: The driver-side process Spark starts per Python streaming query; it unpickles the source.
RUNNER_MODULE = "pyspark.sql.streaming.python_streaming_source_runner"


def installed_spark_home() -> Path:
    """The installed pyspark package, which is SPARK_HOME when none is set."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_worker_path(spark_home: Path) -> list[str]:
    """What Spark puts first on its Python workers' path: ``pyspark.zip`` and py4j's zip
    from ``$SPARK_HOME/python/lib``."""
    lib = spark_home / "python" / "lib"
    return [str(lib / "pyspark.zip"), *(str(p) for p in sorted(lib.glob("py4j-*.zip")))]


def first_trigger_at(progress) -> float:
    """Wall-clock seconds of the earliest trigger among ``progress``: progress dicts, or
    ``StreamingQueryProgress`` objects (``query.recentProgress``)."""
    return min(timestamp_s(p["timestamp"] if isinstance(p, dict) else json.loads(p.json)["timestamp"]) for p in progress)


class ProgressLog:
    """Every progress event of the watched queries, as dicts (``recentProgress`` keeps only
    the last 100). Register once per session with ``spark.streams.addListener``."""

    def __init__(self) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        log = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

            def onQueryProgress(self, event):
                with log.lock:
                    log.events.setdefault(str(event.progress.id), []).append(json.loads(event.progress.json))

        self.lock = threading.Lock()
        self.events: dict[str, list[dict]] = {}
        self.listener = Listener()

    def of(self, query_id: str) -> list[dict]:
        with self.lock:
            return list(self.events.get(str(query_id), []))


#: Topics whose records' latency is measured: a record's timestamp is when Kafka appended it,
#: i.e. when a consumer could first read it, so the producer's own queueing is not counted.
#: It is not small everywhere: with 1,024 partitions at 1,500 records/s, librdkafka appended
#: the records produced in a run's last seconds up to 30 s late (p50 5 ms), while the broker
#: acknowledged within 70 ms of appending (``message.timestamp.type`` = CreateTime then
#: charged that wait to whichever source read the topic).
LIVE_TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


def create_live_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic for live traffic whose latency is measured (:data:`LIVE_TOPIC_CONFIG`)."""
    create_topic(bootstrap, topic, partitions, LIVE_TOPIC_CONFIG)


#: How often a transactional live producer commits (each commit writes a marker to every
#: partition it wrote to: offsets without a record at the log end).
TRANSACTION_EVERY_S = 0.2


def live_producer(bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, out,
                  transactional: bool = False) -> None:
    """``rate`` records/s for ``seconds``, round-robin over the partitions, with librdkafka's
    default batching; ``transactional``: in transactions committed every
    :data:`TRANSACTION_EVERY_S`, as an exactly-once writer produces. Sends back
    ``[(partition, offset, timestamp_ms), ...]`` of every acknowledged (and committed)
    record: on a :func:`create_live_topic` topic the timestamp is the broker's append time."""
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "client.id": "benchmark-producer"}
    if transactional:
        config["transactional.id"] = f"benchmark-{topic}"
    producer = Producer(config)
    delivered: list[tuple[int, int, int]] = []

    def on_delivery(error, message) -> None:
        if error is None:
            delivered.append((message.partition(), message.offset(), message.timestamp()[1]))

    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    started = committed_at = time.perf_counter()
    sent = 0
    while time.perf_counter() - started < seconds:
        due = int((time.perf_counter() - started) * rate)
        while sent < due:
            producer.produce(topic, value=b"l" * 100, partition=sent % partitions, on_delivery=on_delivery)
            sent += 1
        producer.poll(0)
        if transactional and time.perf_counter() - committed_at >= TRANSACTION_EVERY_S:
            producer.commit_transaction(30)
            producer.begin_transaction()
            committed_at = time.perf_counter()
        time.sleep(0.001)
    if transactional:
        producer.commit_transaction(30)
    producer.flush(60)
    out.put(delivered)


def start_producer(bootstrap: str, topic: str, partitions: int, rate: float, seconds: float,
                   transactional: bool = False):
    """A running :func:`live_producer` process and the queue its deliveries come back on."""
    out = mp.Queue()
    process = mp.Process(target=live_producer, args=(bootstrap, topic, partitions, rate, seconds, out, transactional),
                         daemon=True)
    process.start()
    return process, out


def offset_of(value: Any) -> dict:
    """A progress event's offset: JSON text (``lastProgress``) or already a dict (``.json``)."""
    return json.loads(value) if isinstance(value, str) else (value or {})


def batch_ends(progress: list[dict]) -> list[dict]:
    """Per batch with data: its end positions and when it committed."""
    batches = []
    for p in progress:
        if not p["numInputRows"]:
            continue
        end = offset_of(p["sources"][0]["endOffset"])
        positions = end.get("positions", end)
        batches.append({
            "batch_id": p["batchId"],
            "committed": timestamp_s(p["timestamp"]) + p["durationMs"]["triggerExecution"] / 1000,
            "positions": {(topic, int(part)): o for topic, parts in positions.items() for part, o in parts.items()},
        })
    return sorted(batches, key=lambda b: b["batch_id"])


def record_latencies(topic: str, progress: list[dict], delivered: list[tuple[int, int, int]]) -> list[float]:
    """End-to-end latency of every delivered record, in seconds (see the module docstring):
    the first batch whose end position of the record's partition is past its offset read it."""
    return [latency for _, latency in timed_latencies(topic, progress, delivered)]


#: Spark's steps of a micro-batch, in the order it runs them (``durationMs`` of a progress event).
BATCH_STEPS = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets", "triggerExecution")


def step_medians(progress: list[dict]) -> dict[str, float | None]:
    """The median milliseconds of each of Spark's steps over ``progress``: where a batch's time
    goes, and so whose cost it is (the source's: ``latestOffset``, part of ``queryPlanning``
    and ``addBatch``; Spark's: the two commits)."""
    return {step: percentile([p["durationMs"][step] for p in progress if step in p["durationMs"]], 0.50)
            for step in BATCH_STEPS}


def step_table(runs: dict[str, list[dict]], key: str) -> list[str]:
    """Markdown rows: per configuration, the median over rounds of each step in ``run[key]``."""
    lines = ["| configuration | " + " | ".join(BATCH_STEPS) + " |", "| --- |" + " ---: |" * len(BATCH_STEPS)]
    for config, rs in runs.items():
        medians = [median_and_spread([r[key][step] for r in rs if r.get(key) and r[key].get(step) is not None])["median"]
                   for step in BATCH_STEPS]
        lines.append(f"| {config} | " + " | ".join(fmt(m, ".0f") for m in medians) + " |")
    return lines


def timed_latencies(topic: str, progress: list[dict], delivered: list[tuple[int, int, int]]) -> list[tuple[float, float]]:
    """``(produced at, latency)`` in seconds for every delivered record that a batch read."""
    batches = batch_ends(progress)
    by_partition: dict[int, tuple[list[int], list[float]]] = {}
    for b in batches:
        for (t, partition), end in b["positions"].items():
            if t == topic:
                ends, times = by_partition.setdefault(partition, ([], []))
                if not ends or end > ends[-1]:
                    ends.append(end)
                    times.append(b["committed"])
    latencies = []
    for partition, offset, ts_ms in delivered:
        ends, times = by_partition.get(partition, ([], []))
        index = bisect_right(ends, offset)
        if index < len(ends):
            latencies.append((ts_ms / 1000, times[index] - ts_ms / 1000))
    return latencies


def windows(timed: list[tuple[float, float]], width_s: float) -> list[dict]:
    """p50/p99 of ``(at, value)`` pairs per window of ``width_s`` seconds from the first."""
    if not timed:
        return []
    first = min(at for at, _ in timed)
    buckets: dict[int, list[float]] = {}
    for at, value in timed:
        buckets.setdefault(int((at - first) // width_s), []).append(value)
    return [{"from_s": index * width_s, "count": len(values), "p50": percentile(values, 0.5),
             "p99": percentile(values, 0.99)} for index, values in sorted(buckets.items())]


def log_end_offsets(admin, topic: str, partitions: int) -> dict[int, int]:
    """``ListOffsets(latest)`` of partitions ``0..partitions-1`` of ``topic`` through
    ``admin`` (a confluent-kafka AdminClient the caller keeps, so timing it times the
    request, not a client's creation)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)})
    return {tp.partition: f.result(timeout=30).offset for tp, f in futures.items()}


def backlog_stream(spark, bootstrap: str, topic: str, **options: str):
    """``format("backlog")`` reading ``topic`` from earliest, with extra source ``options``."""
    return (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").options(**options).load())


def run_available_now(df) -> tuple[float, float, Any]:
    """Run ``df`` with ``Trigger.AvailableNow`` into ``noop`` on a fresh checkpoint until it
    ends. Returns (wall-clock time of ``start()``, seconds from ``start()`` to termination,
    the query). Raises RuntimeError with the query's error if it failed."""
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.time()
        query = df.writeStream.format("noop").trigger(availableNow=True).option("checkpointLocation", checkpoint).start()
        query.awaitTermination()
        seconds = time.time() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return started, seconds, query


def wait_until(condition, timeout_s: float, what: str) -> None:
    """Poll ``condition`` every 0.1 s; raise TimeoutError naming ``what`` after ``timeout_s``."""
    deadline = time.time() + timeout_s
    while not condition():
        if time.time() > deadline:
            raise TimeoutError(f"{what} within {timeout_s:.0f} s")
        time.sleep(0.1)


def median_and_spread(values: list[float]) -> dict[str, float | None]:
    """The median of several runs and their spread (min, max), never the best alone."""
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def results_folder(benchmark: str) -> Path:
    """Where ``benchmark`` (its module name, e.g. ``"query_startup"``) keeps its results:
    one folder per benchmark, one ``<run name>.{json,md,png}`` per recorded run."""
    folder = RESULTS / benchmark
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_results(benchmark: str, name: str, summary: dict, markdown: list[str]) -> None:
    """Record a run of ``benchmark`` as ``results/<benchmark>/<name>.json`` and ``.md``,
    and print the Markdown."""
    folder = results_folder(benchmark)
    (folder / f"{name}.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (folder / f"{name}.md").write_text("\n".join(markdown) + "\n")
    print("\n".join(markdown))


def fmt(value, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def with_spread(figure: dict, spec: str = ".2f") -> str:
    """A :func:`median_and_spread` figure as ``median (min-max)``, or the median alone when
    every run gave the same value; ``n/a`` when there was none."""
    if figure["median"] is None:
        return "n/a"
    if figure["min"] == figure["max"]:
        return format(figure["median"], spec)
    return f"{format(figure['median'], spec)} ({format(figure['min'], spec)}-{format(figure['max'], spec)})"

# ------------------------------------------------------------------ rounds and warm-up


def rotated(names: list[str], round_index: int) -> list[str]:
    """The configurations in the order of round ``round_index``: each round starts one
    further along, so no configuration always runs first after the warm-up or after the
    previous scenario. With a fixed order, the configuration that always ran first had the
    slowest steady drain in both runs, and an order effect could not be told from its own."""
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


#: The warm-up query's topic: as wide as the benchmarks' own.
WARM_UP_PARTITIONS = 8


def warm_up(spark, bootstrap: str) -> None:
    """One small query first, so no configuration pays the JVM's and the Python workers'
    cold start (the first query of a session was measured ~5 s slower)."""
    topic = f"bench-warm-up-{time.time_ns()}"
    create_topic(bootstrap, topic, WARM_UP_PARTITIONS)
    produce(bootstrap, topic, ((i % WARM_UP_PARTITIONS, None, b"w" * 100) for i in range(200_000)))
    with tempfile.TemporaryDirectory() as checkpoint:
        (spark.readStream.format("backlog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest").load().writeStream.format("noop").trigger(availableNow=True)
         .option("checkpointLocation", checkpoint).start().awaitTermination())


# ------------------------------------------------------------------ measuring a run


def commit_time_reaching(progress: list[dict], topic: str, ends: dict[int, int]) -> float | None:
    """When the first batch whose end positions reach ``ends`` committed (wall-clock s)."""
    for batch in batch_ends(progress):
        if all(batch["positions"].get((topic, p), -1) >= end for p, end in ends.items()):
            return batch["committed"]
    return None


def first_trigger_and_total_s(df) -> tuple[float, float]:
    """Run ``df`` with ``Trigger.AvailableNow`` into ``noop``: seconds from ``start()`` to its
    first trigger, and to its end."""
    started, total, query = run_available_now(df)
    return first_trigger_at(query.recentProgress) - started, total


def run_source(spark, bootstrap: str, topic: str, expected: int, **options: str) -> dict:
    """Drain ``topic`` from earliest with ``Trigger.AvailableNow`` into ``noop``; ``options``
    are extra source options. Raises RuntimeError unless exactly ``expected`` records arrive."""
    started, wall, query = run_available_now(backlog_stream(spark, bootstrap, topic, **options))
    progress = [json.loads(p.json) for p in query.recentProgress]
    records = sum(p["numInputRows"] for p in progress)
    if records != expected:
        raise RuntimeError(f"the source read {records} records, expected {expected}")
    from_first_trigger = wall - (first_trigger_at(progress) - started)
    add_batch = sum(p["durationMs"].get("addBatch", 0) for p in progress) / 1000
    return {"records": records, "seconds": wall, "records_per_s": records / wall, "batches": len(progress),
            "from_first_trigger_s": from_first_trigger, "records_per_s_from_first_trigger": records / from_first_trigger,
            "add_batch_s": add_batch, "records_per_s_in_add_batch": records / add_batch}


# ------------------------------------------------------------------ live traffic into a caught-up query


def produce_and_catch_up(query, bootstrap: str, topic: str, partitions: int, rate: float, seconds: float,
                         catch_up_s: float = 300, transactional: bool = False) -> tuple[list, bool]:
    """Produce ``rate`` records/s over ``partitions`` for ``seconds`` (``transactional``: see
    :func:`live_producer`), then wait up to ``catch_up_s`` for ``query`` to commit all of them.
    Returns what the producer delivered and whether the query caught up (a query that cannot
    keep up is a result, not a crash)."""
    producer, out = start_producer(bootstrap, topic, partitions, rate, seconds, transactional)
    delivered = out.get(timeout=seconds + 120)
    producer.join(30)
    ends: dict[int, int] = defaultdict(int)
    for partition, offset, _ in delivered:
        ends[partition] = max(ends[partition], offset + 1)
    try:
        wait_until(lambda: caught_up(query, topic, ends), catch_up_s, f"{topic}: the query did not catch up")
    except TimeoutError:
        return delivered, False
    return delivered, True


def caught_up(query, topic: str, ends: dict[int, int]) -> bool:
    """Whether ``query``'s last batch ended at or past ``ends`` (partition -> offset) of
    ``topic``; the offset is this source's (``positions``) or Spark's Kafka source's."""
    progress = query.lastProgress
    if not progress:
        return False
    offset = offset_of(progress["sources"][0]["endOffset"])
    positions = offset.get("positions", offset).get(topic, {})
    return all(positions.get(str(p), -1) >= end for p, end in ends.items())


# ------------------------------------------------------------------ pictures

#: The x-axis label of :func:`draw_batch_timeline`.
BATCH_TIMELINE_XLABEL = "seconds since start (bars: batches, width = duration; dashed: backlog drained)"


def draw_batch_timeline(ax, run: dict, title: str) -> None:
    """A run's batches on the matplotlib axes ``ax``: records per batch over time (a bar's
    width is the batch's duration, log scale), and the backlog drained (dashed). ``run``
    holds ``batch_timeline`` (``start``, ``records``, ``seconds`` per batch) and ``drain_s``."""
    batches = run["batch_timeline"]
    ax.bar([b["start"] for b in batches], [b["records"] for b in batches],
           width=[max(0.15, b["seconds"]) for b in batches], align="edge", color="tab:blue")
    ax.axvline(run["drain_s"], color="black", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    ax.set_title(f"{title}: drained {run['drain_s']:.1f} s, live p99 {fmt(run['latency_p99_s'])} s", fontsize=8)
    ax.tick_params(labelsize=7)


def save_batch_timelines(columns: dict[str, dict[str, dict]], path: Path) -> None:
    """One PNG of :func:`draw_batch_timeline` panels: a column per key of ``columns`` (a
    scenario; ``""`` for none), a row per configuration, each panel one run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(next(iter(columns.values())).keys())
    fig, axes = plt.subplots(len(rows), len(columns), figsize=(7 * len(columns) + 2 * (len(columns) == 1),
                                                               1.9 * len(rows)), sharex="col", squeeze=False)
    for column, (scenario, by_row) in enumerate(columns.items()):
        for row, name in enumerate(rows):
            draw_batch_timeline(axes[row, column], by_row[name], f"{scenario} / {name}" if scenario else name)
        axes[-1, column].set_xlabel(BATCH_TIMELINE_XLABEL, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------ a trivial Python source


class _TrivialReader(DataSourceStreamReader):
    def initialOffset(self):
        return {"o": 0}

    def latestOffset(self):
        return {"o": 1}

    def partitions(self, start, end):
        return [InputPartition(0)]

    def read(self, partition):
        yield (1,)


class TrivialSource(DataSource):
    """One row, constant offsets: nothing but PySpark's Python streaming source machinery."""

    @classmethod
    def name(cls):
        return "trivial_python"

    def schema(self):
        return "x int"

    def streamReader(self, schema):
        return _TrivialReader()


def register_trivial_source(spark) -> None:
    """Register :class:`TrivialSource` as ``trivial_python``. Spark's Python workers need not
    find this package, so its module is pickled by value."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(TrivialSource)


# ------------------------------------------------------------------ memory


class MemorySampler:
    """Peak JVM heap in use and peak resident memory of the JVM's Python child processes,
    sampled every ``interval_s`` from a thread while a run lasts."""

    def __init__(self, spark, interval_s: float = 0.5) -> None:
        jvm = spark.sparkContext._jvm
        self._memory = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
        self._jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.heap_peak_mib = 0.0
        self.python_peak_mib = 0.0
        #: The Python processes' memory when the run started (idle workers of earlier queries stay).
        self.python_start_mib = _descendants_rss_mib(self._jvm_pid)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                heap = self._memory.getHeapMemoryUsage().getUsed() / 2**20
                self.heap_peak_mib = max(self.heap_peak_mib, heap)
            except Exception:  # the gateway is busy shutting down; a sample less
                pass
            self.python_peak_mib = max(self.python_peak_mib, _descendants_rss_mib(self._jvm_pid))
            self._stop.wait(self._interval_s)


def _descendants_rss_mib(root: int) -> float:
    """Resident memory of every process below ``root`` (its Python workers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (parent := _parent_of(int(entry))) is not None:
            children.setdefault(parent, []).append(int(entry))
    total_kib, pending = 0, list(children.get(root, []))
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total_kib += int(line.split()[1])
        except OSError:
            continue
    return total_kib / 1024


# ------------------------------------------------------------------ whose cost: CPU per process, Spark's task metrics

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_kind(command: str) -> str:
    """What a process on this machine is to a benchmark, from its command line."""
    if "kafka.Kafka" in command:
        return "broker"
    if "org.apache.spark" in command:
        return "spark_jvm"
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        return "python_workers"
    if "pyspark" in command:
        return "python_driver_side"  # the streaming source's runner, load()'s worker, planners
    return "other"


#: Whose the CPU of an ended child is, by its parent's kind: Spark's JVM waits for the
#: driver-side Python processes it starts (a streaming source's runner lives as long as its
#: query), a worker daemon for its forked workers, this process for its bare loops.
_ENDED_CHILD_KIND = {"spark_jvm": "python_driver_side", "python_workers": "python_workers", "benchmark": "bare_loops"}
_KTHREADD = 2


def cpu_seconds_by_process() -> dict[int, tuple[float, float, str]]:
    """``pid -> (own CPU seconds, CPU seconds of its ended children, kind)`` of every process
    now, from /proc (user + system; the children's part grows when a child is reaped). A
    process that has exited but is not reaped yet (a zombie: no command line) is its
    parent's ended child; kernel threads (children of kthreadd) are ``kernel``."""
    stats: dict[int, tuple[list[str], str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline") as cmdline:
                command = cmdline.read().replace("\0", " ").strip()
        except OSError:
            continue  # ended meanwhile
        stats[int(entry)] = (fields, command)
    kinds = {pid: "benchmark" if pid == os.getpid() else process_kind(command) for pid, (_, command) in stats.items()}
    found = {}
    for pid, (fields, _) in stats.items():
        state, parent = fields[0], int(fields[1])
        kind = kinds[pid]
        if state == "Z":
            kind = _ENDED_CHILD_KIND.get(kinds.get(parent, "other"), "other")
        elif parent == _KTHREADD or pid == _KTHREADD:
            kind = "kernel"
        found[pid] = ((int(fields[11]) + int(fields[12])) / _CLOCK_TICKS,
                      (int(fields[13]) + int(fields[14])) / _CLOCK_TICKS, kind)
    return found


class CpuAccount:
    """CPU seconds each kind of process used between ``__enter__`` and ``__exit__``: who paid
    for a run (the broker, Spark's JVM, the Python workers, the kernel, bare loops). A process
    that starts and ends inside the window is counted through its parent once reaped."""

    def __enter__(self) -> "CpuAccount":
        self._before = cpu_seconds_by_process()
        self.seconds: dict[str, float] = {}
        return self

    def __exit__(self, *exc) -> None:
        for pid, (own, children, kind) in cpu_seconds_by_process().items():
            own_before, children_before, _ = self._before.get(pid, (0.0, 0.0, kind))
            self._add(kind, own - own_before)
            self._add(_ENDED_CHILD_KIND.get(kind, kind), children - children_before)

    def _add(self, kind: str, seconds: float) -> None:
        if seconds > 0:
            self.seconds[kind] = round(self.seconds.get(kind, 0.0) + seconds, 2)


def stage_ids(spark) -> set[int]:
    """The ids of the stages Spark's status REST API knows now."""
    return {s["stageId"] for s in _stages(spark)}


def task_metrics_since(spark, known: set[int]) -> dict[str, float]:
    """Spark's task metrics summed over the stages completed since ``known`` (from
    :func:`stage_ids`): tasks, run time and the JVM threads' CPU time (seconds), JVM GC."""
    stages = [s for s in _stages(spark) if s["stageId"] not in known and s["status"] == "COMPLETE"]
    return {"tasks": sum(s["numTasks"] for s in stages),
            "task_run_s": sum(s["executorRunTime"] for s in stages) / 1000,
            "task_jvm_cpu_s": sum(s["executorCpuTime"] for s in stages) / 1e9,
            "jvm_gc_s": sum(s["jvmGcTime"] for s in stages) / 1000}


def _stages(spark) -> list[dict]:
    import urllib.request

    context = spark.sparkContext
    with urllib.request.urlopen(f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/stages") as answer:
        return json.load(answer)


# ------------------------------------------------------------------ bare confluent-kafka loops


def bare_consumer(bootstrap: str, topic: str, ends: dict[int, int], queue) -> None:
    """Consume ``[0, end)`` of the given partitions with the source's reader configuration
    (so a ratio never credits the source with what is only a librdkafka setting), touching
    each record's value; report ``(records, seconds)``."""
    from confluent_kafka import Consumer, TopicPartition

    from backlog_source.core.kafka_config import ClientRole, KafkaClientConfig

    consumer = Consumer(KafkaClientConfig(bootstrap_servers=bootstrap).librdkafka(ClientRole.READER))
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    left = dict(ends)  # records still to read per partition (each partition starts at 0)
    records = size = 0
    while any(left.values()):
        # Ask for what remains, as the source's reader does: consume() waits for as many
        # messages as asked, so asking for more waited out its timeout at the end.
        for message in consumer.consume(min(10_000, sum(left.values())), 1.0):
            if message.error() is None:
                records += 1
                size += len(message.value())
                left[message.partition()] = ends[message.partition()] - message.offset() - 1
    elapsed = time.perf_counter() - started
    consumer.close()
    queue.put((records, elapsed))


def run_bare(bootstrap: str, topic: str, ends: dict[int, int], processes: int) -> dict:
    """``processes`` bare consumer loops in parallel, the partitions dealt out among them.
    Wall time includes the processes' start; the slowest loop's own time is reported too."""
    queue: mp.Queue = mp.Queue()
    groups = [dict(list(ends.items())[i::processes]) for i in range(processes)]
    workers = [mp.Process(target=bare_consumer, args=(bootstrap, topic, g, queue)) for g in groups if g]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=900) for _ in workers]
    wall = time.perf_counter() - started
    for worker in workers:
        worker.join()
    records = sum(r for r, _ in results)
    return {"records": records, "seconds": wall, "loop_seconds": max(s for _, s in results), "records_per_s": records / wall}


# ------------------------------------------------------------------ py-spy profiles of the Python workers


def profile_python_workers(seconds: float, out_prefix: Path) -> list[subprocess.Popen]:
    """Start py-spy (a dev dependency) on each of Spark's Python worker daemons, following
    their forked workers, for ``seconds``; each writes folded stacks to
    ``<out_prefix>.<pid>.txt``. Returns the py-spy processes: wait for them. Raises
    RuntimeError when no worker daemon runs yet (run a query first)."""
    found = subprocess.run(["pgrep", "-f", "pyspark.daemon"], capture_output=True, text=True).stdout.split()
    pids = {int(pid) for pid in found}
    roots = [pid for pid in pids if _parent_of(pid) not in pids]  # daemons, not their forked workers
    if not roots:
        raise RuntimeError("no pyspark.daemon process to profile: run a query first")
    py_spy = Path(sys.executable).with_name("py-spy")
    return [subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--subprocesses", "--native", "--rate", "100",
                              "--duration", str(int(seconds)), "--format", "raw", "--output", f"{out_prefix}.{pid}.txt"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in roots]


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def summarize_profile(folded: list[Path], top: int = 20) -> dict:
    """The functions with the largest share of samples in py-spy ``raw`` (folded) profiles:
    ``self`` (where the time was spent) and ``inclusive`` (below which call)."""
    own: dict[str, int] = defaultdict(int)
    below: dict[str, int] = defaultdict(int)
    total = 0
    for path in folded:
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack:
                continue
            frames, samples = stack.split(";"), int(count)
            total += samples
            own[frames[-1]] += samples
            for frame in set(frames):
                below[frame] += samples

    def shares(table: dict[str, int]) -> list[tuple[str, float]]:
        return [(name, round(n / total, 4)) for name, n in sorted(table.items(), key=lambda kv: -kv[1])[:top]]

    return {"samples": total, "self": shares(own) if total else [], "inclusive": shares(below) if total else []}
