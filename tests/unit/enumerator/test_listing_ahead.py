"""The subscription listed ahead of the next plan: what a plan takes from it, and what is
verified before a batch's ranges are handed out (a listing taken ahead never decides data
loss, nor hides a re-created topic the batch reads from)."""

import threading
from concurrent.futures import Future

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.errors import DataLossError
from backlog_source.core.settings import parse_options
from backlog_source.enumerator import listing_ahead
from backlog_source.enumerator.enumerator import Enumerator
from backlog_source.enumerator.kafka_admin import TopicsDeletedError
from backlog_source.enumerator.listing_ahead import ListingAhead
from backlog_source.split.planning import ReadBudget
from tests.fakes import FakeClock, FakeControlTopic, FakeOffsetsClient, FakeRecordSizes

T1, T2 = Bucket("t1", 0), Bucket("t2", 0)


class Cluster(FakeOffsetsClient):
    """Records which topics each description named; an offsets request naming a deleted
    topic fails as Apache Kafka's does (the planner handles :class:`TopicsDeletedError`)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.described: list[set[str]] = []

    def describe_topics(self, topics):
        self.described.append(set(topics))
        return super().describe_topics(topics)

    def latest_offsets(self, buckets, known=None, sent=None):
        gone = sorted({b.topic for b in buckets if b.topic not in self.topics})
        if gone:
            raise TopicsDeletedError(gone)
        return super().latest_offsets(buckets, known, sent)


def submit_now(listing):
    """Run the listing at once, on the caller's thread: what the cluster looks like when
    :meth:`ListingAhead.start` is called is what the listing finds."""
    answer: Future = Future()
    try:
        answer.set_result(listing())
    except Exception as exc:  # what the background thread's future would hold
        answer.set_exception(exc)
    return answer


def planner(options=None, topics=None, clock=None):
    clock = clock or FakeClock()
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "t.*",
                              "backlog.minPollIntervalMs": "0", **(options or {})})
    cluster = Cluster(topics=topics if topics is not None else {"t1": [(0, 10)], "t2": [(0, 20)]})
    ahead = ListingAhead(settings, cluster, clock=clock, submit=submit_now)
    enumerator = Enumerator(settings, cluster, FakeControlTopic(), clock=clock, record_sizes=FakeRecordSizes(),
                            listing_ahead=ahead)
    return enumerator, cluster


def plan(enumerator, start):
    """One ``latestOffset`` as the stream reader makes it: the plan, then the next listing."""
    end = enumerator.latest_offset(start, ReadBudget())
    enumerator.list_ahead()
    return end


def batch(enumerator, start):
    """A batch as Spark runs it: ``latestOffset``, then ``partitions(start, end)``'s reads."""
    end = plan(enumerator, start)
    return end, enumerator.confirm_reads(end, end.reads_since(start))


def test_a_plan_takes_the_listing_made_ahead_and_its_batch_describes_again_only_the_topics_it_reads_from():
    enumerator, cluster = planner()
    start = enumerator.initial_offset()
    enumerator.list_ahead()
    cluster.append("t1", 0, 5)
    cluster.calls.clear()
    cluster.described.clear()
    end, reads = batch(enumerator, start)
    assert end.positions == {T1: 15, T2: 20} and reads.start == {T1: 10, T2: 20} and reads.end[T1] == 15
    # The plan itself: no listing of the cluster, only its offsets. Then the listing ahead:
    # t1 described first (the batch reads from it), then the topic names, both described; the
    # batch's partitions() takes t1's description, asking nothing more.
    assert cluster.calls == ["send_latest_offsets", "latest_offsets", "describe_topics", "topic_names", "describe_topics"]
    assert cluster.described == [{"t1"}, {"t1", "t2"}]


