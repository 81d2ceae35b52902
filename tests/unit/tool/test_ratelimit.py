"""The per-agent token bucket in Redis, with small local leases that never loosen the limit."""

from __future__ import annotations

import hashlib

import pytest

from agentmesh.config import RedisSettings
from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError
from agentmesh.store import Store
from tool_svc.call import CallState
from tool_svc.model import Caller, CallRequest
from tool_svc.ratelimit import RateLimit, bucket_subject


def call(agent: str = "agent-a") -> CallState:
    return CallState(CallRequest("c", "t", "{}", "s"), Caller(subject=agent, agent_id=agent), "dev")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_two_replicas_share_one_bucket_exactly(store: Store) -> None:
    replicas = [RateLimit(store, capacity=100, refill_per_second=0.001) for _ in range(2)]
    assert replicas[0].batch == 10
    outcomes = [await replicas[i % 2](call()) for i in range(160)]
    allowed = sum(o is None for o in outcomes)
    assert allowed == 100
    refused = [o for o in outcomes if o is not None]
    assert all(isinstance(o, AgentmeshError) and o.code == ErrorCode.RATE_LIMITED for o in refused)
    assert all(isinstance(o, AgentmeshError) and o.retry_after and o.retry_after > 0 for o in refused)


async def test_unspent_lease_expires_and_never_adds_tokens(store: Store) -> None:
    clock = Clock()
    limit = RateLimit(store, capacity=100, refill_per_second=0.001, clock=clock)
    assert await limit(call()) is None  # takes 10, spends 1
    clock.now += 5  # the other 9 are dropped, not returned
    later = [await limit(call()) is None for _ in range(200)]
    assert later.count(True) == 90  # 100 - the 10 leased; the 9 unspent were dropped


async def test_small_buckets_are_exact_and_agents_are_separate(store: Store) -> None:
    limit = RateLimit(store, capacity=3, refill_per_second=0.001)
    assert limit.batch == 1
    assert [await limit(call()) is None for _ in range(4)] == [True, True, True, False]
    assert await limit(call("agent-b")) is None


def test_bucket_subjects_are_key_safe() -> None:
    assert bucket_subject("agent-a") == "tool:agent-a"
    assert bucket_subject("bad {agent} id").startswith("tool:sha256:")


async def tokens_left(store: Store, agent: str) -> float:
    """The agent's bucket as stored in Redis (what every replica draws from)."""
    raw = await store.redis.hget(store.keys.ratelimit(bucket_subject(agent)), "tokens")
    assert raw is not None
    return float(raw)


def test_the_local_batch_is_at_most_a_tenth_of_the_capacity_and_at_least_one() -> None:
    assert RateLimit(None, capacity=1000, refill_per_second=1).batch == 16  # the default local_batch
    assert RateLimit(None, capacity=1000, refill_per_second=1, local_batch=5).batch == 5
    assert RateLimit(None, capacity=50, refill_per_second=1).batch == 5  # 10 % of 50
    assert RateLimit(None, capacity=19, refill_per_second=1).batch == 1  # under 20: exact
    assert RateLimit(None, capacity=5, refill_per_second=1, local_batch=0).batch == 1


async def test_without_a_store_nothing_is_limited() -> None:
    assert await RateLimit(None, capacity=1, refill_per_second=0.001)(call()) is None


async def test_a_lease_is_spent_locally_until_it_expires_then_redis_is_asked(store: Store) -> None:
    clock = Clock()
    limit = RateLimit(store, capacity=20, refill_per_second=0.001, clock=clock)
    assert limit.batch == 2
    assert await limit(call("lease-a")) is None  # takes 2 from Redis, keeps 1
    assert round(await tokens_left(store, "lease-a")) == 18
    clock.now += 0.99  # the lease still holds: no Redis call
    assert await limit(call("lease-a")) is None
    assert round(await tokens_left(store, "lease-a")) == 18
    assert await limit(call("lease-a")) is None  # the lease is spent: Redis again
    assert round(await tokens_left(store, "lease-a")) == 16
    clock.now += 1.0  # exactly at its expiry the kept token is dropped
    assert await limit(call("lease-a")) is None
    assert round(await tokens_left(store, "lease-a")) == 14


