"""``backlog-source`` command line: ``backlog-source demo`` (what ``make demo`` runs).

Which process: the user's driver program. It starts the embedded broker (unless
``--bootstrap-servers`` is given), seeds a backlog, and runs a query with the source.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="backlog-source", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="seed a backlog on an embedded broker and read it with format('backlog')",
        description="Start the embedded Kafka-compatible broker, seed a topic with a backlog, "
        "read it with format('backlog') and print what was read.",
    )
    demo.add_argument("--records", type=int, default=200_000, help="backlog records to seed (default 200000)")
    demo.add_argument("--partitions", type=int, default=4, help="partitions of the demo topic (default 4)")
    demo.add_argument("--max-offsets-per-trigger", type=int, default=50_000, help="records per micro-batch (default 50000)")
    demo.add_argument(
        "--bootstrap-servers",
        help="use this Kafka cluster instead of the embedded broker (then --topic must exist; nothing is seeded)",
    )
    demo.add_argument("--topic", default="demo-orders", help="topic to read (default demo-orders)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return run_demo(args)
    return 2


def run_demo(args: argparse.Namespace) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from backlog_source.broker import create_topic, produce, start_broker

    broker = None
    bootstrap = args.bootstrap_servers
    try:
        if bootstrap is None:
            broker = start_broker()
            bootstrap = broker.bootstrap_servers
            print(f"embedded broker ready at {bootstrap}")
            create_topic(bootstrap, args.topic, args.partitions)
            started = time.perf_counter()
            value = b"x" * 100
            seeded = produce(bootstrap, args.topic, ((i % args.partitions, str(i).encode(), value) for i in range(args.records)))
            print(f"seeded a backlog of {seeded:,} records over {args.partitions} partitions "
                  f"in {time.perf_counter() - started:.1f} s")
        return _read_backlog(bootstrap, args)
    except KeyboardInterrupt:
        print("interrupted; stopping")
        return 130
    finally:
        if broker is not None:
            broker.stop()


def _read_backlog(bootstrap: str, args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession

    from backlog_source import BacklogDataSource, lag_metrics

    spark = SparkSession.builder.master("local[2]").appName("backlog-source-demo").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BacklogDataSource)
    df = (
        spark.readStream.format("backlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .load()
    )
    with tempfile.TemporaryDirectory(prefix="backlog-demo-") as checkpoint:
        started = time.perf_counter()
        query = (
            df.groupBy("partition").count()
            .writeStream.outputMode("complete").format("memory").queryName("demo_counts")
            .trigger(availableNow=True)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        if query.exception() is not None:
            print(f"the query failed: {query.exception()}", file=sys.stderr)
            return 1
        print(f"\nread the backlog in {len(query.recentProgress)} micro-batches, {elapsed:.1f} s:")
        for progress in query.recentProgress:
            source = progress.sources[0]
            lag = lag_metrics(source) or {}
            print(f"  batch {progress.batchId}: {progress.numInputRows:>8,} records, "
                  f"max lag after batch {lag.get('maxOffsetsBehindLatest', 0):>8,.0f}")
        print("\nrecords per partition:")
        for row in spark.table("demo_counts").orderBy("partition").collect():
            print(f"  partition {row['partition']}: {row['count']:,}")
        print("\nlast checkpointed offset dict:")
        print("  " + json.dumps(json.loads(query.lastProgress.sources[0].endOffset)))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
