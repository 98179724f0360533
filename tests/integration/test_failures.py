"""Fail fast, and say what is wrong (issue 12.3): a wrong kafka.bootstrap.servers ends the
query within the driver's request deadline (kafka.default.api.timeout.ms, retries
included), with a message naming the servers and the options to change; a plain query and
start_backlog_aware alike."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from backlog_source import start_backlog_aware
from tests.integration.helpers import start_query, wait_for
from tests.support.kafka_proxy import silent_listener

pytestmark = pytest.mark.integration

WRONG_SERVERS = {
    "refused": "127.0.0.1:1",
    "unknown host": "no-such-broker.invalid:9092",
    "blackhole": None,  # a loopback socket that accepts and never answers (silent_listener)
}
FAST = {"kafka.default.api.timeout.ms": "3000", "fetchOffset.numRetries": "1"}


def wrong_source(spark, servers: str):
    reader = (spark.readStream.format("backlog").option("kafka.bootstrap.servers", servers)
              .option("subscribe", "anything"))
    return reader.options(**FAST).load()


def assert_names_what_to_change(message: str, servers: str) -> None:
    for part in (servers, "kafka.default.api.timeout.ms", "kafka.bootstrap.servers"):
        assert part in message, message[-2000:]


@pytest.mark.parametrize("kind", list(WRONG_SERVERS))
def test_a_wrong_bootstrap_fails_the_query_within_the_api_timeout(spark, tmp_path, kind):
    with (silent_listener() if WRONG_SERVERS[kind] is None else nullcontext(WRONG_SERVERS[kind])) as servers:
        query = start_query(wrong_source(spark, servers).writeStream.format("noop")
                            .option("checkpointLocation", str(tmp_path / "ckpt")).start)
        try:
            # The deadline is 3 s; a minute leaves room for a loaded machine, and is far below
            # the 8.5 minutes this took before the deadline existed.
            wait_for(lambda: not query.isActive, 60, "the query to fail")
            assert query.exception() is not None
            assert_names_what_to_change(str(query.exception()), servers)
        finally:
            query.stop()


def test_start_backlog_aware_returns_and_its_query_fails_with_the_same_message(spark, tmp_path):
    servers = WRONG_SERVERS["refused"]
    writer = wrong_source(spark, servers).writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
    handle = start_backlog_aware(writer, "0 seconds", "1 second")  # no probe of Kafka before the start
    try:
        with pytest.raises(Exception) as raised:
            handle.await_termination(timeout=60)
        assert_names_what_to_change(str(raised.value), servers)
    finally:
        handle.stop()
