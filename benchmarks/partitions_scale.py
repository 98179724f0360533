"""Many partitions, format("backlog") beside Spark's format("kafka") in the same run: planning
time per batch, the offset log entry, the checkpoint's growth, the source runner's memory, a
catch-up drain and caught-up latency.

Issue 49, item 2. Two shapes of ``--partitions`` partitions on one Apache Kafka node
(``make jvm``; index files kept small and the heap raised so ten thousand partitions fit):
``pattern``, ``--pattern-topics`` topics under ``subscribePattern``, and ``single``, one
topic under ``subscribe``. Each partition holds ``--records-per-partition`` records of 100 B
when the shape's topics are created. After the harness's warm-up query (and one of
``format("kafka")`` on the same small topic), every round runs both sources on each shape
in rotated order, each query on a fresh checkpoint, from ``earliest``, trigger
``0 seconds``, into ``noop``, Spark's defaults:

1. **Drain**: from ``start()`` to the commit of the batch that reaches the log ends taken
   just before it (the fill, plus the live records of earlier rounds: the figure reports how
   many records that was).
2. **Caught up**: ``--rate`` records/s for ``--seconds`` into one topic of the shape (round
   robin over its partitions; LogAppendTime), latency of a record = its append time -> the
   commit of the batch that read it, over the records after the first ``--settle-seconds``;
   then, in the first round only, more traffic until ``--growth-batches`` batches with data
   have committed since the drain, for the checkpoint's growth.
3. **Idle**: nothing arriving for ``--idle-seconds``: the CPU the driver JVM, the driver-side
   Python processes and the broker use while a ``0 seconds`` trigger keeps asking for new
   records, and how often format("backlog")'s planner plans meanwhile.

Per query: Spark's ``durationMs.latestOffset`` (the planning step, which for a Python source
includes the JVM-Python round trip of the offsets) of every batch with data after the drain,
and its other steps; the offset log entry (the ``offsets/<batch>`` file, and its source
line) of the last batch and the largest one retained; the checkpoint folder's bytes after
the drain and after the batches that followed, per batch; the peak and final resident
memory of the query's Python source runner (``python_streaming_source_runner``; none for
``format("kafka")``, whose planner is in the JVM) and the driver JVM's peak heap. Medians
over rounds with the spread (min-max).

Usage::

    .venv/bin/python -m benchmarks.partitions_scale [--partitions 1000] [--pattern-topics 10]
        [--runs 3] [--records-per-partition 5] [--rate 200] [--seconds 20] [--growth-batches 100]
        [--shapes pattern,single] [--results-name NAME]

Writes ``benchmarks/results/partitions_scale/<results name>.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from backlog_source.core import gc_pause, step_timings
from backlog_source.demo.apache_kafka import kafka_version, start_kafka
from benchmarks.harness.broker_and_spark import spark_session, warm_up
from benchmarks.harness.costs import CpuAccount, MemorySampler, descendants
from backlog_source.demo.topics import create_topic, produce, wait_for
from benchmarks.harness.progress import ProgressLog, batch_ends, offset_of, step_medians, step_table, timestamp_s
from benchmarks.harness.record_latency import timed_latencies
from benchmarks.harness.results import machine, results_folder, write_results
from benchmarks.harness.runs import rotated
from benchmarks.harness.stats import fmt, median_and_spread, percentile, with_spread
from benchmarks.harness.traffic import LIVE_TOPIC_CONFIG, await_deliveries, delivered_ends, start_producer
from tests.support.spark_kafka import spark_kafka_connector_jars

SOURCES = ("backlog", "kafka")
#: The broker's settings for many partitions: each partition's offset and time indexes are
#: preallocated (10 MiB each by default) and memory-mapped; small ones keep ten thousand of
#: them cheap. The heap holds the partitions' state.
BROKER_SETTINGS = {"log.index.size.max.bytes": str(64 << 10)}
BROKER_HEAP_MB = 2048
#: How long creating and filling a shape's topics may take (10,000 partitions: minutes).
CREATE_TIMEOUT_S = 600
FIGURES = ("drain_s", "drain_records", "latest_offset_p50_ms", "latest_offset_p90_ms", "drain_latest_offset_p50_ms",
           "batch_p50_s", "latency_p50_s", "latency_p99_s", "offset_entry_bytes", "offset_entry_max_bytes",
           "checkpoint_bytes_per_batch", "runner_peak_mib", "runner_end_mib", "heap_peak_mib",
           "idle_spark_jvm_cores", "idle_runner_cores", "idle_broker_cores", "idle_plans_per_s")

#: While caught up and idle, whose CPU is counted (harness/costs.py's kinds): the driver JVM
#: (Spark's planner for format("kafka")), the source's runner and other driver-side Python
#: processes, and the broker answering the planners.
IDLE_KINDS = {"idle_spark_jvm_cores": "spark_jvm", "idle_runner_cores": "python_driver_side",
              "idle_broker_cores": "broker"}


def shape_topics(shape: str, tag: str, partitions: int, pattern_topics: int) -> dict[str, int]:
    """Topic name -> partitions of a shape."""
    if shape == "single":
        return {f"scale-{tag}-single": partitions}
    return {f"scale-{tag}-p{i:03d}": partitions // pattern_topics for i in range(pattern_topics)}


#: Partitions one CreateTopics or CreatePartitions request creates at most (KRaft's limit is
#: 10,000 records a request, a topic's own record included).
PER_REQUEST = 5_000


def create_and_fill(bootstrap: str, topics: dict[str, int], records_per_partition: int) -> None:
    """Create ``topics`` (LogAppendTime, for latency) and write ``records_per_partition``
    records of 100 B into each partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # KRaft's controller refuses a request of more than 10,000 metadata records ("excessively
    # large batch operation": a record per topic and per partition), so topics are created in
    # requests of at most PER_REQUEST partitions, and a bigger topic grows by CreatePartitions.
    pending = [(t, min(n, PER_REQUEST)) for t, n in topics.items()]
    while pending:
        request, total = [], 0
        while pending and total + pending[0][1] <= PER_REQUEST:
            request.append(pending.pop(0))
            total += request[-1][1]
        futures = admin.create_topics([NewTopic(t, n, config=dict(LIVE_TOPIC_CONFIG)) for t, n in request],
                                      request_timeout=CREATE_TIMEOUT_S)
        for future in futures.values():
            future.result(timeout=CREATE_TIMEOUT_S)
    for topic, partitions in topics.items():
        for count in range(2 * PER_REQUEST, partitions + PER_REQUEST, PER_REQUEST):
            [future] = admin.create_partitions([NewPartitions(topic, min(count, partitions))],
                                               request_timeout=CREATE_TIMEOUT_S).values()
            future.result(timeout=CREATE_TIMEOUT_S)
    failures: list[Exception] = []
    try:
        wait_for(lambda: answered(bootstrap, topics, failures), CREATE_TIMEOUT_S, "the new topics' leaders",
                 interval_s=1.0)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; the last ListOffsets failed with: {failures[-1:]}") from None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "all"})
    for topic, partitions in topics.items():
        for partition in range(partitions):
            for _ in range(records_per_partition):
                while True:
                    try:
                        producer.produce(topic, value=b"f" * 100, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
        producer.poll(0)
    if producer.flush(CREATE_TIMEOUT_S):
        raise RuntimeError("the fill was not acknowledged")


def log_ends(admin, topics: dict[str, int]) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> log end`` of every partition of ``topics``: one ListOffsets."""
    futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, n in topics.items() for p in range(n)},
                                 request_timeout=120)
    return {(tp.topic, tp.partition): f.result(timeout=120).offset for tp, f in futures.items()}


#: How often each request of :func:`admin_requests` is timed.
ADMIN_REPEATS = 5


def admin_requests(bootstrap: str, topics: dict[str, int]) -> dict[str, float]:
    """The median milliseconds of each request the source's planner makes per batch, made
    with its own client (``KafkaAdmin``) outside Spark: listing the cluster's topics (a
    pattern), describing the topics read, and one ListOffsets for every partition, each also
    with Python's collector held off as the planner holds it; and the offset dict's encode and
    decode. Where a plan's time goes before Spark's round trip."""
    from backlog_source.core.buckets import Bucket
    from backlog_source.core.settings import parse_options
    from backlog_source.enumerator import state_codec
    from backlog_source.enumerator.kafka_admin import KafkaAdmin
    from backlog_source.enumerator.state import SourceOffset

    client = KafkaAdmin.from_settings(parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": "x"}))
    buckets = [Bucket(t, p) for t, n in topics.items() for p in range(n)]
    calls = {"list_topics": lambda: client.topic_names(),
             "describe_topics": lambda: client.describe_topics(list(topics)),
             "list_offsets": lambda: client.latest_offsets(buckets)}
    # The same ListOffsets with a bare client, with Nagle's algorithm (librdkafka's default) and
    # without it (as the Java client, TCP_NODELAY): a large request leaves in several segments.
    for name, nodelay in (("bare_list_offsets", False), ("bare_list_offsets_nodelay", True)):
        bare = AdminClient({"bootstrap.servers": bootstrap, "socket.nagle.disable": nodelay})
        calls[name] = lambda bare=bare: log_ends(bare, topics)
    # The planner's three requests again as latestOffset makes them: with Python's collector
    # held off (core/gc_pause.py), which costs nothing but shows what the pause saves.
    for name in ("list_topics", "describe_topics", "list_offsets"):
        calls[f"{name} (collector off)"] = lambda call=calls[name]: _paused(call)
    offset = SourceOffset("x", {b: 1 for b in buckets})
    calls["encode"] = lambda: state_codec.encode(offset)
    encoded = state_codec.encode(offset)
    calls["decode"] = lambda: state_codec.decode(encoded)
    timed = {}
    for name, call in calls.items():
        call()  # the first call connects
        times = []
        for _ in range(ADMIN_REPEATS):
            began = time.perf_counter()
            call()
            times.append((time.perf_counter() - began) * 1000)
        timed[name] = percentile(times, 0.5)
    client.close()
    return timed


def _paused(call):
    with gc_pause.paused():
        return call()


def answered(bootstrap: str, topics: dict[str, int], failures: list[Exception]) -> bool:
    """Whether every partition of ``topics`` answers ListOffsets (has a leader), asked with a
    fresh client each time: a client kept since before a topic grew by CreatePartitions was
    seen failing for ten minutes on 10,000 partitions while a fresh one answered at once.
    A failure is appended to ``failures``."""
    try:
        log_ends(AdminClient({"bootstrap.servers": bootstrap}), topics)
    except Exception as exc:  # no leader yet: asked again
        failures.append(exc)
        return False
    return True


def last_reaches(log: ProgressLog, query_id: str, ends: dict[tuple[str, int], int]) -> bool:
    """Whether the query's latest progress event ends at or past ``ends``: looked up once a
    second from the events already parsed, so waiting costs the measured query little."""
    progress = log.of(query_id)
    if not progress:
        return False
    end = offset_of(progress[-1]["sources"][0]["endOffset"])
    positions = end.get("positions", end)
    return all(positions.get(topic, {}).get(str(partition), -1) >= o for (topic, partition), o in ends.items())


def reached_at(progress: list[dict], ends: dict[tuple[str, int], int]) -> float | None:
    """When the first batch whose end positions reach ``ends`` committed (wall-clock s)."""
    for batch in batch_ends(progress):
        if all(batch["positions"].get(key, -1) >= end for key, end in ends.items()):
            return batch["committed"]
    return None


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def offset_entries(checkpoint: Path) -> dict[int, tuple[int, int]]:
    """Batch id -> (bytes of its ``offsets/<id>`` file, bytes of the source's line in it)."""
    found = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit():
            data = f.read_bytes()
            found[int(f.name)] = (len(data), len(data.rstrip(b"\n").split(b"\n")[-1]))
    return found


class RunnerMemory:
    """Peak and last resident memory (MiB) of the Spark JVM's ``python_streaming_source_runner``
    processes (a Python source's planner on the driver), sampled every ``interval_s``."""

    def __init__(self, spark, interval_s: float = 0.5) -> None:
        self._jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.peak_mib: float | None = None
        self.last_mib: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "RunnerMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> float | None:
        total = None
        for pid in descendants(self._jvm_pid):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"streaming_source_runner" not in command:
                    continue
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
            total = (total or 0) + rss / 1024
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            now = self.sample()
            if now is not None:
                self.last_mib = now
                self.peak_mib = max(self.peak_mib or 0.0, now)
            self._stop.wait(self._interval_s)


def start_query(spark, source: str, bootstrap: str, shape: str, tag: str, topics: dict[str, int], checkpoint: str,
                starting: str):
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("startingOffsets", starting))
    if shape == "single":
        reader = reader.option("subscribe", next(iter(topics)))
    else:
        reader = reader.option("subscribePattern", rf"^scale-{tag}-p\d+$")
    return (reader.load().writeStream.format("noop").trigger(processingTime="0 seconds")
            .option("checkpointLocation", checkpoint).start())


