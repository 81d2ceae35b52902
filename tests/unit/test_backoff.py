"""The one retry schedule (agentmesh/backoff.py): exponential, capped, jitter from the caller's draw."""

from __future__ import annotations

import pytest

from agentmesh.backoff import Backoff


def test_delays_double_up_to_the_cap() -> None:
    b = Backoff(initial_s=0.2, max_s=1.0)
    assert [b.delay(n) for n in range(1, 6)] == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0])


def test_the_multiplier_and_a_huge_retry_number_stay_capped() -> None:
    b = Backoff(initial_s=1.0, max_s=30.0, multiplier=3.0)
    assert [b.delay(n) for n in (1, 2, 3, 4)] == pytest.approx([1.0, 3.0, 9.0, 27.0])
    assert b.delay(10_000) == 30.0


def test_jitter_is_the_draw_times_jitter_s() -> None:
    b = Backoff(initial_s=0.5, max_s=5.0, jitter_s=0.4)
    assert b.delay(1, 0.0) == pytest.approx(0.5)
    assert b.delay(1, 0.5) == pytest.approx(0.7)
    assert b.delay(3, 0.999) == pytest.approx(2.0 + 0.3996)


@pytest.mark.parametrize(
    "kwargs",
    [{"initial_s": -1, "max_s": 1}, {"initial_s": 1, "max_s": -1}, {"initial_s": 1, "max_s": 1, "jitter_s": -0.1},
     {"initial_s": 1, "max_s": 1, "multiplier": 0.5}],
)  # fmt: skip
def test_a_bad_schedule_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(**kwargs)


@pytest.mark.parametrize(("retry", "draw"), [(0, 0.0), (-1, 0.0), (1, 1.0), (1, -0.1)])
def test_a_bad_retry_number_or_draw_is_refused(retry: int, draw: float) -> None:
    with pytest.raises(ValueError, match=r"retry|draw"):
        Backoff(initial_s=1, max_s=2).delay(retry, draw)
