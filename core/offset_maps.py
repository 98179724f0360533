"""Whole-map comparisons of per-bucket offset maps (``{Bucket: offset}``), run in C.

Which process: the driver's planner. Why: a plan compares maps of every partition the query
reads several times (log ends against positions, the batch's ends against its starts); at ten
thousand partitions each of those passes written as a Python loop cost a millisecond or more
of every ``latestOffset``, while ``map``/``compress`` over the maps cost a fraction of that.
Results keep the order of the map they walk: the planner's maps are in bucket order.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress, repeat
from math import inf
from operator import lt, ne
from typing import TypeVar

K = TypeVar("K")


def keys_below(values: Mapping[K, int], floors: Mapping[K, int]) -> list[K]:
    """The keys of ``floors``, in its order, whose value in ``values`` is below their floor;
    a key ``values`` lacks is not below."""
    return list(compress(floors, map(lt, map(values.get, floors, repeat(inf)), floors.values())))


def keys_changed(before: Mapping[K, int], after: Mapping[K, int]) -> list[K]:
    """The keys of ``before``, in its order, whose value in ``after`` is another one. Raises
    ``KeyError`` for a key of ``before`` that ``after`` lacks."""
    return list(compress(before, map(ne, before.values(), map(after.__getitem__, before))))


def raised_to(values: Mapping[K, int], floors: Mapping[K, int]) -> dict[K, int]:
    """Each key of ``floors``, in its order, with its value in ``values`` or its floor,
    whichever is larger (its floor when ``values`` lacks it)."""
    return dict(zip(floors, map(max, map(values.get, floors, floors.values()), floors.values())))