def run_query(spark, log: ProgressLog, bootstrap: str, source: str, shape: str, tag: str, topics: dict[str, int],
              args, growth_batches: int) -> dict:
    """One query of ``source`` on ``shape``: drain, caught-up traffic, figures."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    live_topic = next(iter(topics))
    live_partitions = args.live_partitions or topics[live_topic]
    drains = source in args.drain_sources.split(",")
    with tempfile.TemporaryDirectory() as folder, RunnerMemory(spark) as runner, MemorySampler(spark) as heap:
        checkpoint = Path(folder)
        ends = log_ends(admin, topics)
        started = time.time()
        query = start_query(spark, source, bootstrap, shape, tag, topics, folder, "earliest" if drains else "latest")
        try:
            # Not draining: the query starts at the log ends; its first batch comes with the live records.
            wait_for(lambda: last_reaches(log, query.id, ends) if drains else bool(log.of(query.id)),
                     args.drain_timeout, f"{source} on {shape}: the drain", interval_s=1.0)
            drained = log.of(query.id)
            drained_at = reached_at(drained, ends) if drains else None
            drain_batches = [p for p in drained if p["numInputRows"]]
            after_drain_bytes, after_drain_batch = folder_bytes(checkpoint), max(offset_entries(checkpoint), default=-1)
            runner_after_drain = runner.sample()
            delivered, kept_up = [], True
            rounds = 0
            while True:
                producer, done = start_producer(bootstrap, live_topic, live_partitions, args.rate, args.seconds)
                sent = await_deliveries(producer, done, args.seconds + 120)
                delivered += sent
                live_ends = {(live_topic, p): end for p, end in delivered_ends(sent).items()}
                try:
                    wait_for(lambda: last_reaches(log, query.id, live_ends), args.catch_up_seconds,
                             f"{source} on {shape}: caught up", interval_s=1.0)
                except TimeoutError:
                    kept_up = False
                    break
                rounds += 1
                committed = max(offset_entries(checkpoint))
                if committed - after_drain_batch >= growth_batches:
                    break
            entries = offset_entries(checkpoint)
            last_batch = max(entries)
            end_bytes = folder_bytes(checkpoint)
            busy_until = time.time()  # the planner's steps are of the batches before the idle window
            idle = idle_cost(args.idle_seconds, args.timings) if kept_up and args.idle_seconds > 0 else {}
        finally:
            query.stop()
    progress = log.of(query.id)
    live = [p for p in progress if p["numInputRows"] and p["batchId"] > after_drain_batch]
    latest_ms = [p["durationMs"].get("latestOffset", 0) for p in live]
    timed = timed_latencies(live_topic, progress, delivered) if kept_up else []
    first = min((at for at, _ in timed), default=0)
    steady = [latency for at, latency in timed if at >= first + args.settle_seconds]
    return {
        "drain_s": drained_at - started if drains else None, "drain_records": sum(ends.values()) if drains else None,
        "drain_batches": len(drain_batches),
        "drain_latest_offset_p50_ms": percentile([p["durationMs"].get("latestOffset", 0) for p in drain_batches], 0.5),
        "kept_up": kept_up, "live_records": len(delivered), "live_batches": len(live),
        "latest_offset_p50_ms": percentile(latest_ms, 0.5), "latest_offset_p90_ms": percentile(latest_ms, 0.9),
        "batch_p50_s": percentile([p["durationMs"]["triggerExecution"] / 1000 for p in live], 0.5),
        "latency_p50_s": percentile(steady, 0.5), "latency_p99_s": percentile(steady, 0.99),
        "offset_entry_bytes": entries[last_batch][0], "offset_entry_source_bytes": entries[last_batch][1],
        "offset_entry_max_bytes": max(e[0] for e in entries.values()),
        "checkpoint_after_drain_bytes": after_drain_bytes, "checkpoint_end_bytes": end_bytes,
        "batches_after_drain": last_batch - after_drain_batch,
        "checkpoint_bytes_per_batch": (end_bytes - after_drain_bytes) / max(1, last_batch - after_drain_batch),
        "runner_after_drain_mib": runner_after_drain, "runner_peak_mib": runner.peak_mib, "runner_end_mib": runner.last_mib,
        "heap_peak_mib": heap.heap_peak_mib, "steps_p50_ms": step_medians(live),
        "planner_steps_p50_ms": planner_steps(args.timings, started, busy_until),
        "latest_offset_parts_p50_ms": latest_offset_parts(args.timings, live),
        **idle,
    }


def idle_cost(seconds: float, timings: Path) -> dict[str, float]:
    """What the query costs caught up with nothing arriving (trigger ``0 seconds``): the CPU
    cores each kind of process used over ``seconds`` (:data:`IDLE_KINDS`), and for
    format("backlog") how many times a second its planner ran ``latestOffset`` (none recorded
    for format("kafka"))."""
    began = time.time()
    with CpuAccount() as cpu:
        time.sleep(seconds)  # the measuring window itself, not a wait for a condition
    ended = time.time()
    plans = sum(1 for path in timings.glob("*.jsonl") for line in path.read_text().splitlines()
                if (entry := json.loads(line))["step"] == "driver.latestOffset" and began <= entry["at"] <= ended)
    return {**{figure: round(cpu.seconds.get(kind, 0.0) / seconds, 3) for figure, kind in IDLE_KINDS.items()},
            "idle_plans_per_s": round(plans / seconds, 1) if plans else None}


def planner_steps(directory: Path, since: float, until: float) -> dict[str, float | None]:
    """The median milliseconds of each of this source's planner steps
    (``BACKLOG_SOURCE_STEP_TIMINGS``, ``driver.*``) recorded between ``since`` and ``until``:
    where its ``latestOffset`` and ``partitions()`` time goes. Empty for ``format("kafka")``."""
    steps: dict[str, list[float]] = {}
    for path in directory.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry["step"].startswith("driver.") and since <= entry["at"] <= until:
                steps.setdefault(entry["step"], []).append(entry["ms"])
    return {step: percentile(values, 0.5) for step, values in sorted(steps.items())}


#: The parts of Spark's ``durationMs.latestOffset`` of one batch: the planner's steps that ran
#: inside it (its ``latestOffset`` hook, of which the listing and the ListOffsets request, and
#: ``reportLatestOffset``), the rest being PySpark's JVM-runner round trips (``outside``).
LATEST_OFFSET_PARTS = {"hook": "driver.latestOffset", "listing": "driver.refresh.subscription",
                       "list_offsets": "driver.refresh.latest_offsets", "report": "driver.reportLatestOffset"}


def latest_offset_parts(directory: Path, batches: list[dict]) -> dict[str, float | None]:
    """Median ms of each of :data:`LATEST_OFFSET_PARTS` within the ``latestOffset`` of each of
    ``batches`` (progress events), matched per batch by time: the steps that started and ended
    between the trigger's start and the end of its ``latestOffset``. Medians over all of a
    query's calls mix in the cheaper calls that found nothing; these are the batches' own.
    Empty for ``format("kafka")`` (no steps)."""
    entries = [json.loads(line) for path in directory.glob("*.jsonl") for line in path.read_text().splitlines()]
    entries = [e for e in entries if e["step"] in LATEST_OFFSET_PARTS.values()]
    parts: dict[str, list[float]] = {}
    for progress in batches:
        began = timestamp_s(progress["timestamp"])
        spent = progress["durationMs"].get("latestOffset", 0)
        inside = [e for e in entries if began - 0.002 <= e["at"] - e["ms"] / 1000 and e["at"] <= began + spent / 1000 + 0.002]
        if [e["step"] for e in inside].count(LATEST_OFFSET_PARTS["hook"]) != 1:
            continue  # not told apart (the clocks' milliseconds), or no planner steps
        timed = {part: sum(e["ms"] for e in inside if e["step"] == step) for part, step in LATEST_OFFSET_PARTS.items()}
        timed["outside"] = spent - timed["hook"] - timed["report"]
        for part, ms in timed.items():
            parts.setdefault(part, []).append(ms)
    return {part: percentile(values, 0.5) for part, values in parts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1_000, help="per shape")
    parser.add_argument("--pattern-topics", type=int, default=10, help="the pattern shape's topics")
    parser.add_argument("--shapes", default="pattern,single")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records-per-partition", type=int, default=5)
    parser.add_argument("--rate", type=float, default=200, help="caught-up traffic, records/s")
    parser.add_argument("--seconds", type=float, default=20, help="caught-up traffic per round")
    parser.add_argument("--settle-seconds", type=float, default=5, help="left out of the latency figures")
    parser.add_argument("--catch-up-seconds", type=float, default=180,
                        help="after the traffic: longer than this to catch up counts as not keeping up")
    parser.add_argument("--drain-timeout", type=float, default=900)
    parser.add_argument("--growth-batches", type=int, default=100, help="batches after the drain, first round only")
    parser.add_argument("--live-partitions", type=int, default=0,
                        help="the caught-up traffic goes to this many partitions of the live topic (0: all)")
    parser.add_argument("--drain-sources", default="backlog,kafka",
                        help="the sources that drain the fill; the others start at latest")
    parser.add_argument("--idle-seconds", type=float, default=0,
                        help="after the caught-up traffic, CPU measured this long with nothing arriving (0: not)")
    parser.add_argument("--results-name", default="partitions_scale")
    args = parser.parse_args()
    args.timings = Path(tempfile.mkdtemp(prefix="partitions-scale-timings-"))
    step_timings.switch_on(str(args.timings))  # the planner's runner inherits it (local mode)
    shapes = [s.strip() for s in args.shapes.split(",")]
    tag = f"{os.getpid()}"
    topics = {shape: shape_topics(shape, tag, args.partitions, args.pattern_topics) for shape in shapes}
    configs = [f"{source} @ {shape}" for shape in shapes for source in SOURCES]
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    setup_s, requests = {}, {}
    broker = start_kafka(heap_mb=BROKER_HEAP_MB, settings=BROKER_SETTINGS)
    try:
        bootstrap = broker.bootstrap_servers
        for shape in shapes:
            began = time.time()
            create_and_fill(bootstrap, topics[shape], args.records_per_partition)
            setup_s[shape] = time.time() - began
            requests[shape] = admin_requests(bootstrap, topics[shape])
            print(f"{shape}: created and filled in {setup_s[shape]:.1f} s; requests {requests[shape]}", flush=True)
        spark = spark_session(jars=spark_kafka_connector_jars())
        try:
            log = ProgressLog()
            spark.streams.addListener(log.listener)
            warm_up(spark, bootstrap)
            warm_up_kafka(spark, bootstrap)
            for round_index in range(args.runs):
                for config in rotated(configs, round_index):
                    source, shape = config.split(" @ ")
                    result = run_query(spark, log, bootstrap, source, shape, tag, topics[shape], args,
                                       args.growth_batches if round_index == 0 else 0)
                    runs[config].append(result)
                    print(f"{config}: {({k: v for k, v in result.items() if k != 'steps_p50_ms'})}", flush=True)
        finally:
            spark.stop()
    finally:
        broker.stop()
    report(runs, shapes, setup_s, requests, args, kafka_version())


def warm_up_kafka(spark, bootstrap: str) -> None:
    """``format("kafka")``'s first query pays its own classes' loading: one small drain."""
    from benchmarks.harness.runs import run_available_now

    topic = f"bench-warm-up-kafka-{time.time_ns()}"
    create_topic(bootstrap, topic, 8)
    produce(bootstrap, topic, ((i % 8, None, b"w" * 100) for i in range(10_000)))
    run_available_now(spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                      .option("subscribe", topic).option("startingOffsets", "earliest").load())


def report(runs: dict[str, list[dict]], shapes: list[str], setup_s: dict, requests: dict, args, version: str) -> None:
    summaries = {c: {f: median_and_spread([r[f] for r in rs if r.get(f) is not None]) for f in FIGURES}
                 for c, rs in runs.items()}
    for config, rs in runs.items():
        summaries[config]["kept_up"] = f"{sum(r['kept_up'] for r in rs)} of {len(rs)}"
    command = "python -m benchmarks.partitions_scale " + " ".join(sys.argv[1:])
    per_topic = args.partitions // args.pattern_topics
    lines = [
        f"# {args.partitions:,} partitions: format(\"backlog\") beside format(\"kafka\")", "",
        f"Command: `{command}`", "",
        f"Apache Kafka {version} (one node, heap {BROKER_HEAP_MB} MiB, index files of 64 KiB), Spark's defaults, "
        f"`local[*]` on {os.cpu_count()} cores. Shapes: `pattern` = {args.pattern_topics} topics x {per_topic} "
        f"partitions under `subscribePattern`, `single` = one topic of {args.partitions:,} under `subscribe`; "
        f"{args.records_per_partition} records of 100 B per partition at creation "
        f"(created and filled in {', '.join(f'{s} {v:.0f} s' for s, v in setup_s.items())}). "
        f"Each query trigger `0 seconds`, into `noop`; {', '.join(f'`{d}`' for d in args.drain_sources.split(','))} "
        f"from `earliest` (the drain), any other from `latest` (no drain); then {args.rate:,.0f} records/s "
        f"for {args.seconds:.0f} s into {args.live_partitions or 'all the'} partitions of one topic of the shape "
        f"(round robin); in the first round, more until {args.growth_batches} batches had committed after the drain. "
        f"Median (min-max) of {args.runs} rounds in rotated order after a warm-up query of each source.", "",
        "`latestOffset`: Spark's `durationMs.latestOffset` of the batches with data after the drain (the planning "
        "step; for a Python source it includes the offsets' round trip between the JVM and the runner). Offset entry: "
        "the checkpoint's `offsets/<batch>` file of the last batch, and the largest one retained (a batch of the "
        "backlog phase carries its boundaries). Checkpoint per batch: the folder's growth after the drain, per batch "
        "(Spark keeps the last 100 batches' files). Runner: resident memory of the query's Python source runner "
        "on the driver (none for `format(\"kafka\")`).", "",
        "| source @ shape | drain s | records | latestOffset p50 ms | p90 ms | during the drain ms | batch p50 s | "
        "kept up | latency p50 s | p99 s | offset entry B | largest B | checkpoint B/batch | runner peak MiB | "
        "runner end MiB | JVM heap peak MiB |",
        "| --- |" + " ---: |" * 15,
    ]
    for config, s in summaries.items():
        lines.append(
            f"| {config} | {with_spread(s['drain_s'], '.1f')} | {with_spread(s['drain_records'], ',.0f')} | "
            f"{with_spread(s['latest_offset_p50_ms'], '.0f')} | {with_spread(s['latest_offset_p90_ms'], '.0f')} | "
            f"{with_spread(s['drain_latest_offset_p50_ms'], '.0f')} | {with_spread(s['batch_p50_s'], '.2f')} | "
            f"{s['kept_up']} | {with_spread(s['latency_p50_s'], '.2f')} | {with_spread(s['latency_p99_s'], '.2f')} | "
            f"{with_spread(s['offset_entry_bytes'], ',.0f')} | {with_spread(s['offset_entry_max_bytes'], ',.0f')} | "
            f"{with_spread(s['checkpoint_bytes_per_batch'], ',.0f')} | {with_spread(s['runner_peak_mib'], '.0f')} | "
            f"{with_spread(s['runner_end_mib'], '.0f')} | {with_spread(s['heap_peak_mib'], '.0f')} |")
    lines += ["", "Where a batch with data after the drain spends its time: the median milliseconds of each of "
              "Spark's steps (`durationMs`), median over rounds.", "", *step_table(runs, "steps_p50_ms"), "",
              "Where `format(\"backlog\")`'s planner spends it (`BACKLOG_SOURCE_STEP_TIMINGS`, median ms of each "
              "step over the query, median over rounds; `driver.refresh` holds the listing and the ListOffsets, "
              "`driver.partitions` is `partitions()`):", "", *planner_table(runs), "",
              "Spark's `latestOffset` of a batch with data after the drain, taken apart per batch (median ms, median "
              "over rounds): the source's `latestOffset` hook, of which the listing (`subscription`) and the "
              "ListOffsets request, its `reportLatestOffset`, and the rest (`outside`: PySpark's round trips between "
              "the JVM and the runner, the offsets' JSON):", "", *parts_table(runs), "",
              f"The planner's requests alone, with its own client outside Spark, median ms of {ADMIN_REPEATS} "
              "(and the offset dict's encode and decode, every partition at one position):", "",
              "| shape | " + " | ".join(next(iter(requests.values()), {})) + " |",
              "| --- |" + " ---: |" * len(next(iter(requests.values()), {})),
              *(f"| {shape} | " + " | ".join(fmt(v, ".1f") for v in timed.values()) + " |"
                for shape, timed in requests.items()), ""]
    if args.idle_seconds > 0:
        lines += [f"Caught up and idle (trigger `0 seconds`, nothing arriving for {args.idle_seconds:.0f} s after the "
                  "traffic): CPU cores used by the driver JVM, the driver-side Python processes (format(\"backlog\")'s "
                  "runner) and the broker, and how often format(\"backlog\")'s planner ran `latestOffset` "
                  "(median, min-max):", "",
                  "| source @ shape | driver JVM cores | driver-side Python cores | broker cores | plans/s |",
                  "| --- | ---: | ---: | ---: | ---: |",
                  *(f"| {config} | {with_spread(s['idle_spark_jvm_cores'], '.2f')} | "
                    f"{with_spread(s['idle_runner_cores'], '.2f')} | {with_spread(s['idle_broker_cores'], '.2f')} | "
                    f"{with_spread(s['idle_plans_per_s'], '.1f')} |" for config, s in summaries.items()), ""]
    ratios = {}
    for shape in shapes:
        ours, theirs = summaries[f"backlog @ {shape}"], summaries[f"kafka @ {shape}"]

        def ratio(figure: str) -> float | None:
            a, b = ours[figure]["median"], theirs[figure]["median"]
            return a / b if a is not None and b else None

        ratios[shape] = {f: ratio(f) for f in ("latest_offset_p50_ms", "offset_entry_bytes", "offset_entry_max_bytes",
                                                "drain_s", "latency_p99_s")}
        lines.append(f"- `{shape}`, backlog / kafka: latestOffset {fmt(ratios[shape]['latest_offset_p50_ms'])}x "
                     f"(target <= 1.2x, and under 1 s), offset entry {fmt(ratios[shape]['offset_entry_bytes'])}x "
                     f"(largest {fmt(ratios[shape]['offset_entry_max_bytes'])}x), drain {fmt(ratios[shape]['drain_s'])}x, "
                     f"latency p99 {fmt(ratios[shape]['latency_p99_s'])}x.")
    first_round = {c: rs[0] for c, rs in runs.items()}
    lines.append("- First round's checkpoint after the drain -> after the batches that followed: " + "; ".join(
        f"{c} {r['checkpoint_after_drain_bytes']:,} -> {r['checkpoint_end_bytes']:,} B over {r['batches_after_drain']} "
        "batches" for c, r in first_round.items()) + ".")
    write_results("partitions_scale", args.results_name,
                  {"command": command, "machine": machine(), "kafka": version, "args": vars(args), "setup_s": setup_s,
                   "requests_ms": requests,
                   "summaries": summaries, "ratios": ratios, "runs": runs}, lines)
    draw(summaries, shapes, args)


def planner_table(runs: dict[str, list[dict]]) -> list[str]:
    steps = sorted({step for rs in runs.values() for r in rs for step in r["planner_steps_p50_ms"]})
    lines = ["| configuration | " + " | ".join(steps) + " |", "| --- |" + " ---: |" * len(steps)]
    for config, rs in runs.items():
        if config.startswith("backlog"):
            medians = [median_and_spread([r["planner_steps_p50_ms"][step] for r in rs
                                          if r["planner_steps_p50_ms"].get(step) is not None])["median"] for step in steps]
            lines.append(f"| {config} | " + " | ".join(fmt(m, ".1f") for m in medians) + " |")
    return lines


def parts_table(runs: dict[str, list[dict]]) -> list[str]:
    parts = [*LATEST_OFFSET_PARTS, "outside"]
    lines = ["| configuration | Spark's latestOffset | " + " | ".join(parts) + " |", "| --- |" + " ---: |" * (len(parts) + 1)]
    for config, rs in runs.items():
        if config.startswith("backlog"):
            medians = [median_and_spread([r[figure] for r in rs if r.get(figure) is not None])["median"]
                       for figure in ["latest_offset_p50_ms"]]
            medians += [median_and_spread([r.get("latest_offset_parts_p50_ms", {}).get(part) for r in rs
                                           if r.get("latest_offset_parts_p50_ms", {}).get(part) is not None])["median"]
                        for part in parts]
            lines.append(f"| {config} | " + " | ".join(fmt(m, ".1f") for m in medians) + " |")
    return lines


def draw(summaries: dict, shapes: list[str], args) -> None:
    """``results/partitions_scale/<name>.png``: per shape, the two sources' latestOffset,
    offset entry and runner memory side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("latest_offset_p50_ms", "latestOffset p50 (ms)"), ("offset_entry_max_bytes", "largest offset entry (B)"),
              ("checkpoint_bytes_per_batch", "checkpoint growth per batch (B)"), ("latency_p99_s", "latency p99 (s)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    width = 0.38
    for ax, (figure, title) in zip(axes, panels):
        for offset, source in ((-width / 2, "backlog"), (width / 2, "kafka")):
            values = [summaries[f"{source} @ {s}"][figure] for s in shapes]
            medians = [v["median"] or 0 for v in values]
            errors = [[m - (v["min"] or m) for m, v in zip(medians, values)], [(v["max"] or m) - m for m, v in zip(medians, values)]]
            ax.bar([i + offset for i in range(len(shapes))], medians, width, yerr=errors, label=source, capsize=3)
        ax.set_xticks(range(len(shapes)), shapes)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=8)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{args.partitions:,} partitions", fontsize=10)
    fig.tight_layout()
    fig.savefig(results_folder("partitions_scale") / f"{args.results_name}.png", dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
