"""What ``backlog.commitOffsetsToGroup`` costs a batch (``enumerator/group_commits.py``).

The option's work on a batch's path is the planner's: Spark calls ``latestOffset(start)`` and
then ``commit(previous end)`` on the stream reader, in its driver-side Python worker, before
the batch runs; the offsets go to Kafka on a thread of their own. This runs those two hooks
as Spark calls them, batch after batch, on Apache Kafka (``make jvm``, one node, loopback,
no TLS or SASL), with the option off and on, side by side on the same topic: before each
batch ``--records`` records are appended to each of ``--partitions`` partitions, then each
configuration plans its batch, in rotated order. It also times the commit itself (one
OffsetCommit of every partition, what the committer's thread waits for) on the same broker.
``--batches`` batches after a warm-up; median (min-max) milliseconds.

Usage::

    .venv/bin/python -m benchmarks.group_commits [--batches 200] [--partitions 8] [--records 100]

Writes ``benchmarks/results/group_commits/group_commits.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time

from backlog_source.core.buckets import Bucket
from backlog_source.core.settings import parse_options
from backlog_source.demo.apache_kafka import kafka, kafka_version
from backlog_source.demo.topics import produce
from backlog_source.enumerator import state_codec
from backlog_source.enumerator.group_commits import KafkaGroupOffsets
from backlog_source.stream_reader import BacklogStreamReader
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.stats import median_and_spread, with_spread
from benchmarks.harness.traffic import create_live_topic

TOPIC, CONTROL = "group-commits-data", "group-commits-events"
CONFIGS = ("off", "on")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--records", type=int, default=100, help="records appended to each partition per batch")
    args = parser.parse_args()
    planner = {name: [] for name in CONFIGS}  # latestOffset + commit, per batch
    commits: list[float] = []  # one OffsetCommit of every partition, on the committer's thread
    with kafka() as cluster:
        bootstrap = cluster.bootstrap_servers
        create_live_topic(bootstrap, TOPIC, args.partitions)
        options = {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC, "startingOffsets": "earliest",
                   "backlog.eventsTopic": CONTROL}
        readers = {name: BacklogStreamReader(parse_options(
            {**options, "backlog.commitOffsetsToGroup": str(name == "on").lower()}, read="stream")) for name in CONFIGS}
        limits = {name: reader.getDefaultReadLimit() for name, reader in readers.items()}
        starts = {name: reader.initialOffset() for name, reader in readers.items()}
        settings = parse_options(options, read="stream")
        client = KafkaGroupOffsets(settings.kafka)
        appended = 0
        for batch in range(args.batches + 1):  # the first is a warm-up
            produce(bootstrap, TOPIC, ((p, None, b"x" * 100) for p in range(args.partitions)
                                       for _ in range(args.records)))
            appended += args.records
            order = CONFIGS if batch % 2 == 0 else tuple(reversed(CONFIGS))
            for name in order:
                reader, start = readers[name], starts[name]
                started = time.perf_counter()
                end = reader.latestOffset(start, limits[name])
                if batch:
                    reader.commit(start)  # Spark commits the previous batch once it has logged this one
                elapsed = (time.perf_counter() - started) * 1000
                positions = state_codec.decode(end).positions
                if set(positions.values()) != {appended}:
                    raise SystemExit(f"{name}: batch {batch} planned {positions}, expected {appended} per partition")
                starts[name] = end
                if batch:
                    planner[name].append(elapsed)
            started = time.perf_counter()
            client.commit("group-commits-bench", {Bucket(TOPIC, p): appended for p in range(args.partitions)}, 30.0)
            if batch:
                commits.append((time.perf_counter() - started) * 1000)
        for reader in readers.values():
            reader.stop()
        client.close()
    summary = {f"planner ms per batch, option {name}": median_and_spread(values) for name, values in planner.items()}
    summary["OffsetCommit ms (the committer's thread)"] = median_and_spread(commits)
    command = "python -m benchmarks.group_commits " + " ".join(sys.argv[1:])
    lines = ["# backlog.commitOffsetsToGroup: its cost per batch", "",
             f"Command: `{command}` ({machine()['cpus']} cores; Apache Kafka {kafka_version()}, loopback, no TLS). "
             f"{args.batches} batches after a warm-up, {args.partitions} partitions, {args.records} records appended "
             "to each before each batch; the planner's hooks as Spark calls them (`latestOffset(start)`, then "
             "`commit(previous end)`), the option off and on in rotated order; median (min-max).", "",
             "| what | ms |", "| --- | ---: |"]
    lines += [f"| {name} | {with_spread(s, '.2f')} |" for name, s in summary.items()]
    write_results("group_commits", "group_commits", {"command": command, "machine": machine(),
                                                     "kafka": kafka_version(), "args": vars(args),
                                                     "summary": summary, "runs": {**planner, "commit": commits}}, lines)


if __name__ == "__main__":
    main()
