"""KafkaAdmin's contract without a broker: one deadline for a call, retries inside
it, configuration errors raised at once, secrets never in a message, missing topics left out.
The AdminClient is a fake that answers from a script; the clock and sleep are fakes too."""

from __future__ import annotations

import gc
import logging
import os
import pickle
import signal
import threading
import time
import weakref
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import IsolationLevel as KafkaIsolation
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from backlog_source.core.buckets import Bucket, TopicIdentity
from backlog_source.core.errors import ConfigError, KafkaUnavailableError
from backlog_source.core.kafka_config import KafkaClientConfig
from backlog_source.core.kafka_refusals import AccessRefusedError, Refusal
from backlog_source.enumerator import kafka_admin
from backlog_source.enumerator.kafka_admin import (
    KafkaAdmin,
    OffsetsAdminClient,
    RequestPolicy,
    TopicsDeletedError,
    TopicsRecreatedError,
    _REQUEST_THREADS,
    _RequestThreads,
    _gathered,
)
from backlog_source.events.control_topic import TopicNotCreatedError
from tests.fakes import FakeAdmin, FakeClock, Slow, describe, failed, future, offsets

SECRET = "s3cret-pass"
KAFKA = KafkaClientConfig(bootstrap_servers="broker-a:9092,broker-b:9092", params={"sasl.username": "svc"},
                          secrets={"sasl.password": SECRET})
A0, A1 = Bucket("a", 0), Bucket("a", 1)


def client(script, policy=RequestPolicy(timeout_ms=30_000, num_retries=3, retry_interval_ms=10), cost_s=0.0):
    clock = FakeClock(1000.0)
    admin = FakeAdmin(script, clock, cost_s)
    return KafkaAdmin(KAFKA, policy, clock=clock, sleep=clock.sleep, admin_factory=admin), admin, clock


def test_one_batched_request_for_every_bucket():
    offsets_client, admin, _ = client([offsets({A0: 5, A1: 7})])
    assert offsets_client.latest_offsets([A0, A1]) == {A0: 5, A1: 7}
    assert [what for what, _ in admin.requests] == ["list_offsets"]


def test_many_partitions_are_asked_in_calls_of_bounded_size_sent_together():
    """librdkafka merges a call's answers with a search per partition: one call for ten
    thousand partitions spent most of its time there. The calls' answers are one dict."""
    many = {Bucket(f"t{i % 7}", i): i for i in range(1_001)}
    sizes = []

    def answer(specs):
        sizes.append(len(specs))
        return offsets(many)(specs)

    offsets_client, admin, _ = client([answer, answer, answer])
    assert offsets_client.latest_offsets(many) == many
    assert sizes == [500, 500, 1] and [what for what, _ in admin.requests] == ["list_offsets"] * 3


def test_offsets_come_back_in_the_order_asked_whatever_order_the_answers_came_in():
    """The planner's maps are in bucket order; encoding one (to_nested) then sorts it in one
    pass. Answers merged in the brokers' order made report and offset maps of ten thousand
    shuffled buckets, sorted at full cost at every plan."""
    asked = [Bucket("t", p) for p in range(1_001)]

    def reversed_answer(specs):
        return dict(reversed(list(offsets({b: b.partition for b in asked})(specs).items())))

    offsets_client, _, _ = client([reversed_answer, reversed_answer, reversed_answer])
    latest = offsets_client.latest_offsets(asked)
    assert list(latest) == asked and latest == {b: b.partition for b in asked}


def test_the_partitions_asked_at_every_plan_are_made_once_and_made_again_when_the_buckets_change():
    """Every plan asks the latest offsets of the same buckets; at ten thousand partitions making
    their TopicPartitions again cost milliseconds a plan. Other buckets, or other specs (the
    earliest offsets), are asked with TopicPartitions of their own."""
    seen = []

    def answer(specs):
        seen.append(list(specs))
        return offsets({A0: 5, A1: 7})(specs)

    offsets_client, _, _ = client([answer] * 5)
    offsets_client.latest_offsets([A0, A1])
    offsets_client.latest_offsets([A0, A1])
    assert all(a is b for a, b in zip(seen[0], seen[1], strict=True))
    offsets_client.earliest_offsets([A0, A1])
    assert [tp.offset for tp in seen[2]] == [-2, -2]
    offsets_client.latest_offsets([A0])
    offsets_client.latest_offsets([A0, A1])
    assert [(tp.partition, tp.offset) for tp in seen[3]] == [(0, -1)]
    assert [(tp.partition, tp.offset) for tp in seen[4]] == [(0, -1), (1, -1)]