def test_a_plan_that_makes_no_batch_lists_ahead_without_describing_the_last_batchs_topics_again():
    """No ``partitions()`` follows a plan that found nothing, and an idle query plans several
    times a second: its listing describes the subscription once, and the next batch's
    ``partitions()`` still gets the description its own plan started."""
    enumerator, cluster = planner()
    start = enumerator.initial_offset()
    enumerator.list_ahead()
    cluster.append("t1", 0, 5)
    end, _ = batch(enumerator, start)
    cluster.described.clear()
    assert plan(enumerator, end) is end  # nothing new: no batch
    assert cluster.described == [{"t1", "t2"}]
    cluster.append("t2", 0, 1)
    cluster.calls.clear()
    cluster.described.clear()
    after, reads = batch(enumerator, end)
    assert reads.end[T2] == 21 and cluster.described == [{"t2"}, {"t1", "t2"}]
    assert cluster.calls.count("describe_topics") == 2  # none more by partitions()
    # Records to read, but too few for minOffsetsPerTrigger: no batch either (the first
    # trigger under it always runs: nothing to read then).
    assert enumerator.latest_offset(after, ReadBudget(min_records=100)) is after
    enumerator.list_ahead()
    cluster.append("t1", 0, 1)
    cluster.described.clear()
    assert enumerator.latest_offset(after, ReadBudget(min_records=100)) is after
    enumerator.list_ahead()
    assert cluster.described == [{"t1", "t2"}]


def test_a_topic_recreated_after_the_listing_ahead_is_not_read_from_the_old_topics_positions():
    """Deleted and re-created, refilled past the positions read, after the listing was taken
    ahead: the plan asks its offsets of the new topic under the old topic id, but its batch's
    topics are described again before the ranges are handed out: the batch fails, or reads
    nothing of that topic, and the next one reads the new topic from its start."""
    enumerator, cluster = planner()
    start = enumerator.initial_offset()
    enumerator.list_ahead()
    cluster.recreate("t1", [(0, 30)])
    with pytest.raises(DataLossError, match=r"t1 \(topic id t1-0 -> t1-1\) were deleted and re-created after this "
                                            r"batch's offsets were planned"):
        batch(enumerator, start)

    enumerator, cluster = planner({"failOnDataLoss": "false"})
    start = enumerator.initial_offset()
    enumerator.list_ahead()
    cluster.recreate("t1", [(0, 30)])
    end, reads = batch(enumerator, start)
    assert end.topic_ids["t1"] == "t1-0" and set(reads.start) == {T2} and set(reads.end) == {T2}
    cluster.append("t1", 0, 1)
    after, reads = batch(enumerator, end)
    assert after.starts == {T1: 0} and after.positions == {T1: 31, T2: 20} and after.topic_ids["t1"] == "t1-1"
    assert reads.start[T1] == 0 and reads.end[T1] == 31


def test_a_replayed_batch_describes_its_topics_itself():
    """After a restart Spark replays the last batch of its offset log: no listing ahead
    described its topics, so ``partitions()`` does, and a topic re-created since is not read
    from the old topic's positions."""
    enumerator, cluster = planner({"failOnDataLoss": "false"})
    start = enumerator.initial_offset()
    cluster.append("t1", 0, 5)
    end = plan(enumerator, start)
    restarted, cluster_after = planner({"failOnDataLoss": "false"}, topics=cluster.topics)
    cluster_after.calls.clear()
    assert restarted.confirm_reads(end, end.reads_since(start)).end[T1] == 15
    assert cluster_after.calls == ["describe_topics"] and cluster_after.described[-1] == {"t1"}
    cluster_after.recreate("t1", [(0, 30)])
    assert T1 not in restarted.confirm_reads(end, end.reads_since(start)).end


