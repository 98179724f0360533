"""Which buckets a query reads: subscribe, subscribePattern or assign."""

import logging

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import ConfigError
from backlog_source.core.settings import parse_options
from backlog_source.enumerator.subscription import Subscription
from tests.fakes import FakeOffsetsClient

BASE = {"kafka.bootstrap.servers": "h:1"}


def subscription(client, **options):
    return Subscription(parse_options({**BASE, **options}), client)


def test_subscribe_reads_every_partition_of_the_named_topics_only():
    client = FakeOffsetsClient({"a": [(0, 0)] * 2, "b": [(0, 0)], "c": [(0, 0)]})
    assert subscription(client, subscribe="a,b").buckets() == {Bucket("a", 0), Bucket("a", 1), Bucket("b", 0)}


def test_a_subscribed_topic_that_does_not_exist_yet_is_logged_once_and_read_once_it_appears(caplog):
    client = FakeOffsetsClient({"a": [(0, 0)]})
    sub = subscription(client, subscribe="a,later")
    with caplog.at_level(logging.WARNING):
        assert sub.buckets() == {Bucket("a", 0)}
        assert sub.buckets() == {Bucket("a", 0)}
    assert caplog.text.count("subscribed topic(s) later do not exist yet") == 1
    client.topics["later"] = [(0, 0)] * 3
    assert {b for b in sub.buckets() if b.topic == "later"} == {Bucket("later", p) for p in range(3)}


def test_without_waiting_for_topics_the_missing_ones_are_named_and_nothing_is_logged(caplog):
    # A batch read fails on them (enumerator/batch_range.py); a stream waits for them.
    client = FakeOffsetsClient({"a": [(0, 0)]})
    with caplog.at_level(logging.WARNING):
        covered = Subscription(parse_options({**BASE, "subscribe": "a,later,gone"}), client,
                               wait_for_topics=False).covered()
        assigned = Subscription(parse_options({**BASE, "assign": '{"a": [0], "gone": [1]}'}), client,
                                wait_for_topics=False).covered()
    assert covered.missing == ("gone", "later") and covered.buckets == {Bucket("a", 0)}
    assert assigned.missing == ("gone",) and assigned.buckets == {Bucket("a", 0)}
    assert caplog.text == ""


def test_a_pattern_matches_anywhere_in_a_name_as_sparks_find_first_in_does_and_never_the_control_topic():
    client = FakeOffsetsClient({"orders": [(0, 0)], "orders-eu": [(0, 0)], "my-orders": [(0, 0)], "clicks": [(0, 0)],
                                "_backlog_events": [(0, 0)], "__consumer_offsets": [(0, 0)]})
    assert subscription(client, subscribePattern="orders.*").buckets() == {
        Bucket("orders", 0), Bucket("orders-eu", 0), Bucket("my-orders", 0)}
    assert subscription(client, subscribePattern="^orders.*$").buckets() == {Bucket("orders", 0), Bucket("orders-eu", 0)}
    assert subscription(client, subscribePattern="X_t[0-9]+").buckets() == set()
    assert subscription(client, subscribePattern=".*").buckets() == {
        Bucket("orders", 0), Bucket("orders-eu", 0), Bucket("my-orders", 0), Bucket("clicks", 0)}
    assert subscription(client, subscribePattern="consumer_offsets|events").buckets() == set()


def test_a_user_topic_named_with_two_underscores_is_not_internal():
    """Kafka flags its own topics; a user may name one ``__audit``, and Spark's pattern selects it."""
    client = FakeOffsetsClient({"__audit_t1": [(0, 0)], "__transaction_state": [(0, 0)], "__consumer_offsets": [(0, 0)]})
    assert subscription(client, subscribePattern="_t").buckets() == {Bucket("__audit_t1", 0)}
    assert subscription(client, subscribePattern="__").buckets() == {Bucket("__audit_t1", 0)}


def test_a_pattern_selects_as_sparks_rule_on_the_issues_topics():
    client = FakeOffsetsClient({"X_t1": [(0, 0)], "X_t2": [(0, 0)], "X_t1x": [(0, 0)], "Y_t1": [(0, 0)]})
    assert {b.topic for b in subscription(client, subscribePattern="X_t[0-9]+").buckets()} == {"X_t1", "X_t2", "X_t1x"}


def test_a_new_topic_matching_the_pattern_is_read_from_the_next_call():
    client = FakeOffsetsClient({"orders": [(0, 0)]})
    sub = subscription(client, subscribePattern="orders.*")
    assert sub.buckets() == {Bucket("orders", 0)}
    client.topics["orders-new"] = [(0, 0)] * 2
    assert sub.buckets() == {Bucket("orders", 0), Bucket("orders-new", 0), Bucket("orders-new", 1)}


def test_assign_reads_the_assigned_partitions_of_topics_that_exist_and_asks_one_describe():
    client = FakeOffsetsClient({"a": [(0, 0)] * 4, "b": [(0, 0)]})
    sub = subscription(client, assign='{"a": [0, 2], "b": [0]}')
    assert sub.buckets() == {Bucket("a", 0), Bucket("a", 2), Bucket("b", 0)} and client.calls == ["describe_topics"]
    client.delete("b")
    assert sub.buckets() == {Bucket("a", 0), Bucket("a", 2)}


def test_covered_names_each_topics_id():
    client = FakeOffsetsClient({"a": [(0, 0)] * 2}, topic_ids={"a": "id-a"})
    covered = subscription(client, subscribe="a,missing").covered()
    assert covered.topic_ids == {"a": "id-a"} and covered.buckets == {Bucket("a", 0), Bucket("a", 1)}


def test_assigned_partitions_that_do_not_exist_are_a_clear_error():
    client = FakeOffsetsClient({"a": [(0, 0)] * 2})
    subscription(client, assign='{"a": [0, 1]}').check_assigned_exist()
    with pytest.raises(ConfigError, match="option 'assign' names partition\\(s\\) that do not exist: a-2, b-0"):
        subscription(client, assign='{"a": [1, 2], "b": [0]}').check_assigned_exist()


def test_check_assigned_exist_does_nothing_for_a_subscription():
    client = FakeOffsetsClient({"a": [(0, 0)]})
    subscription(client, subscribe="a").check_assigned_exist()
    assert client.calls == []


def test_settings_without_a_subscription_are_refused_here_too():
    """SourceSettings refuses them at load; one built around that is refused, not misread."""
    settings = parse_options({**BASE, "subscribe": "a"})
    object.__setattr__(settings, "subscribe", None)
    with pytest.raises(ConfigError, match="none of 'subscribe', 'subscribePattern' or 'assign' is set"):
        Subscription(settings, FakeOffsetsClient(topics={"a": [(0, 1)]})).covered()


def test_the_buckets_are_built_again_only_when_a_partition_count_changes():
    # Ten thousand Buckets a batch otherwise: the listing rarely changes.
    client = FakeOffsetsClient({f"t{i}": [(0, 0)] * 100 for i in range(100)})
    sub = subscription(client, subscribePattern="^t")
    first = sub.covered().buckets
    assert len(first) == 10_000 and sub.covered().buckets is first
    client.topics["t0"].append((0, 0))  # a partition added
    assert sub.covered().buckets == first | {Bucket("t0", 100)}
    client.recreate("t1", [(0, 0)])  # re-created with one partition
    assert len(sub.covered().buckets) == 10_001 - 99 and Bucket("t1", 1) not in sub.covered().buckets