def test_offsets_sent_early_are_the_first_attempt_of_the_request_for_the_same_buckets_only():
    """``send_latest_offsets`` sends the request and returns at once; ``latest_offsets`` then
    takes its answer instead of asking again, for the same buckets in the same order (the
    order its answer comes back in). Asked about others, the same in another order, or when
    the early answer failed, it asks (and retries) as ever."""
    not_leader = failed(KafkaError.NOT_LEADER_FOR_PARTITION, "Broker: Not leader for partition")
    answered_not_leader = lambda specs: {tp: future(error=not_leader) for tp in specs}  # noqa: E731
    offsets_client, admin, _ = client([offsets({A0: 5, A1: 7}), offsets({A0: 6}), offsets({A0: 7, A1: 8}),
                                       answered_not_leader, offsets({A0: 8, A1: 9})])
    sent = offsets_client.send_latest_offsets([A0, A1])
    assert [what for what, _ in admin.requests] == ["list_offsets"] and admin.requests[0][1] == pytest.approx(7.5)
    assert offsets_client.latest_offsets([A0, A1], sent=sent) == {A0: 5, A1: 7}
    assert len(admin.requests) == 1  # the answer sent for early
    assert offsets_client.latest_offsets([A0], sent=sent) == {A0: 6} and len(admin.requests) == 2
    assert list(offsets_client.latest_offsets([A1, A0], sent=sent).items()) == [(A1, 8), (A0, 7)]
    assert len(admin.requests) == 3
    failed_early = offsets_client.send_latest_offsets([A0, A1])
    assert offsets_client.latest_offsets([A0, A1], sent=failed_early) == {A0: 8, A1: 9}
    assert len(admin.requests) == 5 and offsets_client.send_latest_offsets([]) is None


