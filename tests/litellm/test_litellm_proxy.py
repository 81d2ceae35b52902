"""LiteLLM's proxy, pointed at provider_svc's `/v1/chat/completions` as an OpenAI upstream with an agentmesh
API key, serves a chat and a stream through us (issue 43): a real third-party client. The official
`openai` SDK talks to LiteLLM; our usage ledger shows the calls under the key.

Needs `.venv-litellm` (`make litellm-venv`); `make test-litellm` runs it with LITELLM_REQUIRED=1, where a
missing venv fails instead of skipping."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import openai
import pytest

from agentmesh.config import QuotaLimits
from agentmesh.v1 import provider_pb2, provider_pb2_grpc
from tests.contract.gateway.conftest import Gateway, gateway_config, start_gateway
from tests.litellm.proxy import LiteLLMProxy, available

__all__ = ["start_gateway"]

pytestmark = pytest.mark.skipif(
    not available() and os.environ.get("LITELLM_REQUIRED") != "1",
    reason="LiteLLM's venv is missing: make litellm-venv (make test-litellm requires it)",
)


async def test_litellm_proxy_serves_a_chat_and_a_stream_through_us(start_gateway: Any, tmp_path: Path) -> None:
    assert available(), "run `make litellm-venv` first"
    gw: Gateway = await start_gateway(gateway_config())
    key, record = await gw.keys.create(agent_id="litellm-client", environment="dev", limits=QuotaLimits(rpm=100))
    proxy = LiteLLMProxy(tmp_path, {"via-agentmesh": ("scripted/default", f"{gw.base_url}/v1", key)})
    await asyncio.to_thread(proxy.start)
    try:
        client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0)
        messages: Any = [{"role": "user", "content": "Summarize the order ORD-42 for me"}]
        chat = await client.chat.completions.create(model="via-agentmesh", messages=messages)
        assert chat.choices[0].message.content == "Answer: Summarize the order ORD-42 for me"
        stream = await client.chat.completions.create(model="via-agentmesh", messages=messages, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == chat.choices[0].message.content
    finally:
        await asyncio.to_thread(proxy.stop)
    stub = provider_pb2_grpc.ProviderServiceStub(gw.svc.channel)  # type: ignore[no-untyped-call]
    rows = (await stub.GetUsage(provider_pb2.GetUsageRequest(), metadata=gw.svc.metadata(roles=("operator",)))).rows
    assert [(r.agent_id, r.api_key_id, r.calls) for r in rows] == [("litellm-client", record.key_id, 2)]
