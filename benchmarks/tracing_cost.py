"""What tracing costs: the same backlog drained with OTLP export on and off, in one run.

One broker, one topic, one SparkSession. Runs alternate (off, on, off, on, ...) so drift in
the machine's speed hits both alike. Each run drains the whole topic from earliest with
``Trigger.AvailableNow`` into the ``noop`` sink in several batches (``maxOffsetsPerTrigger``),
so every bucket starts and finishes a backlog phase: the enumerator exports bucket and phase
spans, the readers that cross a boundary export and flush ``backlog.read`` spans.

* off: no OTEL_* variable reaches any process (the default).
* on: ``OTEL_EXPORTER_OTLP_ENDPOINT`` points every process (driver's and executors' Python
  workers, through ``SparkContext.environment``) at an OTLP/HTTP receiver on loopback, which
  decodes every request, as a collector would.

Usage::

    .venv/bin/python -m benchmarks.tracing_cost [--records 2000000] [--partitions 4] [--repeats 6]

Writes ``benchmarks/results/tracing_cost/tracing_cost.json`` and ``.md``. Target: cost <= 3%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from backlog_source.datasource import set_worker_environment
from backlog_source.testing.apache_kafka import start_kafka
from backlog_source.testing.broker import create_topic, produce
from backlog_source.testing.otlp_receiver import OtlpReceiver
from benchmarks.harness import (
    machine,
    results_folder,
    run_source,
)


def drain(spark, bootstrap: str, topic: str, expected: int, per_trigger: int) -> dict:
    return run_source(spark, bootstrap, topic, expected, maxOffsetsPerTrigger=str(per_trigger))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--batches", type=int, default=8, help="micro-batches per drain")
    parser.add_argument("--repeats", type=int, default=6, help="runs of each setting, interleaved")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    broker = start_kafka()
    receiver = OtlpReceiver().start()
    try:
        topic = "bench-tracing"
        create_topic(broker.bootstrap_servers, topic, args.partitions)
        per = args.records // args.partitions
        value = b"x" * args.value_size
        total = produce(broker.bootstrap_servers, topic, ((i % args.partitions, None, value) for i in range(per * args.partitions)))
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "4g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        on_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "bench-tracing"}
        per_trigger = max(1, total // args.batches)
        runs: dict[str, list[dict]] = {"off": [], "on": []}
        # Warm-up, not recorded: each setting gets its own pool of Python workers (Spark keys
        # workers by their environment), and the first run of each pays their start-up.
        for env in (on_env, dict.fromkeys(on_env)):
            set_worker_environment(spark, env)
            drain(spark, broker.bootstrap_servers, topic, total, per_trigger)
        for _ in range(args.repeats):
            for setting in ("off", "on"):
                set_worker_environment(spark, on_env if setting == "on" else dict.fromkeys(on_env))
                spans_before = len(receiver.spans)
                result = drain(spark, broker.bootstrap_servers, topic, total, per_trigger)
                time.sleep(0.5)  # let the driver's batch processor deliver before counting
                result["spans_received"] = len(receiver.spans) - spans_before
                runs[setting].append(result)
                print(f"{setting}: {result['records_per_s']:,.0f} records/s, {result['spans_received']} spans")
        spark.stop()
    finally:
        receiver.stop()
        broker.stop()

    median = {s: statistics.median(r["records_per_s"] for r in rs) for s, rs in runs.items()}
    best = {s: max(r["records_per_s"] for r in rs) for s, rs in runs.items()}
    cost_median = 1 - median["on"] / median["off"]
    cost_best = 1 - best["on"] / best["off"]
    summary = {
        "command": "python -m benchmarks.tracing_cost " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "records": total,
        "partitions": args.partitions,
        "batches_per_drain": args.batches,
        "runs": runs,
        "median_records_per_s": median,
        "best_records_per_s": best,
        "cost_median": cost_median,
        "cost_best": cost_best,
        "spread_off": (max(r["records_per_s"] for r in runs["off"]) - min(r["records_per_s"] for r in runs["off"]))
        / median["off"],
    }
    (results_folder("tracing_cost") / "tracing_cost.json").write_text(json.dumps(summary, indent=2) + "\n")
    rows = "\n".join(
        f"| {s} | {median[s]:,.0f} | {best[s]:,.0f} | {statistics.median(r['spans_received'] for r in runs[s]):.0f} |"
        for s in ("off", "on")
    )
    (results_folder("tracing_cost") / "tracing_cost.md").write_text(
        f"""# Tracing cost

Command: `{summary['command']}` ({summary['machine']['cpus']} cores, Python {summary['machine']['python']})

{total:,} records over {args.partitions} partitions, drained from earliest in {args.batches} batches with
`Trigger.AvailableNow`; {args.repeats} runs per setting, interleaved.

| tracing | median records/s | best records/s | spans per run |
| --- | ---: | ---: | ---: |
{rows}

- cost (median vs median): **{cost_median:.1%}** (target <= 3%)
- cost (best vs best): {cost_best:.1%}
- run-to-run spread with tracing off: {summary['spread_off']:.1%} of the median, so differences
  smaller than that are noise.

Spans per run: one `backlog.read` per bucket (only splits that cross a boundary trace), and the
bucket and phase spans the enumerator exports once the finish events are handled (an
AvailableNow run can stop before handling the last ones).
"""
    )
    print(json.dumps({"cost_median": cost_median, "cost_best": cost_best}))


if __name__ == "__main__":
    main()
