"""What tracing costs: the same backlog drained with OTLP export on and off, in one run.

One broker, one topic, one SparkSession with Spark's defaults. Rounds of both settings in
rotated order, so drift in the machine's speed hits both alike. Each run drains the whole topic from earliest with
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
import sys
import time

from backlog_source.datasource import set_worker_environment
from backlog_source.demo.otlp_receiver import OtlpReceiver
from backlog_source.demo.topics import create_topic, produce
from benchmarks.harness.broker_and_spark import kafka_and_spark
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.runs import rotated, run_source
from benchmarks.harness.stats import median_and_spread, with_spread

SETTINGS = ("off", "on")


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

    receiver = OtlpReceiver().start()
    try:
        with kafka_and_spark(warm_up_query=False) as bench:
            runs, total = measure(bench, receiver, args)
    finally:
        receiver.stop()
    report(runs, total, args)


def measure(bench, receiver: OtlpReceiver, args) -> tuple[dict[str, list[dict]], int]:
    """Runs with tracing off and on, in rotated order after a warm-up of each."""
    spark, bootstrap = bench.spark, bench.bootstrap
    topic = "bench-tracing"
    create_topic(bootstrap, topic, args.partitions)
    per = args.records // args.partitions
    value = b"x" * args.value_size
    total = produce(bootstrap, topic, ((i % args.partitions, None, value) for i in range(per * args.partitions)))
    on_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "bench-tracing"}
    environments = {"on": on_env, "off": dict.fromkeys(on_env)}
    per_trigger = max(1, total // args.batches)
    # Warm-up, not recorded: each setting gets its own pool of Python workers (Spark keys
    # workers by their environment), and the first run of each pays their start-up.
    for env in environments.values():
        set_worker_environment(spark, env)
        drain(spark, bootstrap, topic, total, per_trigger)
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for round_index in range(args.repeats):
        for setting in rotated(list(SETTINGS), round_index):
            set_worker_environment(spark, environments[setting])
            spans_before = len(receiver.spans)
            result = drain(spark, bootstrap, topic, total, per_trigger)
            time.sleep(0.5)  # the planner's last spans are in flight when the query returns
            result["spans_received"] = len(receiver.spans) - spans_before
            runs[setting].append(result)
            print(f"{setting}: {result['records_per_s']:,.0f} records/s, {result['spans_received']} spans", flush=True)
    return runs, total


def report(runs: dict[str, list[dict]], total: int, args) -> None:
    rates = {s: median_and_spread([r["records_per_s"] for r in rs]) for s, rs in runs.items()}
    spans = {s: median_and_spread([r["spans_received"] for r in rs]) for s, rs in runs.items()}
    cost = 1 - rates["on"]["median"] / rates["off"]["median"]
    per_round = [1 - on["records_per_s"] / off["records_per_s"] for on, off in zip(runs["on"], runs["off"])]
    command = "python -m benchmarks.tracing_cost " + " ".join(sys.argv[1:])
    summary = {"command": command, "machine": machine(), "records": total, "partitions": args.partitions,
               "batches_per_drain": args.batches, "runs": runs, "records_per_s": rates, "cost_median": cost,
               "cost_per_round": per_round}
    write_results("tracing_cost", "tracing_cost", summary, [
        "# Tracing cost", "",
        f"Command: `{command}` ({summary['machine']['cpus']} cores, Python {summary['machine']['python']}, Spark's "
        "default settings, Apache Kafka)", "",
        f"{total:,} records over {args.partitions} partitions, drained from earliest in {args.batches} batches with "
        f"`Trigger.AvailableNow`; {args.repeats} rounds in rotated order after a warm-up of each; median (min-max).", "",
        "| tracing | records/s | spans per run |", "| --- | ---: | ---: |",
        *(f"| {s} | {with_spread(rates[s], ',.0f')} | {with_spread(spans[s], '.0f')} |" for s in SETTINGS), "",
        f"- cost (median vs median): **{cost:.1%}** (target <= 3%; per round {min(per_round):.1%} to {max(per_round):.1%})",
        "",
        "Spans per run: one `backlog.read` per bucket (only splits that cross a boundary trace), and the bucket and "
        "phase spans the enumerator exports once the finish events are handled (an AvailableNow run can stop before "
        "handling the last ones).",
    ])


if __name__ == "__main__":
    main()
