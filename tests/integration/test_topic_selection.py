"""Which topics ``subscribePattern`` selects, beside Spark's own ``format("kafka")`` on the same
Apache Kafka topics: generated patterns (anchored and not, matching at the start of a name or
inside it, alternations) over generated topic names, read in a batch, and topics created while
a streaming query runs. Spark's default (admin-based) offset reader keeps a topic when the
pattern matches anywhere in its name and never lists an internal topic; the rows and the
topics read must be the same.

Every pattern and topic name holds a per-example prefix, so a pattern never reaches the other
tests' topics on the shared broker. CI runs a fixed number of examples on a fixed seed;
``BACKLOG_SOURCE_SIDE_BY_SIDE_EXAMPLES`` runs more.
"""

from __future__ import annotations

import os
import re
import uuid

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from backlog_source.demo.topics import create_topic
from tests.integration.differential import both, fill_counts, start, wait_rows

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("BACKLOG_SOURCE_SIDE_BY_SIDE_EXAMPLES", "6"))
STREAMING_EXAMPLES = max(1, EXAMPLES // 2)

#: Topic names around the prefix ``P``: the pattern may match at the start, inside, or not at all.
#: (No "P.t1": Kafka refuses a name that differs from another only by "." and "_".)
NAMES = ("P_t1", "P_t2", "P_t12", "P_t1x", "P_u1", "P_T1", "P-t1", "xP_t1", "P_t1_t2", "__P_t1")
#: Pattern bodies around the prefix (Java and Python read these alike).
BODIES = (r"P_t[0-9]+", r"P_t1", r"P_(t|u)1", r"P.t1", r"P_t\d", r"P_[a-z]\d+", r"P_t1|P_u1", r"_t1", r"P_t[12]x?")


@st.composite
def selections(draw):
    """``(names, pattern)``: topic names and a pattern over them, both with ``P`` standing
    for the example's prefix."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))
    body = draw(st.sampled_from(BODIES))
    lead = draw(st.sampled_from(["", "^", ".*", "^x?"]))
    tail = draw(st.sampled_from(["", "$", ".*"]))
    pattern = f"{lead}(?:{body}){tail}" if "|" in body else f"{lead}{body}{tail}"
    return names, pattern


def instantiate(names: list[str], pattern: str, prefix: str | None = None) -> tuple[list[str], str]:
    """The names and the pattern with ``P`` replaced by a fresh prefix (or ``prefix``)."""
    prefix = prefix or f"s{uuid.uuid4().hex[:8]}"
    # "_t1" alone is a body without the prefix: keep it to this example's topics with a lookahead
    # that is not part of what is being compared (both sources see the same pattern).
    scoped = pattern.replace("P", prefix) if "P" in pattern else f"(?=.*{prefix}){pattern}"
    return [n.replace("P", prefix) for n in names], scoped


def expected_topics(names: list[str], pattern: str) -> set[str]:
    """Spark's rule, for the test's own check: ``findFirstIn`` (a match anywhere), internal
    topics never listed (a user topic starting ``__`` is not internal)."""
    return {n for n in names if re.search(pattern, n)}


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=selections())
@example(case=(["P_t1", "P_t2", "P_t1x", "P_u1"], r"P_t[0-9]+"))  # the case issue 36 reported
@example(case=(["__P_t1", "xP_t1", "P_t1"], r"P_t1$"))  # a user topic named "__..." is not internal
def test_a_generated_pattern_selects_in_a_batch_read_what_spark_selects(spark, broker, case):
    names, pattern = instantiate(*case)
    for name in names:
        create_topic(broker.bootstrap_servers, name, 1)
        fill_counts(broker.bootstrap_servers, name, [2])
    kafka, backlog = both(spark, broker, {"subscribePattern": pattern})
    if isinstance(kafka, str):
        assert isinstance(backlog, str), f"only format('kafka') failed for {pattern}: {kafka}"
        return
    assert not isinstance(backlog, str), f"only format('backlog') failed for {pattern}: {backlog}"
    assert {r[2] for r in kafka} == expected_topics(names, pattern), (pattern, names)
    assert backlog == kafka, (pattern, names)


@st.composite
def mid_query(draw):
    """Topics there at start, topics created while the query runs, and partitions of each."""
    names, pattern = draw(selections())
    later = draw(st.lists(st.sampled_from([n for n in NAMES if n not in names]), min_size=1, max_size=3, unique=True))
    # A case where no topic created mid-query is selected shows nothing: draw another.
    real, scoped = instantiate(names + later, pattern, prefix="s00000000")
    assume(expected_topics(real[len(names):], scoped))
    partitions = {n: draw(st.integers(1, 2)) for n in names + later}
    return names, later, partitions, pattern


@settings(max_examples=STREAMING_EXAMPLES, derandomize=True, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=mid_query())
def test_topics_created_mid_query_are_selected_as_spark_selects_them(spark, broker, tmp_path_factory, case):
    """Both sources stream side by side from ``earliest``; topics are created and filled
    after both have read what was there. Each ends with the rows of exactly the topics
    Spark's rule selects, the new ones read from their start."""
    names, later, partitions, pattern = case
    all_names, pattern = instantiate(names + later, pattern)
    first, created = all_names[:len(names)], all_names[len(names):]
    parts = {real: partitions[generic] for real, generic in zip(all_names, names + later)}
    for name in first:
        create_topic(broker.bootstrap_servers, name, parts[name])
        fill_counts(broker.bootstrap_servers, name, [3] * parts[name])
    selected = expected_topics(all_names, pattern)
    checkpoints = tmp_path_factory.mktemp("mid-query")
    options = {"subscribePattern": pattern, "startingOffsets": "earliest"}
    runs = {source: start(spark, source, broker.bootstrap_servers, options, checkpoints / source,
                          trigger={"processingTime": "200 milliseconds"}) for source in ("kafka", "backlog")}
    try:
        at_start = sum(3 * parts[n] for n in first if n in selected)
        for source, (query, collected) in runs.items():
            wait_rows(collected, at_start, query, what=f"format({source!r}) reading the topics there at start")
        for name in created:
            create_topic(broker.bootstrap_servers, name, parts[name])
            fill_counts(broker.bootstrap_servers, name, [2] * parts[name])
        total = at_start + sum(2 * parts[n] for n in created if n in selected)
        for source, (query, collected) in runs.items():
            wait_rows(collected, total, query, what=f"format({source!r}) reading the topics created mid-query")
        kafka, backlog = (runs[s][1].rows() for s in ("kafka", "backlog"))
        assert {r[2] for r in kafka} == selected, (pattern, all_names)
        assert backlog == kafka, (pattern, all_names)
    finally:
        for query, _ in runs.values():
            query.stop()
