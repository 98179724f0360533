"""``backlog-source`` command line: ``backlog-source demo`` (what ``make demo`` runs).

Which process: the user's driver program. ``demo`` is :mod:`backlog_source.demo.app`;
its options also come from ``BACKLOG_*`` environment variables and a ``.env`` file.
"""

from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    from backlog_source.demo.settings import add_arguments

    parser = argparse.ArgumentParser(prog="backlog-source", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="drain a backlog, switch to low latency, and show it",
        description="Start the embedded Kafka-compatible broker (or use --bootstrap-servers), seed a backlog, "
        "produce live traffic and run a backlog-aware query (start_backlog_aware) into Parquet under --output, "
        "with a live terminal view, traces, a summary table and timeline.png. Every option can also be set "
        "as a BACKLOG_<NAME> environment variable or in a .env file; flags win.",
    )
    add_arguments(demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from pydantic import ValidationError

        try:
            from backlog_source.demo.app import run
        except ImportError as exc:
            print(f"backlog-source demo needs the demo extra ({exc.name} is missing): "
                  "pip install 'backlog-source[demo]'", file=sys.stderr)
            return 2
        from backlog_source.demo.settings import from_arguments

        try:
            settings = from_arguments(args)
        except (ValidationError, ValueError) as exc:
            print(f"backlog-source demo: invalid option: {exc}", file=sys.stderr)
            return 2
        return run(settings)
    return 2


if __name__ == "__main__":
    sys.exit(main())
