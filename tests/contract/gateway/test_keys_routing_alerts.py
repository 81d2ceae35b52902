"""API keys on gRPC, price routing (cheapest healthy model carrying the tags, visible in the span and the
usage record), per-agent budgets on Generate, and spend alerts (audit, metric, webhook on the allowlist)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import grpc
import httpx
import pytest

from agentmesh.audit import AuditLog
from agentmesh.config import QuotaLimits
from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import common_pb2, provider_pb2, provider_pb2_grpc
from tests.contract.gateway.conftest import SCRIPTED, Gateway, gateway_config, upstream
from tests.contract.provider.fakes import FakeProvider, Reply


def _request(model: str = "", text: str = "hello", **kw: Any) -> provider_pb2.GenerateRequest:
    return provider_pb2.GenerateRequest(
        model=model, messages=[common_pb2.Message(role=common_pb2.ROLE_USER, content=text)], **kw
    )


def _stub(gw: Gateway) -> provider_pb2_grpc.ProviderServiceStub:
    return provider_pb2_grpc.ProviderServiceStub(gw.svc.channel)  # type: ignore[no-untyped-call]


async def _usage(gw: Gateway) -> list[Any]:
    reply = await _stub(gw).GetUsage(provider_pb2.GetUsageRequest(), metadata=gw.svc.metadata(roles=("operator",)))
    return list(reply.rows)


async def test_an_api_key_works_on_grpc_with_its_quotas_and_stops_when_revoked(start_gateway: Any) -> None:
    gw: Gateway = await start_gateway(gateway_config())
    key, record = await gw.keys.create(agent_id="billing-bot", environment="dev", limits=QuotaLimits(rpm=2))
    bearer = (("authorization", f"Bearer {key}"),)
    reply = await _stub(gw).Generate(_request(text="hi"), metadata=bearer)
    assert reply.model == "scripted/default"
    rows = await _usage(gw)
    assert [(r.agent_id, r.api_key_id) for r in rows] == [("billing-bot", record.key_id)]
    # The key bills its own agent only, like any agent token.
    with pytest.raises(grpc.aio.AioRpcError) as other:
        await _stub(gw).Generate(_request(agent_id="someone-else"), metadata=bearer)
    assert other.value.code() == grpc.StatusCode.PERMISSION_DENIED
    await _stub(gw).Generate(_request(), metadata=bearer)
    with pytest.raises(grpc.aio.AioRpcError) as limited:
        await _stub(gw).Generate(_request(), metadata=bearer)
    assert limited.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert from_rpc_error(limited.value).retry_after  # RetryInfo
    await gw.keys.revoke(record.key_id)
    with pytest.raises(grpc.aio.AioRpcError) as revoked:
        await _stub(gw).Generate(_request(), metadata=bearer)  # at once: the reservation reads the record
    assert revoked.value.code() == grpc.StatusCode.UNAUTHENTICATED and "revoked" in (revoked.value.details() or "")


async def test_an_agents_budget_stops_generate_with_budget_exceeded(start_gateway: Any) -> None:
    gw: Gateway = await start_gateway(gateway_config(gateway={"agents": {"ops": {"budget_usd_day": 0.00001}}}))
    with pytest.raises(grpc.aio.AioRpcError) as over:
        await _stub(gw).Generate(
            _request(sampling=provider_pb2.SamplingParams(max_tokens=1000)), metadata=gw.svc.metadata(agent_id="ops")
        )
    err = from_rpc_error(over.value)
    assert over.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.code == ErrorCode.BUDGET_EXCEEDED and err.error_class.name == "FATAL"
    assert err.metadata["scope"] == "agent:ops" and err.metadata["resets_at"]
    # Another agent has no budget configured: unaffected.
    assert (await _stub(gw).Generate(_request(), metadata=gw.svc.metadata(agent_id="dev"))).model


PRICED = {
    "name": "cheapmodels",
    "type": "scripted",
    "rate_limit_per_min": None,
    "models": [
        {"name": "big", "input_price_per_mtok": 10.0, "output_price_per_mtok": 30.0, "tags": ["summarize", "code"]},
        {"name": "small", "input_price_per_mtok": 0.1, "output_price_per_mtok": 0.4, "tags": ["summarize"]},
    ],
}


async def test_price_routing_picks_the_cheapest_healthy_tagged_model(
    start_gateway: Any, openai_fake: FakeProvider
) -> None:
    fake = upstream("fake", openai_fake)
    fake["models"] = [
        {"name": "m1", "input_price_per_mtok": 0.01, "output_price_per_mtok": 0.02, "tags": ["summarize"]}
    ]
    config = gateway_config(
        PRICED,
        fake,
        routing={"summarize": {"choose": "cheapest", "tags": ["summarize"]}, "code": "cheapmodels/big"},
        gateway={"health": {"failure_threshold": 1, "open_s": 60}},
    )
    gw: Gateway = await start_gateway(config)
    md = gw.svc.metadata(agent_id="writer")
    listed = await _stub(gw).ListModels(provider_pb2.ListModelsRequest(), metadata=md)
    assert listed.routes["summarize"] == "cheapest of tags [summarize]"
    assert {m.name: list(m.tags) for m in listed.models}["cheapmodels/small"] == ["summarize"]
    first = await _stub(gw).Generate(_request(task_tag="summarize", text="summarize this"), metadata=md)
    assert first.model == "fake/m1"  # cheapest of the three
    openai_fake.push(*[Reply.error(503, "down")] * 4)
    failed = await _stub(gw).Generate(_request(task_tag="summarize"), metadata=md)
    assert failed.model == "cheapmodels/small"  # fake/m1 failed: the route's next-cheapest answered
    third = await _stub(gw).Generate(_request(task_tag="summarize"), metadata=md)
    assert third.model == "cheapmodels/small"  # fake/m1's breaker is open: not even tried
    assert len(openai_fake.requests()) == 5
    code = await _stub(gw).Generate(_request(task_tag="code"), metadata=md)
    assert code.model == "cheapmodels/big"
    rows = {(r.task_tag, f"{r.provider}/{r.model}"): r.calls for r in await _usage(gw)}
    assert rows == {("summarize", "fake/m1"): 1, ("summarize", "cheapmodels/small"): 2, ("code", "cheapmodels/big"): 1}
    gw.svc.host.telemetry.force_flush()
    text = await asyncio.to_thread(Path(str(gw.svc.settings.telemetry.span_file)).read_text)
    spans = [json.loads(line) for line in text.splitlines()]
    chats = [s for s in spans if s["name"].startswith("chat ")]
    routed = [s["attributes"] for s in chats if s["attributes"].get("agentmesh.route.choice") == "cheapest"]
    assert routed and routed[-1]["agentmesh.route.task_tag"] == "summarize"
    assert routed[-1]["agentmesh.route.model"] == "cheapmodels/small"
    assert "fake/m1 (breaker open)" in routed[-1]["agentmesh.route.skipped"]


async def test_a_key_restricted_to_some_models_routes_among_those_only(start_gateway: Any) -> None:
    config = gateway_config(PRICED, routing={"summarize": {"choose": "cheapest", "tags": ["summarize"]}})
    gw: Gateway = await start_gateway(config)
    key = await gw.key(models=("cheapmodels/big",))
    reply = await _stub(gw).Generate(_request(task_tag="summarize"), metadata=(("authorization", f"Bearer {key}"),))
    assert reply.model == "cheapmodels/big"


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_spend_alerts_fire_once_per_threshold_to_audit_metric_and_webhook(start_gateway: Any) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hooks/spend"
    pricey = dict(
        SCRIPTED, models=[{"name": "default", "input_price_per_mtok": 1000.0, "output_price_per_mtok": 1000.0}]
    )
    config = {
        "providers": {"backends": [pricey], "default_model": "scripted/default"},
        "tools": {"http_allowlist": [f"http://127.0.0.1:{server.server_address[1]}/hooks/"]},
        "gateway": {"alerts": {"webhook_url": url}, "key_defaults": {"rpm": 1000}},
    }
    try:
        gw: Gateway = await start_gateway(config)
        key, record = await gw.keys.create(
            agent_id="spender", environment="dev", limits=QuotaLimits(budget_usd_month=0.2)
        )
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {key}"}) as client:
            statuses = []
            for i in range(40):
                r = await client.post(
                    f"{gw.base_url}/v1/chat/completions",
                    json={
                        "model": "scripted/default",
                        "max_tokens": 8,
                        "messages": [{"role": "user", "content": f"hi {i}"}],
                    },
                )
                statuses.append(r.status_code)
                if r.status_code != 200:
                    break
                await asyncio.sleep(0.01)  # let the settle land, as a real client's think time would
        assert statuses[-1] == 429
        for _ in range(100):
            if len(_Hook.received) >= 3:
                break
            await asyncio.sleep(0.05)
        assert [(a["scope"], a["period"], a["threshold_percent"]) for a in _Hook.received] == [
            (f"key:{record.key_id}", "month", 50),
            (f"key:{record.key_id}", "month", 80),
            (f"key:{record.key_id}", "month", 100),
        ]
        assert gw.svc.host.store is not None
        entries = await AuditLog(gw.svc.host.store).read(action="budget.alert")
        assert [e.outcome for e in entries] == ["50%", "80%", "100%"]
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{gw.base_url}/metrics")).text
        assert "agentmesh_gen_ai_budget_alerts_total{" in metrics and 'threshold="80"' in metrics
        assert f'scope="{record.key_id}"' in metrics  # spend against budget, per key
    finally:
        server.shutdown()
