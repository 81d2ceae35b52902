"""Circuit breakers shared by tool_svc replicas through Redis (issue 28; tool_svc/shared_breaker.py).

Two `SharedBreakers` on one Redis are two replicas: failures anywhere open the breaker for both, one
probe is admitted fleet-wide, a probe that dies frees the slot, and a replica's copy of a healthy
breaker spares it the round trip for `sync_s` (then it learns what the other did)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentmesh.config import RedisSettings
from agentmesh.errors import ErrorCode, UnavailableError
from agentmesh.store import Store
from tests.contract.tool.conftest import Client, error_name, output_json
from tests.contract.tool.fakes import FakeUpstream
from tests.contract.tool.test_idempotency import CHARGE
from tool_svc.breaker import BreakerConfig
from tool_svc.shared_breaker import SharedBreakers, breaker_subject

CONFIG = BreakerConfig(failure_threshold=3, open_s=0.4, ramp_s=0.6, ramp_start_fraction=0.25)
KEY = ("agent-a", "flaky")


def two_replicas(store: Store, sync_s: float = 30.0) -> tuple[SharedBreakers, SharedBreakers]:
    return SharedBreakers(store, CONFIG, sync_s=sync_s), SharedBreakers(store, CONFIG, sync_s=sync_s)


async def test_failures_on_two_replicas_open_one_breaker_for_both(store: Store) -> None:
    a, b = two_replicas(store, sync_s=0.0)  # no local trust: every call asks Redis
    for replica in (a, b, a):
        assert await replica.admit(*KEY) is None
        await replica.record(*KEY, success=False)  # 3 consecutive failures, over two replicas
    refused = await b.admit(*KEY, fallback_tool="query_logs")
    assert refused is not None and refused.code is ErrorCode.CIRCUIT_OPEN
    assert "3 consecutive failures" in refused.message and refused.fallback_tool == "query_logs"
    assert refused.retry_after is not None and 0 < refused.retry_after <= CONFIG.open_s
    assert await a.admit("agent-a-2", "flaky") is None  # another instance has its own breaker


async def test_a_success_between_failures_resets_the_count_everywhere(store: Store) -> None:
    a, b = two_replicas(store, sync_s=0.0)
    for replica, ok in ((a, False), (b, False), (a, True), (b, False), (a, False)):
        assert await replica.admit(*KEY) is None
        await replica.record(*KEY, success=ok)
    assert await b.admit(*KEY) is None  # 2 failures since the success: still closed


async def test_one_probe_fleet_wide_then_a_shared_ramp(store: Store) -> None:
    a, b = two_replicas(store, sync_s=0.0)
    for _ in range(3):
        await a.record(*KEY, success=False)
    await asyncio.sleep(CONFIG.open_s + 0.05)
    assert await b.admit(*KEY) is None  # the one probe
    waiting = await a.admit(*KEY)
    assert waiting is not None and "probe" in waiting.message
    await b.record(*KEY, success=True)  # the probe passed: ramping for both
    admitted = 0
    for i in range(12):
        admitted += (await (a if i % 2 else b).admit(*KEY)) is None
    assert 0 < admitted < 12, "while ramping, the replicas together admit only a share"
    await asyncio.sleep(CONFIG.ramp_s + 0.05)
    assert all([await a.admit(*KEY) is None, await b.admit(*KEY) is None])
    assert a.state(*KEY) == b.state(*KEY) == "closed"


async def test_a_probe_without_a_verdict_lets_the_next_one_through(store: Store) -> None:
    a, b = two_replicas(store, sync_s=0.0)
    for _ in range(3):
        await a.record(*KEY, success=False)
    await asyncio.sleep(CONFIG.open_s + 0.05)
    assert await a.admit(*KEY) is None
    await a.release_probe(*KEY)  # cancelled before it ran
    assert await b.admit(*KEY) is None
    await b.record(*KEY, success=False)  # the probe failed: open again, for everyone
    refused = await a.admit(*KEY)
    assert refused is not None and "consecutive failures" in refused.message


async def test_a_healthy_copy_spares_the_round_trip_then_expires(store: Store, redis_settings: RedisSettings) -> None:
    a, b = two_replicas(store, sync_s=0.5)
    assert await b.admit(*KEY) is None  # b learns: closed, no failures
    await b.record(*KEY, success=True)
    for _ in range(3):  # a opens it
        assert await a.admit(*KEY) is None
        await a.record(*KEY, success=False)
    # b trusts its fresh copy: one more call goes out, and its failure tells b at once.
    assert await b.admit(*KEY) is None
    await b.record(*KEY, success=False)
    assert (await b.admit(*KEY)) is not None
    # A third replica that only ever saw successes learns within sync_s.
    c = SharedBreakers(store, CONFIG, sync_s=0.2)
    await asyncio.sleep(CONFIG.open_s + 0.05)
    await b.admit(*KEY)  # the probe, held by b
    assert await c.admit(*KEY) is not None
    assert breaker_subject("agent a", "{x}").startswith("sha256:")  # never a key with spaces or braces
    keys = [k async for k in store.redis.scan_iter(match=f"{store.keys.prefix}:brk:*")]
    assert len(keys) == 1 and await store.redis.ttl(keys[0]) > 0  # idle breakers expire


async def test_a_breaker_redis_can_not_record_keeps_the_outcome_and_settles_the_key(
    tool_service: Any, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The call ran: a failed breaker update must neither turn its outcome into UNAVAILABLE nor skip
    # the idempotency step's finalizer (a key left "in progress", heartbeating for ever).
    async def down(*args: Any, **kwargs: Any) -> None:
        raise UnavailableError("redis unavailable during circuit breaker")

    c = Client(await tool_service())
    assert output_json(await c.execute("charge", CHARGE, key="k-brk")) == {"n": 1}  # the breaker is known closed
    monkeypatch.setattr(SharedBreakers, "_send", down)
    upstream.flaky_failures = 1
    first = await c.execute("flaky_write", {}, key="k-flaky-brk")  # a failure: reported, and the report fails
    assert error_name(first) == "UPSTREAM_UNAVAILABLE"
    again = await c.execute("flaky_write", {}, key="k-flaky-brk")
    assert again.stats.replayed and error_name(again) == "UPSTREAM_UNAVAILABLE"  # settled, not "in progress"