async def test_the_oldest_lease_is_dropped_when_too_many_are_held(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tool_svc.ratelimit._MAX_LEASES", 2)
    limit = RateLimit(store, capacity=20, refill_per_second=0.001)
    for agent in ("old-a", "old-b"):
        assert await limit(call(agent)) is None  # a lease of one token each
    assert await limit(call("old-a")) is None  # spends a's lease
    assert await limit(call("old-a")) is None  # a new lease for a: a is now the most recent
    assert round(await tokens_left(store, "old-a")) == 16
    assert await limit(call("old-c")) is None  # a third lease: b's (the oldest) is dropped
    assert await limit(call("old-a")) is None  # a's lease was kept: local
    assert round(await tokens_left(store, "old-a")) == 16
    assert await limit(call("old-b")) is None  # b's was dropped: Redis
    assert round(await tokens_left(store, "old-b")) == 16


async def test_a_refusal_says_when_to_retry_from_the_refill_rate(store: Store) -> None:
    limit = RateLimit(store, capacity=3, refill_per_second=0.001)  # one token per 1,000 s
    for _ in range(3):
        assert await limit(call("slow-a")) is None
    refused = await limit(call("slow-a"))
    assert isinstance(refused, AgentmeshError) and refused.code == ErrorCode.RATE_LIMITED
    assert refused.retry_after is not None and 999 < refused.retry_after <= 1000
    assert "slow-a" in refused.message and "3 burst" in refused.message
    assert round(await tokens_left(store, "slow-a")) == 0  # a refusal takes nothing


async def test_a_bucket_under_one_token_refuses_with_a_retry_rather_than_failing(store: Store) -> None:
    """capacity may be under one call (config: > 0): the lease then never takes, and says when to retry."""
    limit = RateLimit(store, capacity=0.5, refill_per_second=0.001)
    refused = await limit(call("tiny-a"))
    assert isinstance(refused, AgentmeshError) and refused.code == ErrorCode.RATE_LIMITED
    assert refused.retry_after is not None and 499 < refused.retry_after <= 500


async def test_the_lease_and_take_token_draw_on_one_script_and_one_bucket(store: Store) -> None:
    """One token bucket (agentmesh/lua/token_bucket.lua): the rate limit's lease and `Store.take_token`
    run the same script on the same hash, so each sees what the other took."""
    assert "local most" in store.script("token_bucket").source
    limit = RateLimit(store, capacity=20, refill_per_second=0.001)
    assert await limit(call("one-a")) is None  # leases 2
    key = store.keys.ratelimit(bucket_subject("one-a"))
    taken = await store.take_token(key, 20, 0.001, cost=3)
    assert taken.allowed and taken.remaining == 15
    assert round(await tokens_left(store, "one-a")) == 15


def test_bucket_subjects_hash_exactly_what_a_key_cannot_hold() -> None:
    assert bucket_subject("a" * 195) == "tool:" + "a" * 195  # 200 characters: kept
    assert bucket_subject("Agent-X_9.v2") == "tool:Agent-X_9.v2"  # any printable character but braces
    hashed = bucket_subject("a" * 196)
    assert hashed == "tool:sha256:" + hashlib.sha256(("a" * 196).encode()).hexdigest()
    for bad in ("a}b", "a{b", "a b", "a\tb", "a\x00b"):
        assert bucket_subject(bad).startswith("tool:sha256:"), bad
    lone_surrogate = "a\udc80"  # not UTF-8: still hashed, not an error
    assert (
        bucket_subject(lone_surrogate)
        == "tool:sha256:" + hashlib.sha256(lone_surrogate.encode("utf-8", "surrogatepass")).hexdigest()
    )


async def test_retry_after_is_the_scripts_wait_in_seconds(store: Store) -> None:
    """retry_after is the script's retry_after_ms / 1000: one token per 1,000,000 s, so a drained bucket
    says ~1,000,000 s (the few ms the test takes change it by far less than 100 s)."""
    limit = RateLimit(store, capacity=1, refill_per_second=0.000001)
    assert await limit(call("slower-a")) is None
    refused = await limit(call("slower-a"))
    assert isinstance(refused, AgentmeshError) and refused.retry_after is not None
    assert 999_900 < refused.retry_after <= 1_000_000


async def test_an_exact_take_of_one_token_holds_no_lease_and_evicts_none(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the bucket holds a single whole token the lease takes just that one: nothing is kept locally,
    so it must not take a place among the held leases and push out another agent's."""
    monkeypatch.setattr("tool_svc.ratelimit._MAX_LEASES", 1)
    limit = RateLimit(store, capacity=20, refill_per_second=0.001)
    assert limit.batch == 2
    key_b = store.keys.ratelimit(bucket_subject("exact-b"))
    assert (await store.take_token(key_b, 20, 0.001, cost=19)).allowed  # b's bucket: one token left
    assert await limit(call("exact-a")) is None  # a leases 2, keeps 1
    assert round(await tokens_left(store, "exact-a")) == 18
    assert await limit(call("exact-b")) is None  # b takes its last token: no lease
    assert round(await tokens_left(store, "exact-b")) == 0
    assert await limit(call("exact-a")) is None  # a's kept token is still held: spent locally
    assert round(await tokens_left(store, "exact-a")) == 18


async def test_redis_down_is_unavailable_naming_the_rate_limit() -> None:
    url = "redis://127.0.0.1:1/0"  # nothing listens there
    settings = RedisSettings(url=url, socket_timeout_s=0.5)
    down = Store(Store.client_for(url, settings), url=url, settings=settings, environment="dev")
    try:
        with pytest.raises(UnavailableError) as raised:
            await RateLimit(down, capacity=3, refill_per_second=1)(call("down-a"))
        assert raised.value.message.startswith("redis unavailable during rate limit: ")
    finally:
        await down.close()