def test_a_failed_description_ahead_is_made_again_by_the_batch():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "t.*", "backlog.minPollIntervalMs": "0"})
    cluster = Cluster(topics={"t1": [(0, 10)], "t2": [(0, 20)]})

    def failing(listing):
        answer: Future = Future()
        answer.set_exception(RuntimeError("no broker"))
        return answer

    enumerator = Enumerator(settings, cluster, FakeControlTopic(), clock=FakeClock(), record_sizes=FakeRecordSizes(),
                            listing_ahead=ListingAhead(settings, cluster, clock=FakeClock(), submit=failing))
    start = enumerator.initial_offset()
    cluster.append("t1", 0, 5)
    end = plan(enumerator, start)
    cluster.calls.clear()
    cluster.described.clear()
    assert enumerator.confirm_reads(end, end.reads_since(start)).end[T1] == 15
    assert cluster.described == [{"t1"}]


def test_a_topic_recreated_with_nothing_to_read_is_found_when_it_has_records():
    enumerator, cluster = planner()
    start = enumerator.initial_offset()
    enumerator.list_ahead()
    cluster.recreate("t2", [(0, 20)])  # refilled to exactly where the query is: nothing to read
    cluster.append("t1", 0, 1)
    first = plan(enumerator, start)
    assert first.positions == {T1: 11, T2: 20} and first.topic_ids["t2"] == "t2-0"  # nothing read from t2
    cluster.append("t2", 0, 1)
    with pytest.raises(DataLossError, match=r"t2 \(topic id t2-0 -> t2-1\)"):
        plan(enumerator, first)


def test_a_topic_deleted_after_the_listing_ahead_is_decided_on_the_plans_own_listing():
    enumerator, cluster = planner({"failOnDataLoss": "false"})
    start = enumerator.initial_offset()
    enumerator.list_ahead()
    del cluster.topics["t2"]
    cluster.append("t1", 0, 2)
    end = plan(enumerator, start)
    assert end.positions == {T1: 12} and set(end.topic_ids) == {"t1"}
    enumerator, cluster = planner()
    start = enumerator.initial_offset()
    enumerator.list_ahead()
    del cluster.topics["t2"]
    with pytest.raises(DataLossError, match=r"t2-0 \(next offset 20\).* no longer exist"):
        plan(enumerator, start)


def test_a_topic_the_listing_ahead_found_deleted_is_listed_again_before_anything_is_called_lost():
    """Deleted when the listing was taken ahead, created again before the plan: what was lost
    is the old topic's records (re-created), not the partition (gone); the plan's own listing
    says which."""
    enumerator, cluster = planner()
    start = enumerator.initial_offset()
    partitions = cluster.topics.pop("t2")
    enumerator.list_ahead()
    cluster.recreate("t2", partitions)
    with pytest.raises(DataLossError, match=r"t2 \(topic id t2-0 -> t2-1\) were deleted and re-created"):
        plan(enumerator, start)


def test_a_partition_added_after_the_listing_ahead_is_read_from_the_next_batch():
    """As a partition created just after a plan always was (Spark's source finds one created
    before its plan's offsets request, a batch sooner): read from its earliest offset, so
    nothing of it is missed."""
    enumerator, cluster = planner({"startingOffsets": "earliest"})
    drained = plan(enumerator, enumerator.initial_offset())
    cluster.append("t1", 0, 1)
    start = plan(enumerator, drained)
    cluster.topics["t2"].append((0, 3))
    cluster.topics["t1"].append((0, 4))
    cluster.append("t1", 0, 1)
    first = plan(enumerator, start)
    assert Bucket("t2", 1) not in first.positions and Bucket("t1", 1) not in first.positions  # listed before them
    second = plan(enumerator, first)
    assert second.starts == {Bucket("t1", 1): 0, Bucket("t2", 1): 0}
    assert second.positions[Bucket("t1", 1)] == 4 and second.positions[Bucket("t2", 1)] == 3


