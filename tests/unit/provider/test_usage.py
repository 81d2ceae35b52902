"""Usage and cost in Redis: recording, aggregation by agent/provider/model/day, expiry."""

from __future__ import annotations

import datetime as dt

import pytest

from agentmesh.config import RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.errors import AgentmeshError, InvalidRequestError
from agentmesh.store import Store
from provider_svc.models.base import Usage
from provider_svc.usage import ROUTED_SUFFIX, Prices, UsageLedger, cost_usd, day_of


def test_cost() -> None:
    assert cost_usd(Usage(1_000_000, 500_000), Prices(2.5, 10.0)) == 2.5 + 5.0
    assert cost_usd(Usage(123, 456), Prices()) == 0


async def test_record_and_query(store: Store) -> None:
    ledger = UsageLedger(store, ttl_days=30)
    today = dt.datetime.now(dt.UTC)
    yesterday = today - dt.timedelta(days=1)
    await ledger.record("a1", "openai/gpt-4o", Usage(100, 20), 0.5, 0.25)
    await ledger.record("a1", "openai/gpt-4o", Usage(50, 10), 0.25, 0.75)
    await ledger.record("a1", "scripted/default", Usage(5, 5), 0.0, 0.001)
    await ledger.record("a2", "openai/gpt-4o", Usage(1, 1), 0.1, 0.1, when=yesterday)
    rows = await ledger.query()
    keyed = {(r.agent_id, r.provider, r.model, r.day): r for r in rows}
    first = keyed[("a1", "openai", "gpt-4o", day_of(today))]
    assert (first.calls, first.input_tokens, first.output_tokens) == (2, 150, 30)
    assert first.cost_usd == 0.75 and first.total_latency_s == 1.0
    assert ("a1", "scripted", "default", day_of(today)) in keyed
    assert ("a2", "openai", "gpt-4o", day_of(yesterday)) in keyed
    assert {r.agent_id for r in await ledger.query("a2")} == {"a2"}
    assert await ledger.query(start_day=today.date()) == [r for r in rows if r.day == day_of(today)]
    assert [r.agent_id for r in await ledger.query(end_day=yesterday.date())] == ["a2"]
    assert await ledger.query("nobody") == []
    ttl = await store.redis.ttl(store.keys.usage("a1", day_of(today)) + ROUTED_SUFFIX)
    assert 0 < ttl <= 30 * 86400
    await ledger.aclose()


async def test_rows_carry_their_task_tag_and_api_key_and_older_rows_still_read(store: Store) -> None:
    ledger = UsageLedger(store)
    await ledger.record("t", "scripted/cheap", Usage(3, 4), 0.5, 0.1, task_tag="summarize", api_key_id="0123456789ab")
    await ledger.record("t", "scripted/cheap", Usage(3, 4), 0.5, 0.1)
    # A row an earlier release wrote (no tag, no key, the key without its suffix).
    legacy = store.keys.usage("t", day_of())
    await store.redis.hset(
        legacy, mapping={"openai/gpt-4o#calls": 2, "openai/gpt-4o#in": 7, "openai/gpt-4o#cost_nusd": 10}
    )
    rows = sorted((r.task_tag, r.api_key_id, r.provider, r.model, r.calls, r.cost_usd) for r in await ledger.query("t"))
    assert rows == [
        ("", "", "openai", "gpt-4o", 2, 1e-8),
        ("", "", "scripted", "cheap", 1, 0.5),
        ("summarize", "0123456789ab", "scripted", "cheap", 1, 0.5),
    ]
    await ledger.aclose()


async def test_model_names_with_colons_and_slashes(store: Store) -> None:
    ledger = UsageLedger(store)
    await ledger.record("a", "ollama/llama3:8b", Usage(1, 2), 0, 0)
    await ledger.record("a", "router/meta-llama/llama-3#x", Usage(1, 2), 0, 0)
    models = {(r.provider, r.model) for r in await ledger.query()}
    assert models == {("ollama", "llama3:8b"), ("router", "meta-llama/llama-3#x")}
    await ledger.aclose()


async def test_writes_are_behind_aggregated_and_survive_an_outage(fresh_redis: LocalRedis) -> None:
    store = await Store.connect(RedisSettings(url=fresh_redis.url, socket_timeout_s=0.5, connect_timeout_s=0.5), "dev")
    ledger = UsageLedger(store, flush_interval_s=3600)  # only explicit flushes in this test
    try:
        for _ in range(3):
            ledger.add("a", "p/m", Usage(10, 1), 0.001, 0.01)
        assert await store.redis.exists(store.keys.usage("a", day_of())) == 0  # nothing written yet
        rows = await ledger.query()  # a query flushes first
        assert [(r.calls, r.input_tokens, r.cost_usd) for r in rows] == [(3, 30, 0.003)]
        ledger.add("a", "p/m", Usage(5, 0), 0, 0)
        fresh_redis.stop()
        with pytest.raises(AgentmeshError):
            await ledger.flush()
        assert ledger._buffer  # kept for the next flush
    finally:
        ledger._closed = True
        await store.close()


async def test_bad_agent_ids_fail_at_add(store: Store) -> None:
    with pytest.raises(InvalidRequestError):
        UsageLedger(store).add("bad agent{id}", "p/m", Usage(), 0, 0)
