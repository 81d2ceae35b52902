"""Budgets hold under concurrency across replicas: 200 requests at once on a 1-USD key, split over two
provider_svc replicas on one Redis, never spend more than the budget plus one reply's reserve; every
refusal is the typed BUDGET_EXCEEDED; what was spent is what the replies cost and what usage shows."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from agentmesh.config import QuotaLimits
from provider_svc.pricing import estimate_input_tokens, reserve_usd
from provider_svc.usage import Prices
from tests.contract.gateway.conftest import Gateway

IN_PRICE, OUT_PRICE = 1000.0, 2000.0  # USD per million tokens: a reply costs about two cents
PRICEY = {
    "name": "scripted",
    "type": "scripted",
    "rate_limit_per_min": None,
    "models": [
        {"name": "default", "input_price_per_mtok": IN_PRICE, "output_price_per_mtok": OUT_PRICE, "latency_ms": 20}
    ],
}
MAX_TOKENS = 16


async def test_two_hundred_concurrent_requests_on_a_one_dollar_key_over_two_replicas(start_gateway: Any) -> None:
    config = {
        "providers": {"backends": [PRICEY], "default_model": "scripted/default"},
        # Both replicas share this test's event loop with its 200 clients: under a loaded machine a new
        # Redis connection can wait seconds for the loop. What is tested is the budget, not that timing.
        "redis": {"connect_timeout_s": 20, "socket_timeout_s": 20},
    }
    replicas: list[Gateway] = [await start_gateway(config), await start_gateway(config)]
    key, record = await replicas[0].keys.create(
        agent_id="spender", environment="dev", limits=QuotaLimits(rpm=100_000, budget_usd_day=1.0)
    )
    bodies = [
        {"model": "scripted/default", "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": f"hi #{i}"}]}
        for i in range(200)
    ]
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=60, limits=limits, headers={"authorization": f"Bearer {key}"}) as client:
        replies = await asyncio.gather(
            *(
                client.post(f"{replicas[i % 2].base_url}/v1/chat/completions", json=body)
                for i, body in enumerate(bodies)
            )
        )
    ok = [r for r in replies if r.status_code == 200]
    refused = [r for r in replies if r.status_code != 200]
    assert ok and refused, [r.status_code for r in replies][:10]
    for r in refused:
        assert r.status_code == 429, r.text
        assert r.json()["error"]["agentmesh_code"] == "BUDGET_EXCEEDED"
    assert {r.headers["x-request-id"] for r in ok}  # both replicas answered
    paid = sum(
        (r.json()["usage"]["prompt_tokens"] * IN_PRICE + r.json()["usage"]["completion_tokens"] * OUT_PRICE) / 1e6
        for r in ok
    )
    from provider_svc.models.base import Message, ModelRequest, Role, Sampling

    one_reserve = max(
        reserve_usd(
            estimate_input_tokens(
                ModelRequest(
                    messages=(Message(role=Role.USER, content=b["messages"][0]["content"]),),  # type: ignore[index]
                    sampling=Sampling(max_tokens=MAX_TOKENS),
                )
            ),
            MAX_TOKENS,
            Prices(IN_PRICE, OUT_PRICE),
        )
        for b in bodies
    )
    assert paid <= 1.0 + one_reserve, (paid, one_reserve, len(ok))
    assert len(ok) >= int(1.0 / one_reserve) - 1  # at least what fits at the reserve was admitted at once
    # Settled in the background: wait for every reservation to end, then read the key's spend.
    store = replicas[0].svc.host.store
    assert store is not None
    state = f"{store.keys.prefix}:apikey:{{{record.key_id}}}:q:state"
    for _ in range(200):
        fields = await store.redis.hgetall(state)
        if int(fields.get(b"reserved", b"0")) == 0:
            break
        await asyncio.sleep(0.02)
    spent = int(fields[b"day_spent"]) / 1e9
    assert spent == pytest.approx(paid, abs=1e-6)
    assert spent <= 1.0 + one_reserve
    print(f"admitted {len(ok)} of 200 at once, spent ${spent:.4f} of $1.00 (one reserve ${one_reserve:.4f})")
    # One at a time afterwards, the rest of the budget is used until less than one reserve is left.
    async with httpx.AsyncClient(timeout=60, headers={"authorization": f"Bearer {key}"}) as client:
        for i in range(100):
            r = await client.post(f"{replicas[i % 2].base_url}/v1/chat/completions", json=bodies[i])
            if r.status_code != 200:
                assert r.json()["error"]["agentmesh_code"] == "BUDGET_EXCEEDED"
                break
        else:
            raise AssertionError("the budget never ran out")
    for _ in range(200):
        fields = await store.redis.hgetall(state)
        if int(fields.get(b"reserved", b"0")) == 0:
            break
        await asyncio.sleep(0.02)
    spent = int(fields[b"day_spent"]) / 1e9
    assert 1.0 - one_reserve <= spent <= 1.0, spent
    print(f"then one at a time until refused: spent ${spent:.4f}")


async def test_sixty_requests_per_minute_by_default_over_two_replicas(start_gateway: Any) -> None:
    """A key without limits of its own gets `gateway.key_defaults` (60 rpm): 100 requests at once over two
    replicas, 60 answered, 40 refused with the API's typed 429 and a Retry-After."""
    config = {
        "providers": {"backends": [PRICEY], "default_model": "scripted/default"},
        # Both replicas share this test's event loop with its 200 clients: under a loaded machine a new
        # Redis connection can wait seconds for the loop. What is tested is the budget, not that timing.
        "redis": {"connect_timeout_s": 20, "socket_timeout_s": 20},
    }
    replicas: list[Gateway] = [await start_gateway(config), await start_gateway(config)]
    key = await replicas[0].key("busy-bot")
    body = {"model": "scripted/default", "messages": [{"role": "user", "content": "hi"}]}
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=60, limits=limits, headers={"authorization": f"Bearer {key}"}) as client:
        replies = await asyncio.gather(
            *(client.post(f"{replicas[i % 2].base_url}/v1/chat/completions", json=body) for i in range(100))
        )
    assert sorted(r.status_code for r in replies) == [200] * 60 + [429] * 40
    for r in replies:
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "rate_limit_exceeded"
            assert r.json()["error"]["agentmesh_code"] == "RATE_LIMITED"
            assert 1 <= int(r.headers["retry-after"]) <= 60
