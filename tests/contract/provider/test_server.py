"""provider_svc through real gRPC: generation, streaming, listing, usage, error statuses, fallbacks."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import timestamp_pb2

from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error, rich_details
from agentmesh.v1 import common_pb2, provider_pb2, provider_pb2_grpc
from provider_svc.server import SPEC
from tests.conftest import RunningService
from tests.contract.provider.conftest import FAST_RETRY, OPENAI_KEY, backend
from tests.contract.provider.fakes import FakeProvider, Reply

Start = Callable[..., Awaitable[RunningService]]

SCRIPTED = {"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": [{"name": "default"}]}


def _providers(*backends: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"providers": {"backends": [*backends, SCRIPTED], "default_model": "scripted/default", **extra}}


def _request(model: str = "", text: str = "hello", **kw: Any) -> provider_pb2.GenerateRequest:
    return provider_pb2.GenerateRequest(
        model=model, messages=[common_pb2.Message(role=common_pb2.ROLE_USER, content=text)], **kw
    )


def _stub(svc: RunningService) -> provider_pb2_grpc.ProviderServiceStub:
    return provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]


async def test_generate_with_the_scripted_default_and_usage_is_recorded(start_service: Start) -> None:
    svc = await start_service(SPEC, _providers())
    stub = _stub(svc)
    md = svc.metadata(agent_id="agent-a")
    reply = await stub.Generate(_request(text="Say hello"), metadata=md)
    assert reply.model == "scripted/default"
    assert reply.finish_reason == provider_pb2.FINISH_REASON_STOP
    assert "Say hello" in reply.message.content
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    assert len(reply.attempts) == 1 and not reply.attempts[0].HasField("error")

    usage = await stub.GetUsage(provider_pb2.GetUsageRequest(), metadata=svc.metadata(roles=("operator",)))
    assert [(r.agent_id, r.provider, r.model, r.calls) for r in usage.rows] == [("agent-a", "scripted", "default", 1)]
    assert usage.rows[0].usage.input_tokens == reply.usage.input_tokens


async def test_generate_through_openai_fake_with_cost_and_tool_round_trip(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    svc = await start_service(SPEC, _providers(backend("openai", openai_fake)))
    args = '{"order_id": 123456789012345678901234567890, "note": "caf\\u00e9"}'
    openai_fake.push(Reply(text="", tool_calls=[("get_order", args)], usage=(1000, 500)))
    tool = common_pb2.ToolSpec(
        name="get_order",
        description="use when looking up an order",
        input_schema_json=json.dumps({"type": "object", "properties": {"order_id": {"type": "integer"}}}),
    )
    reply = await _stub(svc).Generate(_request("openai/m1", tools=[tool]), metadata=svc.metadata(agent_id="a1"))
    assert reply.finish_reason == provider_pb2.FINISH_REASON_TOOL_CALLS
    assert reply.message.tool_calls[0].arguments_json == args  # byte for byte
    assert reply.cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)
    sent = openai_fake.requests()[-1].json()
    assert sent["tools"][0]["function"]["name"] == "get_order"


async def test_generate_stream_ends_with_the_final_reply(start_service: Start, anthropic_fake: FakeProvider) -> None:
    svc = await start_service(SPEC, _providers(backend("claude", anthropic_fake)))
    anthropic_fake.push(Reply(text="streamed text", tool_calls=[("lookup", '{"id": 9007199254740993}')]))
    events = [
        e
        async for e in _stub(svc).GenerateStream(
            provider_pb2.GenerateStreamRequest(request=_request("claude/m1")), metadata=svc.metadata(agent_id="a1")
        )
    ]
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "final" and "text_delta" in kinds and "tool_call_delta" in kinds
    text = "".join(e.text_delta for e in events if e.WhichOneof("event") == "text_delta")
    args = "".join(e.tool_call_delta.arguments_delta for e in events if e.WhichOneof("event") == "tool_call_delta")
    final = events[-1].final
    assert text == final.message.content == "streamed text"
    assert args == final.message.tool_calls[0].arguments_json == '{"id": 9007199254740993}'
    assert final.usage.input_tokens == 11 and final.usage.output_tokens == 7


async def test_list_models_shows_aliases_routes_prices_and_unavailable_keyless_backends(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    keyless = backend("anthropic", openai_fake, type="anthropic", api_key="")
    with_alias = backend("openai", openai_fake, models=[{"name": "m1", "aliases": ["fast"], "input_price_per_mtok": 1}])
    svc = await start_service(SPEC, _providers(with_alias, keyless, routing={"code": "fast"}))
    listing = await _stub(svc).ListModels(provider_pb2.ListModelsRequest(), metadata=svc.metadata())
    models = {m.name: m for m in listing.models}
    assert set(models) == {"openai/m1", "anthropic/m1", "scripted/default"}
    assert list(models["openai/m1"].aliases) == ["fast"] and models["openai/m1"].input_price_per_mtok == 1
    assert not models["openai/m1"].unavailable
    assert models["anthropic/m1"].unavailable and "API key" in models["anthropic/m1"].unavailable_reason
    assert dict(listing.routes) == {"code": "fast"}
    assert OPENAI_KEY not in str(listing)


@pytest.mark.parametrize(
    ("reply", "status", "code"),
    [
        (Reply.error(429, "slow down", error_type="rate_limit_error", headers={"retry-after": "30"}),
         grpc.StatusCode.RESOURCE_EXHAUSTED, ErrorCode.RATE_LIMITED),
        (Reply.error(503, "down", error_type="server_error"), grpc.StatusCode.UNAVAILABLE,
         ErrorCode.UPSTREAM_UNAVAILABLE),
        (Reply.error(400, "bad", error_type="invalid_request_error"), grpc.StatusCode.INVALID_ARGUMENT,
         ErrorCode.UPSTREAM_REJECTED),
        (Reply.error(400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded"),
         grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.CONTEXT_LENGTH_EXCEEDED),
        (Reply.error(401, "Incorrect API key provided", error_type="invalid_request_error"),
         grpc.StatusCode.FAILED_PRECONDITION, ErrorCode.PROVIDER_AUTH_FAILED),
        (Reply.error(403, "forbidden", error_type="permission_error"), grpc.StatusCode.FAILED_PRECONDITION,
         ErrorCode.PROVIDER_AUTH_FAILED),
        (Reply.error(404, "no such model", error_type="not_found_error"), grpc.StatusCode.NOT_FOUND,
         ErrorCode.UPSTREAM_NOT_FOUND),
        (Reply(raw_body=b"<html>proxy error</html>"), grpc.StatusCode.UNAVAILABLE, ErrorCode.UPSTREAM_UNAVAILABLE),
        (Reply(delay_s=1.0), grpc.StatusCode.DEADLINE_EXCEEDED, ErrorCode.UPSTREAM_TIMEOUT),
    ],
    ids=["429", "503", "400", "context-length", "401", "403", "404", "malformed", "timeout"],
)  # fmt: skip
async def test_upstream_failures_become_rich_grpc_statuses(
    start_service: Start, openai_fake: FakeProvider, reply: Reply, status: grpc.StatusCode, code: ErrorCode
) -> None:
    section = backend("openai", openai_fake, retry={**FAST_RETRY, "max_retries": 0}, timeouts={"read_s": 0.3})
    svc = await start_service(SPEC, _providers(section))
    openai_fake.push(reply)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Generate(_request("openai/m1"), metadata=svc.metadata(), timeout=10)
    assert caught.value.code() == status
    err = from_rpc_error(caught.value)
    assert err.code == code
    assert err.metadata["attempts"].startswith("openai/m1: " + code.name)
    if code == ErrorCode.RATE_LIMITED:
        rich = rich_details(caught.value)
        assert rich.retry_info is not None and rich.retry_info.retry_delay.seconds == 30
    assert OPENAI_KEY not in str(caught.value.details()) + repr(err.metadata)


async def test_fallback_moves_on_after_unavailable_and_lists_every_attempt(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    section = backend("openai", openai_fake, retry={**FAST_RETRY, "max_retries": 1})
    svc = await start_service(SPEC, _providers(section, fallbacks={"openai/m1": ["scripted/default"]}))
    openai_fake.push(Reply.error(503, "down"), Reply.error(502, "still down"))
    reply = await _stub(svc).Generate(_request("openai/m1"), metadata=svc.metadata())
    assert reply.model == "scripted/default"
    tried = [(a.model, a.http_status, a.error.code) for a in reply.attempts]
    assert tried == [
        ("openai/m1", 503, common_pb2.ERROR_CODE_UPSTREAM_UNAVAILABLE),
        ("openai/m1", 502, common_pb2.ERROR_CODE_UPSTREAM_UNAVAILABLE),
        ("scripted/default", 0, common_pb2.ERROR_CODE_UNSPECIFIED),
    ]
    assert len(openai_fake.requests()) == 2


async def test_fallback_does_not_move_on_after_a_rejected_request(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    svc = await start_service(
        SPEC, _providers(backend("openai", openai_fake), fallbacks={"openai/m1": ["scripted/default"]})
    )
    openai_fake.push(Reply.error(400, "unknown parameter", error_type="invalid_request_error"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Generate(_request("openai/m1"), metadata=svc.metadata())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert from_rpc_error(caught.value).metadata["attempt_count"] == "1"


async def test_fallback_does_not_move_on_after_our_own_invalid_request(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    svc = await start_service(
        SPEC, _providers(backend("openai", openai_fake), fallbacks={"openai/m1": ["scripted/default"]})
    )
    request = _request("openai/m1", sampling=provider_pb2.SamplingParams(temperature=5.0))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Generate(request, metadata=svc.metadata())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert from_rpc_error(caught.value).code == ErrorCode.INVALID_REQUEST
    assert openai_fake.requests() == []


async def test_keyless_backend_falls_back_offline(start_service: Start, openai_fake: FakeProvider) -> None:
    keyless = backend("openai", openai_fake, api_key="")
    svc = await start_service(SPEC, _providers(keyless, fallbacks={"openai/m1": ["scripted/default"]}))
    reply = await _stub(svc).Generate(_request("openai/m1"), metadata=svc.metadata())
    assert reply.model == "scripted/default"
    assert reply.attempts[0].error.code == common_pb2.ERROR_CODE_PROVIDER_AUTH_FAILED
    assert openai_fake.requests() == []


async def test_routing_by_task_tag_and_alias(start_service: Start, openai_fake: FakeProvider) -> None:
    with_alias = backend("openai", openai_fake, models=[{"name": "m1", "aliases": ["cheap"]}])
    svc = await start_service(SPEC, _providers(with_alias, routing={"intent": "cheap"}))
    stub = _stub(svc)
    by_tag = await stub.Generate(_request(task_tag="intent"), metadata=svc.metadata())
    by_alias = await stub.Generate(_request("cheap"), metadata=svc.metadata())
    unknown_tag = await stub.Generate(_request(task_tag="poetry"), metadata=svc.metadata())
    assert (by_tag.model, by_alias.model, unknown_tag.model) == ("openai/m1", "openai/m1", "scripted/default")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(_request("nope/x"), metadata=svc.metadata())
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "scripted/default" in (caught.value.details() or "")


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (provider_pb2.GenerateRequest(), "messages"),
        (provider_pb2.GenerateRequest(messages=[common_pb2.Message(content="x")]), "messages[0].role"),
        (_request(tools=[common_pb2.ToolSpec(name="t", input_schema_json="{not json")]), "tools[0].input_schema_json"),
        (_request(tools=[common_pb2.ToolSpec(name="t"), common_pb2.ToolSpec(name="t")]), "tools"),
        (_request(response_schema_json="[1]"), "response_schema_json"),
        (_request(tool_choice=provider_pb2.ToolChoice(mode=provider_pb2.TOOL_CHOICE_MODE_REQUIRED)), "tool_choice"),
        (_request(sampling=provider_pb2.SamplingParams(top_p=1.5)), "sampling.top_p"),
    ],
    ids=["no-messages", "no-role", "schema-not-json", "duplicate-tools", "response-schema", "choice-no-tools", "top_p"],
)
async def test_bad_requests_are_invalid_argument_naming_the_field(
    start_service: Start, request_: provider_pb2.GenerateRequest, field: str
) -> None:
    svc = await start_service(SPEC, _providers())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Generate(request_, metadata=svc.metadata())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = from_rpc_error(caught.value)
    assert err.code == ErrorCode.INVALID_REQUEST and err.violations[0].path == field


async def test_agent_id_must_match_the_identity(start_service: Start) -> None:
    svc = await start_service(SPEC, _providers())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Generate(_request(agent_id="someone-else"), metadata=svc.metadata(agent_id="me"))
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_unauthenticated_calls_are_refused(start_service: Start) -> None:
    svc = await start_service(SPEC, _providers())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Generate(_request())
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_get_usage_filters_and_agents_see_only_their_own(start_service: Start) -> None:
    svc = await start_service(SPEC, _providers())
    stub = _stub(svc)
    for agent in ("a1", "a2", "a2"):
        await stub.Generate(_request(), metadata=svc.metadata(agent_id=agent))
    operator = svc.metadata(roles=("operator",))
    everyone = await stub.GetUsage(provider_pb2.GetUsageRequest(), metadata=operator)
    assert {(r.agent_id, r.calls) for r in everyone.rows} == {("a1", 1), ("a2", 2)}
    only_a2 = await stub.GetUsage(provider_pb2.GetUsageRequest(agent_id="a2"), metadata=operator)
    assert [r.agent_id for r in only_a2.rows] == ["a2"]
    own = await stub.GetUsage(provider_pb2.GetUsageRequest(), metadata=svc.metadata(agent_id="a1"))
    assert [(r.agent_id, r.calls) for r in own.rows] == [("a1", 1)]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetUsage(provider_pb2.GetUsageRequest(agent_id="a2"), metadata=svc.metadata(agent_id="a1"))
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    past = timestamp_pb2.Timestamp(seconds=86400 * 365)
    old = await stub.GetUsage(provider_pb2.GetUsageRequest(end_time=past), metadata=operator)
    assert list(old.rows) == []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        bad = provider_pb2.GetUsageRequest(start_time=timestamp_pb2.Timestamp(seconds=10**9), end_time=past)
        await stub.GetUsage(bad, metadata=operator)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
