"""The planner's whole-map comparisons: the same answers as the Python loops they replaced,
in the order of the map they walk."""

from __future__ import annotations

import pytest

from backlog_source.core.buckets import Bucket
from backlog_source.core.offset_maps import keys_below, keys_changed, raised_to

A0, A1, A2, B0 = Bucket("a", 0), Bucket("a", 1), Bucket("a", 2), Bucket("b", 0)


def test_keys_below_their_floor_in_the_floors_order_leaving_out_keys_without_a_value():
    floors = {A2: 5, A0: 5, A1: 5, B0: 5}
    assert keys_below({A0: 4, A1: 5, A2: 0}, floors) == [A2, A0]  # B0: no value, not below
    assert keys_below({A0: 6}, {}) == [] and keys_below({}, floors) == []


def test_keys_changed_in_the_order_before_and_a_key_after_lacks_is_an_error():
    assert keys_changed({A1: 3, A0: 1, B0: 7}, {A0: 2, A1: 3, B0: 8}) == [A0, B0]
    assert keys_changed({}, {A0: 1}) == []
    with pytest.raises(KeyError):
        keys_changed({A0: 1}, {A1: 1})


def test_raised_to_takes_the_larger_of_value_and_floor_and_the_floor_without_a_value():
    raised = raised_to({A0: 9, A1: 2, B0: 4}, {A1: 3, A0: 5, A2: 7})
    assert raised == {A1: 3, A0: 9, A2: 7} and list(raised) == [A1, A0, A2]  # B0: not a key of floors


def test_the_same_answers_as_python_loops_on_many_keys():
    floors = {Bucket(f"t{i % 3}", i): i % 11 for i in range(3_000)}
    values = {b: (f * 7) % 13 for b, f in floors.items() if b.partition % 5}
    assert keys_below(values, floors) == [b for b, f in floors.items() if b in values and values[b] < f]
    full = {b: values.get(b, f) for b, f in floors.items()}
    assert keys_changed(floors, full) == [b for b, f in floors.items() if full[b] != f]
    assert raised_to(values, floors) == {b: max(values.get(b, f), f) for b, f in floors.items()}