def test_an_offsets_request_for_a_deleted_topic_says_which_topic_is_gone_instead_of_retrying():
    """Mid-deletion, librdkafka finds no leader for the topic's partitions ("Failed to query
    partition leaders: No leaders found", _NOENT); retrying until the deadline failed the
    query as "Kafka unavailable". The client asks whether the topics still exist."""
    no_leaders = failed(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
    offsets_client, admin, clock = client([no_leaders, describe({"b": 1}), no_leaders, describe({"b": 1})])
    with pytest.raises(TopicsDeletedError) as raised:
        offsets_client.latest_offsets([A0, Bucket("b", 0)])
    assert raised.value.topics == ("a",) and len(clock.slept) == 1  # unknown twice, one backoff apart
    assert [what for what, _ in admin.requests] == ["list_offsets", "describe_topics"] * 2


def test_an_offsets_request_for_a_partition_a_recreated_topic_lacks_says_so_instead_of_retrying():
    """A topic deleted and created again with fewer partitions after the planner listed it:
    ListOffsets for a partition it no longer has fails ("Unknown partition") however often it
    is asked, and failed the query as "Kafka unavailable" once the deadline passed."""
    unknown = failed(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition")
    offsets_client, admin, _ = client([unknown, describe({"a": 1, "b": 1})])
    with pytest.raises(TopicsRecreatedError) as raised:
        offsets_client.latest_offsets([A0, A1, Bucket("b", 0)])
    assert raised.value.topics == ("a",)
    assert [what for what, _ in admin.requests] == ["list_offsets", "describe_topics"]


def test_a_topic_unknown_once_is_one_created_moments_ago_and_is_asked_again():
    """On three brokers the control topic, created on the query's first start, was unknown to
    the broker asked next (its metadata had not reached it), and read as deleted."""
    no_leaders = failed(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
    offsets_client, admin, _ = client([no_leaders, describe({}), offsets({A0: 5})])
    assert offsets_client.latest_offsets([A0]) == {A0: 5}
    assert [what for what, _ in admin.requests] == ["list_offsets", "describe_topics", "list_offsets"]


def test_no_leaders_for_a_topic_that_still_exists_is_retried_as_before():
    no_leaders = failed(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
    offsets_client, admin, _ = client([no_leaders, describe({"a": 2}), offsets({A0: 5})])
    assert offsets_client.latest_offsets([A0]) == {A0: 5}


def test_topic_names_lists_every_topic_and_describe_gives_ids_of_those_that_exist():
    listing = SimpleNamespace(topics={"a": SimpleNamespace(error=None), "being-deleted": SimpleNamespace(
        error=KafkaError(KafkaError.LEADER_NOT_AVAILABLE)), "__consumer_offsets": SimpleNamespace(error=None)})
    offsets_client, _, _ = client([lambda: listing, describe({"a": 3}, topic_id="id-a")])
    assert offsets_client.topic_names() == {"a", "being-deleted", "__consumer_offsets"}
    assert offsets_client.describe_topics(["a", "being-deleted"]) == {"a": TopicIdentity("id-a", 3)}


def test_describe_carries_kafkas_internal_flag():
    offsets_client, _, _ = client([describe({"__consumer_offsets": 50, "__audit": 1})])
    described = offsets_client.describe_topics(["__consumer_offsets", "__audit"])
    assert described["__consumer_offsets"].internal and not described["__audit"].internal


def test_a_request_that_used_its_share_is_retried_after_the_retry_interval():
    offsets_client, admin, clock = client([Slow(failed(KafkaError._TIMED_OUT)), Slow(failed(KafkaError._TIMED_OUT)),
                                           offsets({A0: 5})])
    assert offsets_client.latest_offsets([A0]) == {A0: 5}
    assert len(admin.requests) == 3 and clock.slept == [0.01, 0.01]


def test_a_fast_failure_is_asked_again_inside_its_attempt_after_a_growing_backoff():
    """A broker back from a 15 s pause answered "not leader for partition" at once for ~2 s
    (Apache Kafka, one node): four attempts spent in 50 ms failed the query. Inside an
    attempt's share a fast failure is asked again, 100 ms doubling to 1 s apart, as the Java
    admin client does inside each call of Spark's Kafka source."""
    not_leader = failed(KafkaError.NOT_LEADER_FOR_PARTITION, "Broker: Not leader for partition")
    offsets_client, admin, clock = client([not_leader] * 6 + [offsets({A0: 5})])
    assert offsets_client.latest_offsets([A0]) == {A0: 5}
    assert clock.slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    timeouts = [timeout for _, timeout in admin.requests]
    assert timeouts[0] == pytest.approx(7.5) and timeouts[-1] == pytest.approx(7.5 - sum(clock.slept))


def test_one_partition_failing_in_a_call_answered_as_a_whole_fails_the_request_and_it_is_asked_again():
    """A call's one future carries each partition's answer or error: a partition whose leader
    moved fails the request (never an offset taken from the others alone), asked again."""
    not_leader = failed(KafkaError.NOT_LEADER_FOR_PARTITION, "Broker: Not leader for partition")
    offsets_client, admin, _ = client([lambda specs: {tp: future(error=not_leader) if tp.partition == 1
                                                      else future(SimpleNamespace(offset=5)) for tp in specs},
                                       offsets({A0: 5, A1: 7})])
    assert offsets_client.latest_offsets([A0, A1]) == {A0: 5, A1: 7}
    assert [what for what, _ in admin.requests] == ["list_offsets"] * 2


def test_an_answer_that_leaves_out_a_partition_asked_about_is_a_failed_attempt_asked_again():
    """No offset goes missing unnoticed: an answer naming fewer partitions than asked is
    asked again, as confluent-kafka's public list_offsets fails such an answer."""
    partial = lambda specs: {tp: future(SimpleNamespace(offset=5)) for tp in specs if tp.partition == 0}  # noqa: E731
    offsets_client, admin, _ = client([partial, offsets({A0: 5, A1: 7})])
    assert offsets_client.latest_offsets([A0, A1]) == {A0: 5, A1: 7}
    assert [what for what, _ in admin.requests] == ["list_offsets"] * 2


def test_a_partial_answer_every_time_fails_the_request_naming_what_was_left_out():
    partial = lambda specs: {tp: future(SimpleNamespace(offset=5)) for tp in specs if tp.partition == 0}  # noqa: E731
    offsets_client, _, _ = client([partial] * 500)
    with pytest.raises(KafkaUnavailableError, match=r"left out 1 of the 2 partitions asked, e.g. a-1"):
        offsets_client.latest_offsets([A0, A1])


def test_gathered_public_futures_answer_what_the_one_future_call_answers():
    """The public list_offsets' futures, gathered: each partition's result or KafkaError; a
    plain error (confluent-kafka's own check of an answer) fails the call as a whole."""
    tp0, tp1 = TopicPartition("a", 0), TopicPartition("a", 1)
    not_leader = failed(KafkaError.NOT_LEADER_FOR_PARTITION)
    answer = SimpleNamespace(offset=5)
    assert _gathered({tp0: future(answer), tp1: future(error=not_leader)}).result(0) == {
        tp0: answer, tp1: not_leader.args[0]}
    with pytest.raises(RuntimeError, match="Results length"):
        _gathered({tp0: future(answer), tp1: future(error=RuntimeError("Results length 1"))}).result(0)
    pending: Future = Future()
    gathering = _gathered({tp0: future(answer), tp1: pending})
    assert not gathering.done()
    pending.set_result(answer)
    assert gathering.result(0) == {tp0: answer, tp1: answer} and _gathered({}).result(0) == {}


def test_without_the_one_future_call_the_public_list_offsets_gives_the_same_answer(monkeypatch):
    """A confluent-kafka whose private ListOffsets method is missing or takes other arguments:
    the public list_offsets is used from then on, with the same outcome. Real clients, against
    a loopback port nothing listens on: both time out the same way."""
    monkeypatch.setattr(OffsetsAdminClient, "_public_only", False)
    admin = OffsetsAdminClient({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    asked = [TopicPartition("a", 0, -1), TopicPartition("a", 1, -1)]

    one_call = admin.list_offsets_at_once(asked, isolation_level=KafkaIsolation.READ_UNCOMMITTED,
                                          request_timeout=0.2).exception(30)
    assert isinstance(one_call, KafkaException) and one_call.args[0].code() == KafkaError._TIMED_OUT

    def changed(self, *args, **kwargs):
        raise TypeError("list_offsets() takes exactly 2 arguments")
    monkeypatch.setattr(OffsetsAdminClient, "_send_list_offsets", changed)
    gathered = admin.list_offsets_at_once(asked, isolation_level=KafkaIsolation.READ_UNCOMMITTED,
                                          request_timeout=0.2).result(30)
    assert OffsetsAdminClient._public_only
    assert {(tp.topic, tp.partition) for tp in gathered} == {("a", 0), ("a", 1)}
    assert {error.code() for error in gathered.values()} == {KafkaError._TIMED_OUT}


def test_fast_failures_for_the_whole_deadline_use_the_retries_and_end_within_it():
    policy = RequestPolicy(timeout_ms=30_000, num_retries=3, retry_interval_ms=10)
    offsets_client, admin, clock = client([failed(KafkaError._TRANSPORT, "Connection refused")] * 500, policy)
    with pytest.raises(KafkaUnavailableError, match=r"4 attempt\(s\)"):
        offsets_client.latest_offsets([A0])
    assert 4 < len(admin.requests) < 500
    assert clock.now - 1000.0 <= 30.0


def test_clients_dropped_after_failed_requests_leave_no_logger_behind():
    """Every failed request drops its admin client, and each client has a logger of its own
    for librdkafka's lines: made through logging.getLogger, each stayed in logging's registry
    for good (a day of Kafka outage: ~100,000 of them, with their handlers)."""
    registered = set(logging.Logger.manager.loggerDict)
    offsets_client, admin, _ = client([failed(KafkaError._TRANSPORT, "Connection refused")] * 500)
    offsets_client._client()
    first = weakref.ref(offsets_client._failure)
    with pytest.raises(KafkaUnavailableError):
        offsets_client.latest_offsets([A0])
    assert len(admin.requests) > 4  # each one's client made, then dropped
    gc.collect()
    assert first() is None, "a dropped client's log handler is still referenced"
    assert set(logging.Logger.manager.loggerDict) == registered


def test_retries_used_up_raise_kafka_unavailable_naming_servers_options_and_attempts():
    script = [Slow(failed(KafkaError._TRANSPORT, "Connection refused"))] * 4
    offsets_client, admin, _ = client(script)
    with pytest.raises(KafkaUnavailableError) as raised:
        offsets_client.latest_offsets([A0])
    message = str(raised.value)
    assert len(admin.requests) == 4  # fetchOffset.numRetries=3: four attempts
    assert message.startswith("no answer from Kafka at broker-a:9092,broker-b:9092 within 30000 ms")
    for part in ("fetching latest offsets", "broker-a:9092,broker-b:9092", "kafka.default.api.timeout.ms",
                 "4 attempt(s)", "fetchOffset.numRetries=3", "Connection refused", "kafka.bootstrap.servers"):
        assert part in message


def test_one_deadline_bounds_every_attempt_together():
    """Each attempt gets its share of what is left of the deadline (at least 2 s, or all that
    is left); none starts after it."""
    policy = RequestPolicy(timeout_ms=1_000, num_retries=10, retry_interval_ms=10)
    offsets_client, admin, _ = client([failed(KafkaError._TIMED_OUT)] * 11, policy, cost_s=0.4)
    with pytest.raises(KafkaUnavailableError, match="within 1000 ms"):
        offsets_client.latest_offsets([A0])
    timeouts = [timeout for _, timeout in admin.requests]
    assert len(timeouts) == 3  # 0.4 s each: the third attempt ends past the deadline
    assert timeouts[0] == pytest.approx(1.0) and timeouts == sorted(timeouts, reverse=True)


@pytest.mark.parametrize("code, text, starts, names", [
    (KafkaError._AUTHENTICATION, "SASL authentication error", "authentication failed: ", "kafka.sasl.jaas.config"),
    (KafkaError.SASL_AUTHENTICATION_FAILED, "Invalid credentials", "authentication failed: ", "kafka.sasl.mechanism"),
    (KafkaError._SSL, "SSL handshake failed: certificate verify failed", "TLS certificate not trusted: ",
     "kafka.ssl.ca.location"),
    (KafkaError._SSL, "SSL handshake failed: wrong version number", "TLS handshake failed ", "kafka.security.protocol"),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed", "authorization refused for ",
     "Grant principal User:svc DESCRIBE and READ"),
])
def test_a_refusal_is_raised_at_once_leading_with_its_cause(code, text, starts, names):
    offsets_client, admin, clock = client([failed(code, f"{text}, password {SECRET}")])
    with pytest.raises(AccessRefusedError) as raised:
        offsets_client.latest_offsets([A0])
    assert len(admin.requests) == 1 and clock.slept == []
    message = str(raised.value)
    assert isinstance(raised.value, ConfigError) and message.startswith(starts)
    assert "broker-a:9092" in message and names in message
    assert SECRET not in message and "***" in message


def test_a_topic_an_acl_hides_is_named_where_describing_it_was_refused():
    """The control topic's DESCRIBE refused read as "refused describing the subscribed
    topics" although the subscribed topic was describable (issue 46)."""
    denied = failed(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed")
    offsets_client, admin, _ = client([lambda topics: {name: future(error=denied) if name == "_backlog_events"
                                                       else describe({"a": 2})(topics)[name]
                                                       for name in topics.topic_names}])
    with pytest.raises(AccessRefusedError) as raised:
        offsets_client.describe_topics(["a", "_backlog_events"])
    error = raised.value
    assert (error.refusal, error.topic, error.operation) == (Refusal.TOPIC_AUTHORIZATION, "_backlog_events", "DESCRIBE")
    assert str(error).startswith("authorization refused for topic '_backlog_events': ")
    assert "subscribed" not in str(error) and len(admin.requests) == 1


def test_an_offsets_request_an_acl_refuses_names_the_topic():
    denied = failed(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed")
    offsets_client, _, _ = client([lambda specs: {tp: future(error=denied) if tp.topic == "b"
                                                  else future(SimpleNamespace(offset=1)) for tp in specs}])
    with pytest.raises(AccessRefusedError) as raised:
        offsets_client.latest_offsets([A0, Bucket("b", 0)])
    assert (raised.value.topic, raised.value.operation) == ("b", "DESCRIBE")


@pytest.mark.parametrize("code, text, starts", [
    (KafkaError._AUTHENTICATION, "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed "
                                 "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256",
     "authentication failed: "),
    (KafkaError._SSL, "ssl://h:1/bootstrap: SSL handshake failed: error:0A000086:SSL routines::certificate verify "
                      "failed: broker certificate could not be verified", "TLS certificate not trusted: "),
])
def test_a_refusal_told_only_by_the_error_callback_leads_the_timeout_error(code, text, starts):
    """A wrong password or an untrusted CA reaches the request only as a timeout; librdkafka's
    error callback says why. The error leads with that, and nothing is retried."""
    def refused_meanwhile(specs):  # the callback fires while the request waits
        admin.config["error_cb"](KafkaError(code, text))
        raise failed(KafkaError._TIMED_OUT, "Local: Timed out")

    offsets_client, admin, _ = client([refused_meanwhile] * 4)
    with pytest.raises(AccessRefusedError) as raised:
        offsets_client.latest_offsets([A0])
    assert str(raised.value).startswith(starts) and text in str(raised.value)
    assert "Timed out" not in str(raised.value) and len(admin.requests) == 1


def test_a_refusal_reported_before_a_request_does_not_explain_its_timeout():
    """A kept client may have seen a TLS handshake cut short long ago (a broker shutting
    down): a later timeout is retried as any other."""
    offsets_client, admin, _ = client([offsets({A0: 1}), Slow(failed(KafkaError._TIMED_OUT)), offsets({A0: 2})])
    assert offsets_client.latest_offsets([A0]) == {A0: 1}
    admin.config["error_cb"](KafkaError(KafkaError._SSL, "SSL handshake failed: Disconnected"))
    assert offsets_client.latest_offsets([A0]) == {A0: 2}


WRONG_PASSWORD = (KafkaError._AUTHENTICATION, "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication "
                  f"failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
                  f"(sasl.password={SECRET})")


def blocked_request(admin, report, release: threading.Event, finished: threading.Event):
    """A ListOffsets that librdkafka's callback explains (``report``) while it waits for
    ``release``, as a request waits out its timeout when the connection was refused."""
    def request(specs):
        report(admin)
        try:
            release.wait(admin.requests[-1][1])  # its timeout: what librdkafka would wait
            raise failed(KafkaError._TIMED_OUT, "Local: Timed out")
        finally:
            finished.set()

    return request


@pytest.mark.parametrize("report, starts", [
    (lambda admin: admin.report_error(KafkaError(*WRONG_PASSWORD)), "authentication failed: "),
    (lambda admin: admin.report_log("FAIL [rdkafka#producer-1] [thrd:x]: ssl://h:1/bootstrap: SSL handshake failed: "
                                    "error:0A000086:SSL routines::certificate verify failed"),
     "TLS certificate not trusted: "),
    (lambda admin: admin.report_error(KafkaError(KafkaError._TRANSPORT, "ssl://h:1/bootstrap: SSL transport error: "
                                                 "error:0A00045C:SSL routines::tlsv13 alert certificate required")),
     "TLS client certificate refused: "),
])
def test_a_refusal_reported_while_a_request_waits_ends_it_at_once_leading_with_its_cause(report, starts):
    """A wrong secret or certificate reaches a request only as its timeout (7.5 s of the 30 s
    deadline), while librdkafka's callback tells it within a second: the query failed 10 to
    11 s after start(). The error is raised while the request still waits."""
    release, finished = threading.Event(), threading.Event()
    offsets_client, admin, _ = client([])
    admin.script.append(blocked_request(admin, report, release, finished))
    try:
        with pytest.raises(AccessRefusedError) as raised:
            offsets_client.latest_offsets([A0])
        assert not finished.is_set(), "the error waited for the request's timeout"
    finally:
        release.set()
    message = str(raised.value)
    assert message.startswith(starts) and SECRET not in message and "Timed out" not in message
    assert len(admin.requests) == 1


def test_a_bare_tls_handshake_failure_while_a_request_waits_does_not_end_it():
    """A broker shutting down cuts a handshake short ("SSL handshake failed: Disconnected"):
    the request goes on, and its answer stands."""
    offsets_client, admin, _ = client([])

    def answered_after_the_report(specs):
        admin.report_error(KafkaError(KafkaError._SSL, "ssl://h:1/bootstrap: SSL handshake failed: Disconnected"))
        assert admin.served.wait(30), "the report was never served"
        return offsets({A0: 4})(specs)

    admin.script.append(answered_after_the_report)
    assert offsets_client.latest_offsets([A0]) == {A0: 4}


def test_a_request_that_answered_while_a_refusal_was_reported_keeps_its_answer(monkeypatch):
    """The watch sees a refusal only after its wait for the request ran out; if the request
    answered in between, the refusal was another connection's (another broker's), and what
    Kafka answered is the truth. Made deterministic: the report is served on the watching
    thread, and the request has ended by the time the watch looks at it again."""
    # A pool of its own: a thread of an earlier test ending its request late (one left to end
    # on its own) would raise the shared pool's idle count before this request ended.
    threads = _RequestThreads()
    monkeypatch.setattr(kafka_admin, "_REQUEST_THREADS", threads)
    offsets_client, admin, _ = client([])
    release = threading.Event()

    def refusal_then_answer():  # served by the watch's poll, after its wait ran out
        admin.config["error_cb"](KafkaError(*WRONG_PASSWORD))
        release.set()
        # The request's thread, the pool's only one, is idle again: the request has ended.
        assert wait_until(lambda: threads._idle._value == 1), "the request never ended"

    def answered_as_the_refusal_came(specs):
        assert threads.started == 1 and threads._idle._value == 0
        admin.reports.append(refusal_then_answer)
        assert release.wait(30), "the watch never served the report"
        return offsets({A0: 4})(specs)

    admin.script.append(answered_as_the_refusal_came)
    assert offsets_client.latest_offsets([A0]) == {A0: 4}


def test_secrets_never_reach_an_unavailable_error():
    offsets_client, _, _ = client([Slow(failed(KafkaError._TRANSPORT, f"sasl.password={SECRET} rejected"))] * 4)
    with pytest.raises(KafkaUnavailableError) as raised:
        offsets_client.latest_offsets([A0])
    assert SECRET not in str(raised.value)


def test_an_invalid_client_configuration_is_a_config_error():
    def refuse(config):
        raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"No such configuration property: {SECRET}"))

    offsets_client = KafkaAdmin(KAFKA, admin_factory=refuse)
    with pytest.raises(ConfigError, match="not a valid client configuration") as raised:
        offsets_client.latest_offsets([A0])
    assert SECRET not in str(raised.value)


def test_an_answer_without_a_valid_offset_is_a_failed_attempt_and_retried():
    """librdkafka resolves a timed-out partition's future with OFFSET_INVALID (-1001), no
    error; taken as a log end it looked like data loss (seen in CI with the broker stopped)."""
    offsets_client, admin, clock = client([Slow(offsets({A0: 5, A1: -1001})), offsets({A0: 5, A1: 7})])
    assert offsets_client.latest_offsets([A0, A1]) == {A0: 5, A1: 7}
    assert len(admin.requests) == 2 and clock.slept == [0.01]


@pytest.mark.parametrize("method", ["earliest_offsets", "latest_offsets"])
def test_no_valid_offset_within_the_retries_is_kafka_unavailable_never_an_offset(method):
    offsets_client, admin, _ = client([Slow(offsets({A0: -1001}))] * 4)
    with pytest.raises(KafkaUnavailableError, match=r"=3\) while fetching \w+ offsets: no valid offset for a-0 "):
        getattr(offsets_client, method)([A0])
    assert len(admin.requests) == 4


def test_a_log_end_below_an_offset_already_read_is_asked_again_before_it_is_believed():
    offsets_client, admin, clock = client([offsets({A0: 3, A1: 9}), offsets({A0: 12, A1: 9})])
    assert offsets_client.latest_offsets([A0, A1], known={A0: 10, A1: 9}) == {A0: 12, A1: 9}
    assert len(admin.requests) == 2 and clock.slept == [0.01]


def test_a_log_end_still_below_after_the_retries_is_returned_for_the_caller_to_judge():
    """A re-created topic really is shorter: after fetchOffset.numRetries more answers the
    enumerator gets it and applies failOnDataLoss."""
    offsets_client, admin, _ = client([offsets({A0: 3})] * 4)
    assert offsets_client.latest_offsets([A0], known={A0: 10}) == {A0: 3}
    assert len(admin.requests) == 4


def test_timestamps_without_a_record_at_or_after_them_are_none():
    offsets_client, _, _ = client([offsets({A0: 12, A1: -1})])
    assert offsets_client.offsets_for_timestamps({A0: 1, A1: 2}) == {A0: 12, A1: None}


def test_partition_counts_of_named_topics_leave_missing_ones_out():
    offsets_client, admin, _ = client([describe({"a": 2})])
    assert offsets_client.partition_counts(["a", "gone"]) == {"a": 2}
    assert [what for what, _ in admin.requests] == ["describe_topics"]


def test_partition_counts_describe_only_the_named_topics_and_count_a_user_topic_named_like_an_internal_one():
    """One rule for internal topics, the broker's flag (as Spark's format("kafka")): a topic
    named explicitly is counted whatever its name; only a pattern leaves internal topics out."""
    offsets_client, admin, _ = client([describe({"__audit": 2, "__consumer_offsets": 50})])
    assert offsets_client.partition_counts(["__audit", "__consumer_offsets"]) == {"__audit": 2,
                                                                                  "__consumer_offsets": 50}
    assert [what for what, _ in admin.requests] == ["describe_topics"]  # never a listing of the cluster


def test_topic_identity_is_none_for_a_missing_topic():
    offsets_client, _, _ = client([describe({"a": 3}, topic_id="xyz"), describe({})])
    assert offsets_client.topic_identity("a") == TopicIdentity("xyz", 3)
    assert offsets_client.topic_identity("a") is None


def test_ensure_topic_creates_only_a_missing_topic_and_tolerates_a_race():
    created = []

    def create(result):
        def answer(topics):
            created.extend(t.topic for t in topics)
            return {t.topic: result for t in topics}
        return answer

    offsets_client, _, _ = client([describe({"_events": 1})])
    offsets_client.ensure_topic("_events", 1)  # exists: nothing created
    offsets_client, _, _ = client([describe({}), create(future(error=failed(KafkaError.TOPIC_ALREADY_EXISTS))),
                                   describe({"_events": 1})])
    offsets_client.ensure_topic("_events", 1)  # another query created it first
    assert created == ["_events"]


def test_a_created_topic_is_ready_only_once_its_partitions_have_leaders():
    """On a cluster of several brokers a new topic has no leader for a moment, and the admin
    client's cached metadata kept it that way: the ListOffsets right after failed every retry
    (seen on three Apache Kafka brokers). ensure_topic returns once describing the topic shows
    a leader for every partition."""
    created = []
    offsets_client, admin, clock = client([
        describe({}),
        lambda topics: {t.topic: created.append(t.topic) or future(None) for t in topics},
        describe({"_events": 1}, leader=-1),
        describe({"_events": 1}, leader=2),
    ])
    offsets_client.ensure_topic("_events", 1)
    assert created == ["_events"]
    assert [what for what, _ in admin.requests] == ["describe_topics", "create_topics", "describe_topics",
                                                    "describe_topics"]
    assert admin.script == []


def test_ensure_topic_that_cannot_be_created_names_the_topic_and_kafkas_reason():
    """What the topic is for is the caller's to say (events/control_topic.py names its option)."""
    offsets_client, _, _ = client([describe({}), lambda topics: {
        t.topic: future(error=failed(KafkaError.POLICY_VIOLATION, f"refused {SECRET}")) for t in topics}])
    with pytest.raises(TopicNotCreatedError) as raised:
        offsets_client.ensure_topic("_events", 1)
    assert raised.value.topic == "_events" and str(raised.value).startswith("cannot create topic '_events': refused")
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED])
def test_ensure_topic_an_acl_refuses_to_create_says_create_was_refused_on_that_topic(code):
    """Kafka takes CREATE on the topic or on the cluster; either refusal is one on the topic."""
    offsets_client, _, _ = client([describe({}), lambda topics: {
        t.topic: future(error=failed(code, f"denied {SECRET}")) for t in topics}])
    with pytest.raises(AccessRefusedError) as raised:
        offsets_client.ensure_topic("_events", 1)
    assert (raised.value.topic, raised.value.operation) == ("_events", "CREATE")
    assert SECRET not in str(raised.value)


def test_a_pickled_client_reconnects_instead_of_carrying_its_admin_client():
    offsets_client = KafkaAdmin(KAFKA)  # a real AdminClient: creating one does not connect
    live = offsets_client._client()
    copy = pickle.loads(pickle.dumps(offsets_client))
    assert copy._admin is None and offsets_client._admin is live


def test_attempts_share_the_deadline_and_each_retry_starts_from_a_fresh_client():
    """A request to a broker that died waited out the whole deadline in one attempt, while the
    partition had a new leader seconds later (three Apache Kafka brokers, leader killed): the
    attempts share the deadline, and a failed one drops the admin client (and its cached
    metadata), as Spark's withRetries resets its admin."""
    clock = FakeClock(1000.0)
    made = []
    admin = FakeAdmin([Slow(failed(KafkaError._TIMED_OUT)), offsets({A0: 7})], clock)

    def factory(config):
        made.append(config)
        return admin

    offsets_client = KafkaAdmin(KAFKA, RequestPolicy(timeout_ms=30_000, num_retries=3, retry_interval_ms=10),
                                        clock=clock, sleep=clock.sleep, admin_factory=factory)
    assert offsets_client.latest_offsets([A0]) == {A0: 7}
    assert len(made) == 2  # the retry asked through a new client
    assert [timeout for _, timeout in admin.requests][0] == pytest.approx(7.5)  # 30 s over 4 attempts


def test_wrong_credentials_seen_only_in_the_connection_log_are_not_retried():
    """With a wrong SASL password librdkafka's request just times out; the reason is in its
    connection log ("SASL authentication error: ..."). Retrying cannot fix it: the error
    names the security options at once (seen on Apache Kafka with a SASL_PLAINTEXT listener)."""
    def logged_meanwhile(specs):  # librdkafka logs the failed connection while the request waits
        offsets_client._failure.logger.error("FAIL [rdkafka#producer-1] [thrd:x]: sasl_plaintext://h:1/bootstrap: "
                                             "SASL authentication error: Authentication failed: Invalid username or "
                                             "password")
        raise failed(KafkaError._TIMED_OUT)

    offsets_client, admin, _ = client([logged_meanwhile] * 4)
    with pytest.raises(AccessRefusedError) as raised:
        offsets_client.latest_offsets([A0])
    message = str(raised.value)
    assert message.startswith("authentication failed: Kafka at broker-a:9092,broker-b:9092 refused the credentials "
                              "of principal User:svc (sasl_plaintext://h:1/bootstrap: SASL authentication error")
    assert "Invalid username or password" in message and "kafka.sasl.jaas.config" in message
    assert len(admin.requests) == 1


def test_the_admin_client_is_created_once_and_kept_across_calls():
    made = []

    def factory(config):
        made.append(config)
        return FakeAdmin([offsets({A0: 1}), offsets({A0: 2})])

    offsets_client = KafkaAdmin(KAFKA, admin_factory=factory)
    assert offsets_client.latest_offsets([A0]) == {A0: 1}
    assert offsets_client.latest_offsets([A0]) == {A0: 2}
    assert len(made) == 1 and made[0]["client.id"] == "backlog-source-admin"


def test_authorized_operations_are_what_kafka_says_its_acls_allow_on_the_topic():
    """KIP-430: asked with the description; None where Kafka does not say or the topic is missing."""
    from confluent_kafka.admin import AclOperation

    def allowing(operations):
        return lambda topics: {name: future(SimpleNamespace(authorized_operations=operations))
                               for name in topics.topic_names}

    offsets_client, _, _ = client([allowing([AclOperation.DESCRIBE, AclOperation.READ]), allowing(None),
                                   describe({})])
    assert offsets_client.authorized_operations("_events") == frozenset({"DESCRIBE", "READ"})
    assert offsets_client.authorized_operations("_events") is None
    assert offsets_client.authorized_operations("_events") is None


def test_authorized_operations_of_a_topic_this_client_may_not_describe_is_a_describe_refusal():
    denied = failed(KafkaError.TOPIC_AUTHORIZATION_FAILED, f"Broker: Topic authorization failed {SECRET}")
    offsets_client, _, _ = client([lambda topics: {name: future(error=denied) for name in topics.topic_names}])
    with pytest.raises(AccessRefusedError) as raised:
        offsets_client.authorized_operations("_events")
    error = raised.value
    assert (error.refusal, error.topic, error.operation) == (Refusal.TOPIC_AUTHORIZATION, "_events", "DESCRIBE")
    assert SECRET not in str(error)


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    """Whether ``condition()`` became true within ``timeout_s`` (polled every millisecond)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_requests_run_on_kept_threads_and_one_left_running_does_not_hold_up_the_next():
    """A thread per request cost milliseconds of every plan on a loaded driver: an idle thread
    takes the next request. One still running (left to end on its own after a refusal) gets
    a second thread beside it, never a queue behind it."""
    threads = _RequestThreads()
    held, released, ran = threading.Event(), threading.Event(), []

    def until_idle(count: int) -> None:
        # The threads' own count of themselves idle.
        assert wait_until(lambda: threads._idle._value >= count), "request threads did not become idle"

    threads.run(lambda: (held.set(), released.wait(10)))
    assert held.wait(10)
    done = threading.Event()
    threads.run(lambda: (ran.append(threading.current_thread()), done.set()))
    assert done.wait(10) and threads.started == 2  # answered while the first is still held
    released.set()
    until_idle(2)
    for _ in range(20):
        done.clear()
        threads.run(lambda: (ran.append(threading.current_thread()), done.set()))
        assert done.wait(10)
        until_idle(2)
    assert threads.started == 2 and len(set(ran)) <= 2 and all(t.daemon for t in ran)


def test_a_process_forked_after_requests_ran_runs_its_own_requests():
    """Threads do not survive fork(): a child forked while the parent had an idle request
    thread, still counted idle, handed its request to no thread, and the request's caller
    waited forever. Forked here with one idle; the child must run a request (exit 0)."""
    ran = threading.Event()
    _REQUEST_THREADS.run(ran.set)
    assert ran.wait(10) and wait_until(lambda: _REQUEST_THREADS._idle._value >= 1)
    child = os.fork()
    if child == 0:
        done = threading.Event()
        _REQUEST_THREADS.run(done.set)
        os._exit(0 if done.wait(10) else 1)
    deadline = time.monotonic() + 60
    while (ended := os.waitpid(child, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail("the forked child's request never ran")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(ended[1]) == 0, "the forked child's request never ran"
