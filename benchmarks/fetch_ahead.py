"""What librdkafka fetches past the end of a catch-up range, against its fetch-ahead queue.

A reader's consumer fetches ahead until its local queue holds ``queued.max.messages.kbytes``
(librdkafka's default: 64 MiB). A range that ends at the log end has nothing past its end to
fetch; a catch-up range ends before it, so whatever the queue holds when the range is read
is dropped: the broker read it, sent it and librdkafka parsed it, on the cores the readers
share. Spark's Kafka source (the Java consumer) fetches about one request ahead.

This measures the read path alone (``reader.kafka_reader.read_split``, no Spark) on Apache
Kafka: one partition of ``--records`` records of issue 35's mix (90 % 200 B, 10 % 16-64 KB
values), then per queue size, ``--repeats`` reads of each range, a fresh consumer per read
(a pooled one would carry the previous read's fetch-ahead): a catch-up-sized range (8,000
records, about 33 MiB, ending far before the log end) and a long range that ends at the log
end. Figures: the read's time (first call to its last record) and what the consumer fetched
(librdkafka's ``rxmsg_bytes`` statistic, read after the read), median (min-max).

Usage::

    .venv/bin/python -m benchmarks.fetch_ahead [--records 100000] [--repeats 5]

Writes ``benchmarks/results/fetch_ahead/fetch_ahead.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from confluent_kafka import Consumer

from backlog_source.core.settings import parse_options
from backlog_source.demo.apache_kafka import kafka, kafka_version
from backlog_source.demo.topics import produce
from backlog_source.reader.arrow import data_bytes
from backlog_source.reader.consumer_pool import ConsumerPool
from backlog_source.reader.kafka_reader import read_split
from backlog_source.split.kafka_split import KafkaRange, KafkaSplit
from benchmarks.harness.results import machine, write_results
from benchmarks.harness.runs import wait_until
from benchmarks.harness.stats import summarize, with_spread
from benchmarks.harness.traffic import create_live_topic, mixed_value

TOPIC = "fetch-ahead"
MIB = 1 << 20
#: ``kafka.queued.max.messages.kbytes`` values compared; None: the source's default.
QUEUE_KBYTES = (65_536, None, 8_192, 2_048)



def read_once(bootstrap: str, kbytes: int | None, start: int, end: int) -> dict:
    """One read of ``[start, end)`` with a fresh consumer: seconds, bytes read, bytes fetched."""
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC, "backlog.enabled": "false"}
    if kbytes is not None:
        options["kafka.queued.max.messages.kbytes"] = str(kbytes)
    config = parse_options(options).reader_config
    stats: list[dict] = []
    made: list[Consumer] = []

    def factory(settings: dict) -> Consumer:
        made.append(Consumer({**settings, "statistics.interval.ms": 50,
                              "stats_cb": lambda s: stats.append(json.loads(s))}))
        return made[-1]

    pool = ConsumerPool(factory, capacity=1)  # kept after the read, for its statistics
    started = time.perf_counter()
    read = sum(data_bytes(batch) for batch in read_split(KafkaSplit((KafkaRange(TOPIC, 0, start, end),), "b"),
                                                          config, pool=pool))
    seconds = time.perf_counter() - started
    (consumer,) = made
    # The fetch-ahead is done within fetch.queue.backoff.ms of the read's end: wait for two
    # statistics intervals after it, serving callbacks, then read the last one.
    seen = len(stats)

    def two_more_statistics() -> bool:
        consumer.poll(0.05)  # serves the statistics callback
        return len(stats) >= seen + 2

    try:
        wait_until(two_more_statistics, 10, "librdkafka's statistics after the read")
    finally:
        consumer.close()
    return {"seconds": seconds, "read_mib": read / MIB, "fetched_mib": stats[-1]["rxmsg_bytes"] / MIB}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.records <= 20_000:
        parser.error("--records must be more than 20,000: the long range starts at record 20,000")
    ranges = {"catch-up range (8,000 records, ends before the log end)": (0, 8_000),
              f"long range (to the log end, {args.records - 20_000:,} records)": (20_000, args.records)}
    rng = random.Random(35)
    results: dict[str, dict[str, list[dict]]] = {}
    with kafka() as cluster:
        bootstrap = cluster.bootstrap_servers
        create_live_topic(bootstrap, TOPIC, 1)
        produce(bootstrap, TOPIC, ((0, b"k%d" % i, mixed_value(rng)) for i in range(args.records)))
        read_once(bootstrap, None, 0, 1_000)  # warm-up
        for name, (start, end) in ranges.items():
            results[name] = {str(kb): [] for kb in QUEUE_KBYTES}
            for _ in range(args.repeats):
                for kb in QUEUE_KBYTES:  # interleaved, so drift hits every size alike
                    results[name][str(kb)].append(read_once(bootstrap, kb, start, end))
    summary = summarize(results, ("seconds", "read_mib", "fetched_mib"))
    command = "python -m benchmarks.fetch_ahead " + " ".join(sys.argv[1:])
    lines = ["# What a reader fetches past the end of its range", "",
             f"Command: `{command}` ({machine()['cpus']} cores; Apache Kafka {kafka_version()}, loopback). One partition of "
             f"{args.records:,} records (90 % 200 B, 10 % 16-64 KB values); a fresh consumer per read; median (min-max) "
             f"of {args.repeats} reads per size, interleaved. `None` is the source's default.", ""]
    for name, by_size in summary.items():
        lines += [f"## {name}", "", "| `queued.max.messages.kbytes` | read s | read MiB | fetched MiB |",
                  "| --- | ---: | ---: | ---: |"]
        for kb, s in by_size.items():
            lines.append(f"| {kb} | {with_spread(s['seconds'], '.3f')} | {with_spread(s['read_mib'], '.1f')} | "
                         f"{with_spread(s['fetched_mib'], '.1f')} |")
        lines.append("")
    write_results("fetch_ahead", "fetch_ahead", {"command": command, "machine": machine(), "kafka": kafka_version(),
                                                 "args": vars(args), "summary": summary, "runs": results}, lines)


if __name__ == "__main__":
    main()
