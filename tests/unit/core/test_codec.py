"""The versioned-codec shape every stored encoding uses."""

import pytest

from backlog_source.core.codec import VersionedCodec


class Refused(Exception):
    pass


def rename_count(data):  # version 1 called it "n"
    return {"count": data["n"]}


def add_unit(data):  # version 2 had no unit
    return {**data, "unit": "records"}


CODEC = VersionedCodec("thing", "v", 3, Refused, upgrades={1: rename_count, 2: add_unit})


def test_older_versions_are_upgraded_one_step_at_a_time():
    assert CODEC.current_shape({"v": 1, "n": 5}) == {"v": 3, "count": 5, "unit": "records"}
    assert CODEC.current_shape({"v": 2, "count": 5}) == {"v": 3, "count": 5, "unit": "records"}
    assert CODEC.current_shape({"v": 3, "count": 5, "unit": "bytes"}) == {"v": 3, "count": 5, "unit": "bytes"}


def test_stamp_writes_the_current_version_first():
    assert list(CODEC.stamp({"count": 1})) == ["v", "count"] and CODEC.stamp({})["v"] == 3


@pytest.mark.parametrize("data, message", [
    ({"v": 4}, "where.json: thing version 4 is not understood; this release reads version\\(s\\) 1, 2, 3. newer\\?"),
    ({"v": True}, "thing version True is not understood"),
    ({}, "thing version None is not understood"),
    ([1], "where.json: a thing must be a JSON object, got list"),
])
def test_what_this_release_cannot_read_is_refused_with_the_callers_error(data, message):
    with pytest.raises(Refused, match=message):
        CODEC.current_shape(data, where="where.json", hint=". newer?")


def test_a_version_without_an_upgrade_step_is_a_programming_error():
    with pytest.raises(ValueError, match="no upgrade step for version\\(s\\) \\[2\\]"):
        VersionedCodec("thing", "v", 3, Refused, upgrades={1: rename_count})
