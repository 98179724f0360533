"""How much a catch-up batch may read: the byte budget, the time budget and what is learnt."""

import pytest

from backlog_source.enumerator.catch_up import (
    FIRST_TIMED_BATCH_BYTES,
    GROWTH,
    catch_up_bytes,
    learn_rate,
)
from backlog_source.enumerator.state import BoundedBy

MIB = 1 << 20


def test_the_byte_budget_alone_bounds_every_catch_up_batch():
    assert catch_up_bytes(128 * MIB, None, None, None) == (128 * MIB, BoundedBy.BYTES)
    assert catch_up_bytes(128 * MIB, None, 1e9, 10 * MIB) == (128 * MIB, BoundedBy.BYTES)
    assert catch_up_bytes(None, None, None, None) == (None, BoundedBy.BYTES)


def test_a_time_budget_starts_small_and_grows_at_most_fourfold_per_batch():
    first, why = catch_up_bytes(None, 30_000, None, None)
    assert (first, why) == (FIRST_TIMED_BATCH_BYTES, BoundedBy.TIME)
    # Fast cluster: 100 MiB/s learnt would allow 3 GiB, growth allows four times the last.
    second, _ = catch_up_bytes(None, 30_000, 100.0 * MIB, first)
    assert second == GROWTH * first


def test_the_smaller_of_the_byte_and_time_bounds_wins():
    assert catch_up_bytes(64 * MIB, 30_000, 100.0 * MIB, 1 << 40) == (64 * MIB, BoundedBy.BYTES)
    assert catch_up_bytes(1 << 40, 1_000, 10.0 * MIB, 1 << 40) == (10 * MIB, BoundedBy.TIME)


def simulate(rate_of_batch, batches, target_ms=10_000, max_bytes=None, overhead_s=0.5):
    """Batches planned by the time budget on a cluster that reads ``rate_of_batch(i)``
    bytes/s plus a fixed cost per batch; returns (bytes, seconds) per batch."""
    learned, previous, out = None, None, []
    for i in range(batches):
        bound, _ = catch_up_bytes(max_bytes, target_ms, learned, previous)
        seconds = overhead_s + bound / rate_of_batch(i)
        out.append((bound, seconds))
        learned, previous = learn_rate(learned, bound, seconds), bound
    return out


def test_the_time_budget_converges_on_the_target_duration():
    batches = simulate(lambda i: 50.0 * MIB, 12)
    assert [s for _, s in batches][:2] < [s for _, s in batches][-2:]  # small first, growing
    assert batches[-1][1] == pytest.approx(10.0, rel=0.1)


@pytest.mark.parametrize("change", [0.25, 4.0])
def test_a_change_of_speed_mid_backlog_is_followed_within_three_batches(change):
    batches = simulate(lambda i: 50.0 * MIB * (change if i >= 10 else 1.0), 16)
    assert batches[9][1] == pytest.approx(10.0, rel=0.15)
    after = [s for _, s in batches[10:]]
    assert any(abs(s - 10.0) / 10.0 < 0.35 for s in after[:4]), after
    assert after[-1] == pytest.approx(10.0, rel=0.15)


def test_the_byte_budget_is_never_exceeded_by_the_time_budget():
    assert all(b <= 32 * MIB for b, _ in simulate(lambda i: 500.0 * MIB, 10, target_ms=60_000, max_bytes=32 * MIB))


def test_learning_ignores_empty_or_instant_batches():
    assert learn_rate(5.0, 0, 1.0) == 5.0 and learn_rate(5.0, 10, 0.0) == 5.0
    assert learn_rate(None, 100, 2.0) == 50.0
