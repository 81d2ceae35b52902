"""Retries, rate limits and concurrency of the composed model chain, counted at the fake upstream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentmesh.config import ProvidersSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from provider_svc.models.base import CallContext, Message, ModelRequest, Role, StreamFinal
from provider_svc.service import Providers
from tests.contract.provider.conftest import FAST_RETRY, backend
from tests.contract.provider.fakes import FakeProvider, Reply

REQUEST = ModelRequest(messages=(Message(Role.USER, "hi"),))
Build = Callable[..., ProvidersSettings]


async def _generate(providers: Providers, ctx: CallContext | None = None, model: str = "up/m1") -> Any:
    return await providers.generate(REQUEST, ctx or CallContext(), model=model)


@pytest.fixture(params=["openai", "anthropic"])
def fake(request: pytest.FixtureRequest) -> Any:
    with FakeProvider(request.param) as upstream:
        yield upstream
    assert not upstream.errors, upstream.errors


async def test_5xx_and_529_are_retried_until_success(fake: FakeProvider, providers_settings: Build) -> None:
    providers = Providers(providers_settings(backend("up", fake)))
    fake.push(Reply.error(500, "boom"), Reply.error(529 if fake.kind == "anthropic" else 502, "overloaded"))
    try:
        generation = await _generate(providers)
    finally:
        await providers.aclose()
    assert len(fake.requests()) == 3
    assert [a.http_status for a in generation.attempts] == [500, 529 if fake.kind == "anthropic" else 502, 200]
    assert [a.error is None for a in generation.attempts] == [False, False, True]


async def test_retries_stop_after_max_retries(fake: FakeProvider, providers_settings: Build) -> None:
    providers = Providers(providers_settings(backend("up", fake)))
    fake.push(*[Reply.error(503, "down")] * 10)
    ctx = CallContext()
    try:
        with pytest.raises(AgentmeshError) as caught:
            await _generate(providers, ctx)
    finally:
        await providers.aclose()
    assert caught.value.code == ErrorCode.UPSTREAM_UNAVAILABLE
    assert len(fake.requests()) == 1 + FAST_RETRY["max_retries"] == len(ctx.attempts)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_4xx_is_never_retried(fake: FakeProvider, providers_settings: Build, status: int) -> None:
    providers = Providers(providers_settings(backend("up", fake)))
    fake.push(Reply.error(status, "no"))
    try:
        with pytest.raises(AgentmeshError):
            await _generate(providers)
    finally:
        await providers.aclose()
    assert len(fake.requests()) == 1


async def test_malformed_body_is_not_retried(fake: FakeProvider, providers_settings: Build) -> None:
    providers = Providers(providers_settings(backend("up", fake)))
    fake.push(Reply(raw_body=b"garbage"))
    try:
        with pytest.raises(AgentmeshError):
            await _generate(providers)
    finally:
        await providers.aclose()
    assert len(fake.requests()) == 1


async def test_429_retry_after_is_honoured(fake: FakeProvider, providers_settings: Build) -> None:
    # base/cap are 10-50 ms, so a wait of 0.3 s can only come from the Retry-After header.
    providers = Providers(providers_settings(backend("up", fake)))
    fake.push(Reply.error(429, "slow down", headers={"retry-after": "0.3"}))
    started = time.monotonic()
    try:
        await _generate(providers)
    finally:
        await providers.aclose()
    waited = time.monotonic() - started
    assert len(fake.requests()) == 2
    assert waited >= 0.3


async def test_no_retry_when_the_deadline_would_pass_first(fake: FakeProvider, providers_settings: Build) -> None:
    providers = Providers(providers_settings(backend("up", fake)))
    fake.push(Reply.error(429, "slow down", headers={"retry-after": "5"}))
    ctx = CallContext.with_timeout(2.0)
    try:
        with pytest.raises(AgentmeshError) as caught:
            await _generate(providers, ctx)
    finally:
        await providers.aclose()
    assert caught.value.code == ErrorCode.RATE_LIMITED and caught.value.retry_after == 5
    assert len(fake.requests()) == 1
    remaining = ctx.remaining()
    assert remaining is not None and remaining > 1.0  # failed at once, did not sleep


async def test_retry_after_beyond_the_cap_is_returned_to_the_caller(
    fake: FakeProvider, providers_settings: Build
) -> None:
    section = backend("up", fake, retry={**FAST_RETRY, "max_retry_after_s": 1})
    providers = Providers(providers_settings(section))
    fake.push(Reply.error(429, "quota", headers={"retry-after": "120"}))
    try:
        with pytest.raises(AgentmeshError) as caught:
            await _generate(providers)
    finally:
        await providers.aclose()
    assert caught.value.retry_after == 120 and len(fake.requests()) == 1


async def test_stream_is_retried_only_before_its_first_event(fake: FakeProvider, providers_settings: Build) -> None:
    providers = Providers(providers_settings(backend("up", fake)))
    fake.push(Reply.error(503, "down"), Reply(text="fine"))
    try:
        events = [e async for e in providers.generate_stream(REQUEST, CallContext(), model="up/m1")]
        assert events[-1].response.message.content == "fine"  # type: ignore[union-attr]
        assert len(fake.requests()) == 2
        fake.push(Reply(text="partial", stream_cut=True), Reply(text="never"))
        with pytest.raises(AgentmeshError):
            async for _ in providers.generate_stream(REQUEST, CallContext(), model="up/m1"):
                pass
        assert len(fake.requests()) == 3
    finally:
        await providers.aclose()


async def test_concurrency_is_bounded_per_backend(providers_settings: Build) -> None:
    with FakeProvider("openai", default=Reply(delay_s=0.15)) as fake:
        providers = Providers(providers_settings(backend("up", fake, concurrency=2)))
        in_flight = 0
        peak = 0
        original = providers.model("up/m1")

        # Counts how many upstream requests the fake is serving at once.
        async def probe() -> None:
            nonlocal in_flight, peak
            while True:
                served = len(fake.requests())
                finished = sum(1 for t in tasks if t.done())
                in_flight = served - finished
                peak = max(peak, in_flight)
                await asyncio.sleep(0.01)

        tasks = [asyncio.create_task(_generate(providers)) for _ in range(6)]
        watcher = asyncio.create_task(probe())
        try:
            await asyncio.gather(*tasks)
        finally:
            watcher.cancel()
            await providers.aclose()
        assert original is providers.model("up/m1")
        assert len(fake.requests()) == 6
        assert peak <= 2


async def test_rate_limit_bucket_is_per_api_key_in_redis(store: Store, providers_settings: Build) -> None:
    with FakeProvider("openai") as fake:
        section = backend("up", fake, rate_limit_per_min=60, rate_limit_burst=2, rate_limit_max_wait_s=0)
        providers = Providers(providers_settings(section), store=store)
        try:
            await _generate(providers)
            await _generate(providers)
            with pytest.raises(AgentmeshError) as caught:
                await _generate(providers)
        finally:
            await providers.aclose()
        assert caught.value.code == ErrorCode.RATE_LIMITED
        assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= 1.0
        assert caught.value.metadata["limiter"] == "agentmesh"
        assert len(fake.requests()) == 2  # the third never left
        keys = [k.decode() async for k in store.redis.scan_iter("am:rl:*")]
        assert len(keys) == 1 and "sk-test" not in keys[0]


async def test_rate_limit_waits_for_a_token_within_its_budget(store: Store, providers_settings: Build) -> None:
    with FakeProvider("openai") as fake:
        # 600/min = one token per 0.1 s; burst 1: the second call waits ~0.1 s, then goes.
        section = backend("up", fake, rate_limit_per_min=600, rate_limit_burst=1, rate_limit_max_wait_s=2)
        providers = Providers(providers_settings(section), store=store)
        try:
            await _generate(providers)
            await _generate(providers)
        finally:
            await providers.aclose()
        assert len(fake.requests()) == 2


async def test_final_stream_event_is_a_generation(providers_settings: Build) -> None:
    providers = Providers(providers_settings())
    events = [e async for e in providers.generate_stream(REQUEST, CallContext(), model="scripted/default")]
    assert not any(isinstance(e, StreamFinal) for e in events)
    assert events[-1].response.model == "scripted/default"  # type: ignore[union-attr]
