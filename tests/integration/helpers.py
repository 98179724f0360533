"""Helpers for integration tests: producing, reading back, bounded waiting."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from backlog_source.core.errors import MalformedEvent
from backlog_source.demo.topics import create_topic, produce, wait_for  # noqa: F401  (re-exported)
from backlog_source.events.finish_event import BacklogFinishEvent


def make_topic(broker, name: str, partitions: int, per_partition: int = 0, value_size: int = 20, start: int = 0) -> int:
    """Create ``name`` with ``partitions`` partitions and ``per_partition`` records in each
    (values ``b"<partition>:<n>"`` padded). Returns the records produced."""
    create_topic(broker.bootstrap_servers, name, partitions)
    if per_partition == 0:
        return 0
    return fill(broker, name, partitions, per_partition, value_size=value_size, start=start)


def fill(broker, name: str, partitions: int, per_partition: int, value_size: int = 20, start: int = 0, **kwargs) -> int:
    records = (
        (p, f"k{n}".encode(), f"{p}:{n}".encode().ljust(value_size, b"."))
        for n in range(start, start + per_partition)
        for p in range(partitions)
    )
    return produce(broker.bootstrap_servers, name, records, **kwargs)


def reader(spark, broker, **options):
    stream = spark.readStream.format("backlog").option("kafka.bootstrap.servers", broker.bootstrap_servers)
    for key, value in options.items():
        stream = stream.option(key, str(value))
    return stream.load()


def log_end_offsets(broker, name: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    count = len(admin.list_topics(name, timeout=10).topics[name].partitions)
    futures = admin.list_offsets({TopicPartition(name, p): OffsetSpec.latest() for p in range(count)})
    return {tp.partition: f.result(timeout=10).offset for tp, f in futures.items()}


def wait_for_progress(query, predicate, timeout_s: float = 120, what: str = "progress"):
    """Wait until some progress event of ``query`` satisfies ``predicate``; fail fast if the
    query died. ``predicate`` is asked again only when a new progress event appeared, so it
    must depend on the progress (and on values fixed before the wait), nothing else."""

    # recentProgress renders up to 100 progress entries as JSON in the JVM and parses them
    # here, with a py4j call per entry: polled every 0.1 s that was a good part of the suite's
    # CPU. lastProgress is one entry: the whole list is read only when a new one appeared.
    newest = {"seen": object()}

    def check():
        if query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        last = query.lastProgress
        stamp = last and (last["id"], last["runId"], last["batchId"], last["timestamp"])
        if stamp == newest["seen"]:
            return False
        newest["seen"] = stamp
        return any(predicate(p) for p in query.recentProgress)

    try:
        return wait_for(check, timeout_s, what)
    except TimeoutError as timeout:
        last = query.lastProgress
        seen = last and [(s["description"], s["endOffset"]) for s in last["sources"]]
        raise TimeoutError(f"{timeout}; the last progress (batch {last and last['batchId']}) ended at {seen}") from None


def describe_stuck(spark, queries) -> str:
    """What a test that timed out waiting on ``queries`` saw: each query's status and last
    batches, and every active Spark stage with its tasks: enough to tell a stuck planner
    (status "Getting offsets") from a stuck read (a stage whose task never ends)."""
    lines = []
    for query in queries:
        recent = [(p["batchId"], p["durationMs"].get("triggerExecution"), p["numInputRows"])
                  for p in query.recentProgress[-4:]]
        lines.append(f"query {query.name or query.id}: active={query.isActive} status={query.status} "
                     f"last batches (id, ms, rows)={recent} exception={query.exception()}")
    tracker = spark.sparkContext.statusTracker()
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            lines.append(f"active stage {stage_id} ({info.name}): tasks active={info.numActiveTasks} "
                         f"done={info.numCompletedTasks} failed={info.numFailedTasks} of {info.numTasks}")
    return "\n".join(lines)


def settle(seconds: float) -> None:
    """A deliberate pause where a test must show that something does *not* happen."""
    time.sleep(seconds)


#: What Spark 4.2 raises when a new Python process (the stream's planner, a data source
#: lookup) has not connected back to the JVM within PythonWorkerFactory's 10 s, a wait that is
#: hard-coded (not a setting). On a loaded machine a Python start can take that long; it says
#: nothing about the code under test.
SLOW_PYTHON_START = "Python worker failed to connect back"
#: How long :func:`start_query` waits for a query's first plan before handing it over as it is.
FIRST_PLAN_WAIT_S = 120.0


def start_query(start, *, query_of=lambda started: started, stop=None, what: str = "query"):
    """``start()`` a streaming query (a writer's ``start``, or anything whose result
    ``query_of`` maps to one), and start it once more if it failed before its first batch
    with :data:`SLOW_PYTHON_START`, saying so with a warning. Every test that starts a query
    goes through here (:func:`start_noop`, :func:`start_memory`, :func:`start_aware`,
    ``differential.start``).

    Waits until the query has planned its first batch (the planner's Python worker answered:
    its status is past "Initializing" and "Getting offsets"), ended, or ``FIRST_PLAN_WAIT_S``
    passed; a query that failed otherwise, or after a batch, is returned as it is, for the
    test to see. ``stop(started)`` ends a failed start before the second (the query's own
    ``stop`` by default)."""
    started = start()
    if not _failed_on_slow_python_start(query_of(started)):
        return started
    failure = str(query_of(started).exception()).splitlines()[0][:300]
    warnings.warn(f"{what} failed before its first batch because a Python worker started too slowly "
                  f"({failure}); starting it once more", RuntimeWarning, stacklevel=2)
    print(f"RESTARTED {what}: it failed before its first batch with {SLOW_PYTHON_START!r}", flush=True)
    (stop or (lambda s: query_of(s).stop()))(started)
    return start()


def _failed_on_slow_python_start(query) -> bool:
    def planned_or_ended() -> bool:
        if not query.isActive or query.lastProgress is not None:
            return True
        return not query.status["message"].startswith(("Initializing", "Getting offsets"))

    try:
        wait_for(planned_or_ended, FIRST_PLAN_WAIT_S, "the query's first plan", interval_s=0.05)
    except TimeoutError:
        return False  # still planning: the test's own waits decide
    if query.isActive or query.lastProgress is not None or query.exception() is None:
        return False
    return SLOW_PYTHON_START in str(query.exception())


def start_aware(writer, *args, **kwargs):
    """``start_backlog_aware(writer, ...)`` through :func:`start_query`: a handle whose first
    run failed with :data:`SLOW_PYTHON_START` before its first batch is stopped and started
    once more."""
    from backlog_source import start_backlog_aware

    return start_query(lambda: start_backlog_aware(writer, *args, **kwargs), query_of=lambda handle: handle.query,
                       stop=lambda handle: handle.stop(), what="start_backlog_aware's query")


def start_noop(df, tmp_path, trigger: str = "100 milliseconds", name: str = "ckpt"):
    """Start ``df`` into the noop sink with a checkpoint under ``tmp_path``."""
    writer = (
        df.writeStream.format("noop")
        .trigger(processingTime=trigger)
        .option("checkpointLocation", str(tmp_path / name))
    )
    return start_query(writer.start)


def start_memory(df, tmp_path, table: str, trigger: str = "200 milliseconds"):
    """Start ``df`` into the memory sink as ``table`` with a checkpoint under ``tmp_path``."""
    writer = (
        df.writeStream.format("memory").queryName(table)
        .trigger(processingTime=trigger)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    return start_query(writer.start, what=f"memory query {table}")


def committed_parquet_files(path: Path) -> list[str]:
    """Files a Parquet sink committed, read from its log (``N`` and ``N.compact`` entries;
    a set removes the repeats), independently of Spark."""
    files = set()
    for entry in (Path(path) / "_spark_metadata").iterdir():
        if entry.name.split(".")[0].isdigit() and not entry.name.endswith(".crc"):
            for line in entry.read_text().splitlines()[1:]:  # the first line is the log version
                record = json.loads(line)
                assert record["action"] == "add"
                files.add(record["path"].removeprefix("file://"))
    return sorted(files)


def written_pairs(path) -> list[tuple[int, int]]:
    """``(partition, offset)`` of every row a Parquet sink committed, repeats kept."""
    import pyarrow.parquet as pq

    table = pq.ParquetDataset(committed_parquet_files(path)).read(columns=["partition", "offset"])
    return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))


def caught_up(query, broker, topic) -> bool:
    """The query's last progress ends at the topic's log end."""
    last = query.lastProgress
    if not last:
        return False
    positions = json.loads(last["sources"][0]["endOffset"])["positions"].get(topic, {})
    return positions == {str(p): o for p, o in log_end_offsets(broker, topic).items()}


def published_events(broker, control_topic: str, source_id: str) -> list[BacklogFinishEvent]:
    """Every BacklogFinishEvent on the control topic for ``source_id``."""
    found = []
    for value in control_messages(broker, control_topic):
        try:
            event = BacklogFinishEvent.decode(value)
        except MalformedEvent:
            continue
        if event.source_id == source_id:
            found.append(event)
    return found


def control_messages(broker, control_topic: str) -> list[bytes | None]:
    """Every message value on the control topic, to its end."""
    return [message.value() for message in partition_records(broker, control_topic)]


def partition_records(broker, topic: str, partition: int = 0) -> list:
    """Every record of one partition, from its earliest offset to its end (the end-of-partition
    event, or 5 s without a record). One message a poll: a poll returns as soon as the event
    is there, where ``consume(1000, 5.0)`` waited its 5 s out for a thousand messages."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "t", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, partition, 0)])
    found = []
    while (message := consumer.poll(5.0)) is not None:
        if message.error() is None:
            found.append(message)
        elif message.error().code() == KafkaError._PARTITION_EOF:
            break
    consumer.close()
    return found
