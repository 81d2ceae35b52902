"""provider_svc's metrics without gRPC: every reply's tokens and cost, by the agent billed, provider and model."""

from __future__ import annotations

import pytest

from agentmesh.chat import Role
from agentmesh.config import ProvidersSettings
from provider_svc.models.base import CallContext, Message, ModelRequest
from provider_svc.service import Providers
from tests.metricsutil import recorded_metrics


async def test_tokens_and_cost_per_agent_and_model() -> None:
    got = recorded_metrics()
    settings = ProvidersSettings.model_validate(
        {
            "default_model": "scripted/priced",
            "backends": [
                {
                    "name": "scripted",
                    "type": "scripted",
                    "rate_limit_per_min": None,
                    "models": [{"name": "priced", "input_price_per_mtok": 2.0, "output_price_per_mtok": 8.0}],
                }
            ],
        }
    )
    providers = Providers(settings, metrics=got.metrics)
    try:
        request = ModelRequest((Message(Role.USER, "say hello"),))
        first = await providers.generate(request, CallContext(agent_id="ops"))
        second = await providers.generate(request, CallContext(agent_id="ops"))
        other = await providers.generate(request, CallContext(agent_id="billing"))
    finally:
        await providers.aclose()
    used_in = first.response.usage.input_tokens + second.response.usage.input_tokens
    used_out = first.response.usage.output_tokens + second.response.usage.output_tokens
    assert used_in > 0 and used_out > 0
    tokens = "agentmesh.gen_ai.tokens"
    assert got.value(tokens, agent="ops", provider="scripted", model="priced", type="input") == used_in
    assert got.value(tokens, agent="ops", type="output") == used_out
    assert got.value(tokens, agent="billing", type="input") == other.response.usage.input_tokens
    assert got.value("agentmesh.gen_ai.cost", agent="ops", model="priced") == pytest.approx(
        first.cost_usd + second.cost_usd
    )
    assert first.cost_usd == pytest.approx(
        (first.response.usage.input_tokens * 2 + first.response.usage.output_tokens * 8) / 1e6
    )


async def test_the_agent_label_comes_from_the_identity_never_the_request() -> None:
    """Issue 39: an operator's request named any `agent_id` (300 characters, unbounded values) and it
    became the metric's label. With an identity, the label is its agent id ("" for an operator)."""
    got = recorded_metrics()
    settings = ProvidersSettings.model_validate(
        {"default_model": "scripted/default", "backends": [{"name": "scripted", "type": "scripted"}]}
    )
    providers = Providers(settings, metrics=got.metrics)
    request = ModelRequest((Message(Role.USER, "say hello"),))
    try:
        await providers.generate(request, CallContext(agent_id="x" * 300, metric_agent=""))
        await providers.generate(request, CallContext(agent_id="ops", metric_agent="ops"))
    finally:
        await providers.aclose()
    assert got.value("agentmesh.gen_ai.tokens", agent="x" * 300, type="input") == 0
    assert got.value("agentmesh.gen_ai.tokens", agent="", type="input") > 0
    assert got.value("agentmesh.gen_ai.tokens", agent="ops", type="input") > 0