def test_a_plan_that_reads_from_every_topic_has_them_described_once_by_the_listing_ahead():
    enumerator, cluster = planner()
    start = enumerator.initial_offset()
    enumerator.list_ahead()  # learns that the pattern covers two topics
    cluster.append("t1", 0, 1)
    cluster.append("t2", 0, 1)
    cluster.calls.clear()
    cluster.described.clear()
    end, reads = batch(enumerator, start)
    # The plan: its offsets only. The listing ahead: names, both topics described, once,
    # which is also the batch's verification.
    assert cluster.calls == ["send_latest_offsets", "latest_offsets", "topic_names", "describe_topics"]
    assert cluster.described == [{"t1", "t2"}] and reads.end == {T1: 11, T2: 21}
    cluster.calls.clear()
    assert plan(enumerator, end) is end  # nothing to read: no batch, the listing ahead goes on
    assert cluster.calls == ["send_latest_offsets", "latest_offsets", "topic_names", "describe_topics"]


def test_a_listing_older_than_its_maximum_age_is_not_used():
    clock = FakeClock()
    enumerator, cluster = planner(clock=clock)
    start = enumerator.initial_offset()
    enumerator.list_ahead()
    cluster.topics["t3"] = [(0, 7)]
    clock.advance(listing_ahead.MAX_AGE_S + 1)
    end = plan(enumerator, start)
    # The plan's own listing found it (the one taken ahead did not have it).
    assert end.starts[Bucket("t3", 0)] == 0 and end.positions[Bucket("t3", 0)] == 7 and end.topic_ids["t3"] == "t3-0"


def test_taking_starting_and_closing():
    clock = FakeClock()
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t1"})
    cluster = Cluster(topics={"t1": [(0, 1)]})
    submitted = []

    def submit(listing):
        submitted.append(listing)
        return submit_now(listing)

    ahead = ListingAhead(settings, cluster, clock=clock, submit=submit)
    assert ahead.take() is None and ahead.verified() is None  # none started
    assert ahead.start(verify=frozenset({"t1", "gone"}))
    assert not ahead.start()  # one listing at a time
    assert len(submitted) == 1
    verified = ahead.verified()
    assert verified.asked == {"t1", "gone"} and set(verified.found) == {"t1"}  # "gone" was asked and not found
    assert set(ahead.take().buckets) == {T1}
    assert ahead.take() is None  # taken once
    assert ahead.verified() is verified  # until the next listing starts
    assert ahead.start() and ahead.verified() is None  # none asked
    ahead.take()

    def failing(listing):
        answer: Future = Future()
        answer.set_exception(RuntimeError("no broker"))
        return answer

    failed = ListingAhead(settings, cluster, clock=clock, submit=failing)
    failed.start(verify=frozenset({"t1"}))
    assert failed.verified() is None  # the batch describes them itself
    assert failed.take() is None  # the plan lists itself, and reports what is wrong
    ahead.start()
    ahead.close()
    assert ahead.take() is None and cluster.closed == 1


def test_the_listing_runs_on_a_daemon_thread_of_its_own():
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t1"})
    threads = []

    class Watched(Cluster):
        def describe_topics(self, topics):
            threads.append((threading.current_thread().name, threading.current_thread().daemon))
            return super().describe_topics(topics)

    ahead = ListingAhead(settings, Watched(topics={"t1": [(0, 1)]}))
    ahead.start()
    assert set(ahead.take().buckets) == {T1}
    # A daemon: a listing waiting on brokers that are gone never holds up the runner's exit.
    assert threads == [("backlog-listing-ahead", True)]
    ahead.close()


def test_a_listing_that_never_ends_is_waited_for_at_most_twice_the_clients_deadline():
    """Never a hang: a client stuck past its own deadline leaves the plan and partitions() to
    list and describe themselves."""
    settings = parse_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t1", "kafka.default.api.timeout.ms": "50"})
    stuck: list[Future] = []

    def never(listing):
        stuck.append(Future())
        return stuck[-1]

    ahead = ListingAhead(settings, Cluster(topics={"t1": [(0, 1)]}), submit=never)
    ahead.start(verify=frozenset({"t1"}))
    assert ahead.verified() is None and ahead.take() is None
