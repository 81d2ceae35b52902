"""tool_svc's and provider_svc's retries follow the shared schedule (agentmesh.backoff): the documented
delays, min(initial x multiplier^(n-1), cap) + jitter x draw, from the caller's random source."""

from __future__ import annotations

import random
from dataclasses import replace

from provider_svc.models.retry import RetryPolicy as ProviderRetry
from tool_svc.model import RetryPolicy as ToolRetry
from tool_svc.retry import backoff_delay


def test_tool_retries_double_up_to_the_cap_plus_a_drawn_jitter() -> None:
    policy = ToolRetry(max_attempts=5, initial_backoff_s=1.0, max_backoff_s=4.0, max_jitter_s=0.5)
    delays = [backoff_delay(policy, n, random.Random(7)) for n in (1, 2, 3, 4)]
    draw = random.Random(7).random()
    assert delays == [1.0 + 0.5 * draw, 2.0 + 0.5 * draw, 4.0 + 0.5 * draw, 4.0 + 0.5 * draw]


def test_a_tool_policy_without_jitter_draws_nothing() -> None:
    policy = ToolRetry(max_attempts=3, initial_backoff_s=0.5, max_backoff_s=10.0, max_jitter_s=0.0)
    rng = random.Random(3)
    before = rng.getstate()
    assert backoff_delay(policy, 3, rng) == 2.0
    assert rng.getstate() == before


def test_provider_retries_follow_their_multiplier_and_cap() -> None:
    policy = replace(ProviderRetry(), base_s=0.5, multiplier=3.0, cap_s=8.0, jitter_s=0.25)
    draw = random.Random(11).random()
    assert [policy.backoff(n, random.Random(11)) for n in (1, 2, 3, 4)] == [
        0.5 + 0.25 * draw,
        1.5 + 0.25 * draw,
        4.5 + 0.25 * draw,
        8.0 + 0.25 * draw,
    ]
