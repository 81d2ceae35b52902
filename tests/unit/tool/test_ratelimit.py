"""The per-agent token bucket in Redis, with small local leases that never loosen the limit."""

from __future__ import annotations

from agentmesh.errors import AgentmeshError, ErrorCode
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
