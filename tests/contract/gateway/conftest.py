"""Fixtures of the gateway tests: provider_svc with its HTTP listener (the compatible endpoints), the fake
upstreams (checked against the official SDKs), API keys minted in the test Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from agentmesh.apikeys import ApiKeys
from agentmesh.config import QuotaLimits
from provider_svc.server import SPEC
from tests.conftest import RunningService
from tests.contract.provider.conftest import (  # the fakes' fixtures, for these tests too
    ANTHROPIC_KEY,
    FAST_RETRY,
    OPENAI_KEY,
    anthropic_fake,
    openai_fake,
)
from tests.contract.provider.fakes import FakeProvider

__all__ = ["anthropic_fake", "openai_fake"]

Start = Callable[..., Awaitable[RunningService]]

SCRIPTED = {
    "name": "scripted",
    "type": "scripted",
    "rate_limit_per_min": None,
    "models": [{"name": "default", "input_price_per_mtok": 1.0, "output_price_per_mtok": 2.0}],
}


def upstream(name: str, fake: FakeProvider, **extra: Any) -> dict[str, Any]:
    section: dict[str, Any] = {
        "name": name,
        "type": fake.kind,
        "base_url": fake.base_url,
        "api_key": OPENAI_KEY if fake.kind == "openai" else ANTHROPIC_KEY,
        "retry": FAST_RETRY,
        "rate_limit_per_min": None,
        "models": [{"name": "m1", "input_price_per_mtok": 2.0, "output_price_per_mtok": 8.0}],
    }
    section.update(extra)
    return section


def gateway_config(
    *backends: dict[str, Any], gateway: dict[str, Any] | None = None, **providers: Any
) -> dict[str, Any]:
    return {
        "providers": {"backends": [*backends, SCRIPTED], "default_model": "scripted/default", **providers},
        "gateway": gateway or {},
    }


@dataclass
class Gateway:
    """provider_svc with its HTTP listener."""

    svc: RunningService

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.svc.host.http_port}"

    @property
    def keys(self) -> ApiKeys:
        assert self.svc.host.store is not None
        return ApiKeys(self.svc.host.store)

    async def key(self, agent: str = "app", *, limits: QuotaLimits | None = None, **kw: Any) -> str:
        key, _ = await self.keys.create(agent_id=agent, environment=self.svc.settings.environment, limits=limits, **kw)
        return key


@pytest.fixture
async def start_gateway(start_service: Start) -> AsyncIterator[Callable[..., Awaitable[Gateway]]]:
    async def start(config: dict[str, Any]) -> Gateway:
        return Gateway(await start_service(SPEC, config, http=True))

    yield start
