"""The quota scripts on a real Redis (standalone here, a Cluster in `make test-cluster`): the sliding request
and token windows, budgets with reservations, settle and release, a dead replica's reservation, revoked
and expired keys, spend alerts once per threshold and period."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentmesh.apikeys import ApiKeys
from agentmesh.config import GatewaySettings, QuotaLimits
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from provider_svc.quotas import Alert, Quotas, Scope


def quotas(store: Store, alerts: list[Alert] | None = None, **gateway: Any) -> Quotas:
    async def sink(alert: Alert) -> None:
        if alerts is not None:
            alerts.append(alert)

    return Quotas(store, GatewaySettings.model_validate(gateway), on_alert=sink)


def agent(q: Quotas, name: str) -> Scope:
    scope = q.agent_scope(name)
    assert scope is not None
    return scope


async def test_sixty_rpm_admits_sixty_in_a_minute_and_refuses_the_rest_typed(store: Store) -> None:
    q = quotas(store, agents={"rpm60": {"rpm": 60}})
    scope = agent(q, "rpm60")
    outcomes = await asyncio.gather(
        *(q.reserve([scope], reserve_usd=0.0, tokens=10) for _ in range(100)), return_exceptions=True
    )
    admitted = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(admitted) == 60 and len(refused) == 40
    for err in refused:
        assert isinstance(err, AgentmeshError) and err.code == ErrorCode.RATE_LIMITED
        assert err.retry_after is not None and 0 < err.retry_after <= 60
        assert err.metadata["limit"] == "rpm" and err.metadata["scope"] == "agent:rpm60"
    # Settling keeps a request in the window (it went upstream); a released one leaves no trace.
    for r in admitted[:30]:
        await q.settle(r, cost_usd=0.0, tokens=10)
    for r in admitted[30:]:
        await q.release(r)
    again = await asyncio.gather(
        *(q.reserve([scope], reserve_usd=0.0, tokens=1) for _ in range(40)), return_exceptions=True
    )
    assert sum(not isinstance(o, BaseException) for o in again) == 30


async def test_tokens_per_minute_count_the_reserve_then_the_real_usage(store: Store) -> None:
    q = quotas(store, agents={"tpm": {"tpm": 1000}})
    scope = agent(q, "tpm")
    first = await q.reserve([scope], reserve_usd=0.0, tokens=800)
    with pytest.raises(AgentmeshError) as over:
        await q.reserve([scope], reserve_usd=0.0, tokens=300)
    assert over.value.code == ErrorCode.RATE_LIMITED and over.value.metadata["limit"] == "tpm"
    await q.settle(first, cost_usd=0.0, tokens=100)  # the reply used far less than its reserve
    await q.reserve([scope], reserve_usd=0.0, tokens=850)
    with pytest.raises(AgentmeshError) as huge:
        await q.reserve([scope], reserve_usd=0.0, tokens=5000)
    assert huge.value.code == ErrorCode.INVALID_REQUEST  # can never fit: not a retry later


async def test_a_budget_admits_while_spend_and_reservations_fit(store: Store) -> None:
    alerts: list[Alert] = []
    q = quotas(store, alerts, agents={"b": {"budget_usd_day": 1.0}})
    scope = agent(q, "b")
    held = [await q.reserve([scope], reserve_usd=0.3, tokens=1) for _ in range(3)]
    with pytest.raises(AgentmeshError) as over:
        await q.reserve([scope], reserve_usd=0.3, tokens=1)
    err = over.value
    assert err.code == ErrorCode.BUDGET_EXCEEDED and err.error_class.name == "FATAL"
    assert err.metadata["period"] == "day" and float(err.metadata["reserved_usd"]) == pytest.approx(0.9)
    assert err.metadata["resets_at"].endswith("T00:00:00Z")
    for r in held:
        await q.settle(r, cost_usd=0.1, tokens=1)  # each cost a third of its reserve
    await asyncio.sleep(0)
    assert [a.threshold for a in alerts] == []  # 0.3 of 1.0: under 50 %
    more = [await q.reserve([scope], reserve_usd=0.3, tokens=1) for _ in range(2)]
    for r in more:
        await q.settle(r, cost_usd=0.25, tokens=1)
    await asyncio.sleep(0)
    assert [(a.period, a.threshold) for a in alerts] == [("day", 50), ("day", 80)]
    assert alerts[-1].spent_usd == pytest.approx(0.8) and alerts[-1].budget_usd == 1.0
    with pytest.raises(AgentmeshError):
        await q.reserve([scope], reserve_usd=0.3, tokens=1)  # 0.8 + 0.3 > 1.0: and 100 % is reported once
    with pytest.raises(AgentmeshError):
        await q.reserve([scope], reserve_usd=0.3, tokens=1)
    await asyncio.sleep(0)
    assert [a.threshold for a in alerts] == [50, 80, 100]
    small = await q.reserve([scope], reserve_usd=0.15, tokens=1)
    await q.settle(small, cost_usd=0.15, tokens=1)
    await asyncio.sleep(0)
    assert len(alerts) == 3  # 95 %: every threshold fired once already this period


async def test_a_reservation_a_dead_replica_never_settled_expires(store: Store) -> None:
    q = quotas(store, agents={"dead": {"budget_usd_day": 1.0}}, reservation_ttl_s=10)
    scope = agent(q, "dead")
    await q.reserve([scope], reserve_usd=0.9, tokens=1)  # its replica dies: never settled
    with pytest.raises(AgentmeshError):
        await q.reserve([scope], reserve_usd=0.2, tokens=1)
    state = f"{scope.base}:q:res"
    # Ten seconds later (moved back rather than waited for): the reservation no longer counts.
    members: Any = await store.redis.zrange(state, 0, -1, withscores=True)
    await store.redis.zadd(state, {m: float(score) - 11_000 for m, score in members})
    await q.reserve([scope], reserve_usd=0.2, tokens=1)


async def test_a_refusal_in_a_later_scope_releases_the_earlier_ones(store: Store) -> None:
    q = quotas(store, agents={"a": {"rpm": 100}}, tenants={"acme": {"budget_usd_month": 0.5}})
    scopes = q.scopes(key_id="", agent="a", subject="acme:alice")
    assert [s.label for s in scopes] == ["agent:a", "tenant:acme"]
    await q.reserve(scopes, reserve_usd=0.4, tokens=1)
    with pytest.raises(AgentmeshError) as over:
        await q.reserve(scopes, reserve_usd=0.4, tokens=1)
    assert over.value.metadata["scope"] == "tenant:acme" and over.value.metadata["period"] == "month"
    rpm = await store.redis.zcard(f"{scopes[0].base}:q:rpm")
    assert rpm == 1  # the refused call left nothing in the agent's window


async def test_the_key_scope_reads_the_keys_record_revoked_expired_and_its_own_limits(store: Store) -> None:
    keys = ApiKeys(store)
    q = quotas(store)  # key_defaults: 60 rpm
    _, record = await keys.create(agent_id="k", environment="dev", limits=QuotaLimits(rpm=2))
    scope = q.key_scope(record.key_id)
    for _ in range(2):
        await q.reserve([scope], reserve_usd=0.0, tokens=1)
    with pytest.raises(AgentmeshError) as over:
        await q.reserve([scope], reserve_usd=0.0, tokens=1)
    assert over.value.code == ErrorCode.RATE_LIMITED and over.value.metadata["quota"] == "2"
    _, other = await keys.create(agent_id="k", environment="dev")
    await keys.revoke(other.key_id)
    with pytest.raises(AgentmeshError) as revoked:
        await q.reserve([q.key_scope(other.key_id)], reserve_usd=0.0, tokens=1)
    assert revoked.value.code == ErrorCode.UNAUTHENTICATED and "revoked" in revoked.value.message
    _, short = await keys.create(agent_id="k", environment="dev", ttl_s=1)
    await store.redis.hset(keys.record_key(short.key_id), "expires_ms", "1")
    with pytest.raises(AgentmeshError) as expired:
        await q.reserve([q.key_scope(short.key_id)], reserve_usd=0.0, tokens=1)
    assert "expired" in expired.value.message
