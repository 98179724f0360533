"""``backlog-source`` command line: ``demo`` (what ``make demo`` runs), ``snapshot`` and
``pyspark-bytecode`` (an opt-in deployment step, :mod:`backlog_source.pyspark_bytecode`).

Which process: the user's driver program. ``demo`` is :mod:`backlog_source.demo.app`;
its options also come from ``BACKLOG_*`` environment variables and a ``.env`` file.
"""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from backlog_source import pyspark_bytecode
from backlog_source.core.errors import BacklogSourceError
from backlog_source.demo.settings import add_arguments, from_arguments
from backlog_source.snapshot import take_snapshot


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="backlog-source", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="drain a backlog, switch to low latency, and show it",
        description="Start a local broker (Apache Kafka by default, or the embedded Tansu broker with --broker "
        "embedded; or use --bootstrap-servers), seed a backlog, produce live traffic and run a backlog-aware "
        "query (start_backlog_aware) into Parquet under --output, with a live terminal view, traces, a summary "
        "table and timeline.png. Every flag can also be set as a BACKLOG_<NAME> environment variable or in a "
        ".env file (--option as BACKLOG_KAFKA_OPTIONS, a JSON object); flags win.",
    )
    add_arguments(demo)
    snapshot = commands.add_parser(
        "snapshot",
        help="write the latest record per key of a topic as Parquet plus a manifest",
        description="Read TOPIC up to its current end offsets, keep the latest record per key (a null value "
        "deletes the key), write Parquet per partition under PATH (local, or any URI pyarrow supports such as "
        "s3:// or hdfs://), then publish PATH/_manifest.json. Readers see the previous snapshot until then.",
    )
    snapshot.add_argument("--bootstrap-servers", required=True, help="Kafka cluster (host:port[,host:port])")
    snapshot.add_argument("--topic", required=True, help="the keyed topic to snapshot")
    snapshot.add_argument("--path", required=True, help="snapshot root: a local path or a pyarrow.fs URI")
    snapshot.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                          help="a source option such as kafka.security.protocol=SASL_SSL (repeatable; values never printed)")
    bytecode = commands.add_parser(
        "pyspark-bytecode",
        help="opt in: a pyspark.zip with bytecode, so each Python streaming query starts ~0.6 s sooner",
        description="Spark's Python workers import PySpark from pyspark.zip, shipped without bytecode, so every "
        "fresh worker compiles it (about 0.6 s of each Python streaming query's start, measured in "
        "benchmarks/pyspark_bytecode.py). 'compile' writes a copy that holds bytecode for this Python version, "
        "keeping the original as pyspark.zip.backlog-source-backup; 'undo' restores it; 'status' says which is "
        "in place. Nothing is changed unless you run 'compile'. Run it where Spark is installed (e.g. when "
        "building an image), with the Python version the workers use.",
    )
    bytecode.add_argument("action", choices=("status", "compile", "undo"))
    bytecode.add_argument("--spark-home", help="Spark's home (default: $SPARK_HOME, else the installed pyspark)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        try:
            # The demo's terminal view and pictures come with the optional 'demo' extra.
            from backlog_source.demo.app import run
        except ImportError as exc:
            print(f"backlog-source demo needs the demo extra ({exc.name} is missing): "
                  "pip install 'backlog-source[demo]'", file=sys.stderr)
            return 2
        try:
            settings = from_arguments(args)
        except (ValidationError, ValueError) as exc:
            print(f"backlog-source demo: invalid option: {exc}", file=sys.stderr)
            return 2
        return run(settings)
    if args.command == "snapshot":
        return _snapshot(args)
    if args.command == "pyspark-bytecode":
        return _pyspark_bytecode(args)
    return 2


def _pyspark_bytecode(args: argparse.Namespace) -> int:
    try:
        path = pyspark_bytecode.locate(args.spark_home)
        if args.action == "compile":
            modules = pyspark_bytecode.compile_zip(path)
            print(f"compiled {modules:,} modules into {path}")
        elif args.action == "undo":
            pyspark_bytecode.undo(path)
            print(f"restored the original {path}")
        print(pyspark_bytecode.describe(pyspark_bytecode.state(path)))
    except pyspark_bytecode.BytecodeError as exc:
        print(f"backlog-source pyspark-bytecode: {exc}", file=sys.stderr)
        return 1
    return 0


def _snapshot(args: argparse.Namespace) -> int:
    options = {"kafka.bootstrap.servers": args.bootstrap_servers}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"backlog-source snapshot: --option expects KEY=VALUE, got {key!r}", file=sys.stderr)
            return 2
        options[key] = value
    try:
        manifest = take_snapshot(options, args.topic, args.path)
    except BacklogSourceError as exc:
        print(f"backlog-source snapshot: {exc}", file=sys.stderr)
        return 1
    rows = sum(p.rows for p in manifest.partitions.values())
    print(f"snapshot {manifest.snapshot_id} of {args.topic}: {rows:,} keys over {len(manifest.partitions)} "
          f"partition(s), published at {args.path.rstrip('/')}/_manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
