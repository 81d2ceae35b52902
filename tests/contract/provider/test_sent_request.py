"""GenerateRequest.include_request (issue 24): the upstream request as sent, secrets masked, returned with
the reply; checked against the bodies the fake OpenAI and Anthropic servers captured."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from agentmesh.redact import MASK
from agentmesh.v1 import common_pb2, provider_pb2, provider_pb2_grpc
from provider_svc.models.base import SentRequest
from provider_svc.recording import RequestRecorder
from provider_svc.server import SPEC
from tests.conftest import RunningService
from tests.contract.provider.conftest import backend
from tests.contract.provider.fakes import FakeProvider, Reply

Start = Callable[..., Awaitable[RunningService]]
SCRIPTED = {"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": [{"name": "default"}]}
PASTED = "postgres://app:hunter2-Sup3rSecret@db.internal:5432/orders"


def _providers(*backends: dict[str, Any]) -> dict[str, Any]:
    return {"providers": {"backends": [*backends, SCRIPTED], "default_model": "scripted/default"}}


def _request(model: str, **kw: Any) -> provider_pb2.GenerateRequest:
    call = common_pb2.ToolCall(id="c1", name="lookup", arguments_json='{"id": 12345678901234567890, "price": 1.50}')
    messages = [
        common_pb2.Message(role=common_pb2.ROLE_SYSTEM, content="Be brief."),
        common_pb2.Message(role=common_pb2.ROLE_USER, content=f"Why does {PASTED} time out?"),
        common_pb2.Message(role=common_pb2.ROLE_ASSISTANT, tool_calls=[call]),
        common_pb2.Message(role=common_pb2.ROLE_TOOL, content="pool exhausted", tool_call_id="c1", name="lookup"),
    ]
    tool = common_pb2.ToolSpec(
        name="lookup",
        description="use when looking up an order",
        input_schema_json=json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}}),
    )
    sampling = provider_pb2.SamplingParams(temperature=0.25, max_tokens=77)
    return provider_pb2.GenerateRequest(model=model, messages=messages, tools=[tool], sampling=sampling, **kw)


def _stub(svc: RunningService) -> provider_pb2_grpc.ProviderServiceStub:
    return provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]


def _masked(kind: str, body: bytes) -> str:
    return RequestRecorder().record_now(SentRequest(kind, lambda: body)).body_json


async def test_the_request_as_the_fakes_received_it(
    start_service: Start, openai_fake: FakeProvider, anthropic_fake: FakeProvider
) -> None:
    svc = await start_service(SPEC, _providers(backend("openai", openai_fake), backend("claude", anthropic_fake)))
    md = svc.metadata(agent_id="a1")
    for fake, model, fmt in (
        (openai_fake, "openai/m1", "openai.chat.completions"),
        (anthropic_fake, "claude/m1", "anthropic.messages"),
    ):
        fake.push(Reply(text="fine"))
        reply = await _stub(svc).Generate(_request(model, include_request=True), metadata=md)
        captured = fake.requests()[-1].body
        assert reply.request_format == fmt and reply.request_redacted
        assert reply.request_json == _masked(fmt, captured)  # byte for byte, but for the password
        assert PASTED in captured.decode() and "hunter2" not in reply.request_json
        assert reply.request_json == captured.decode().replace(PASTED, f"postgres://app:{MASK}@db.internal:5432/orders")
        # Numbers verbatim: the huge id and 1.50 as they were written.
        assert "12345678901234567890" in reply.request_json and "1.50" in reply.request_json

        # Not asked: not sent back.
        fake.push(Reply(text="fine"))
        plain = await _stub(svc).Generate(_request(model), metadata=md)
        assert (plain.request_json, plain.request_format, plain.request_redacted) == ("", "", False)

        # Streaming: the final reply carries the streamed request (with "stream": true).
        fake.push(Reply(text="streamed"))
        stream = _stub(svc).GenerateStream(
            provider_pb2.GenerateStreamRequest(request=_request(model, include_request=True)), metadata=md
        )
        events = [e async for e in stream]
        final = events[-1].final
        assert final.request_json == _masked(fmt, fake.requests()[-1].body)
        assert json.loads(final.request_json)["stream"] is True


async def test_a_clean_request_is_returned_unchanged_and_the_scripted_model_gives_its_equivalent(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    svc = await start_service(SPEC, _providers(backend("openai", openai_fake)))
    md = svc.metadata(agent_id="a1")
    openai_fake.push(Reply(text="ok"))
    clean = provider_pb2.GenerateRequest(
        model="openai/m1",
        messages=[common_pb2.Message(role=common_pb2.ROLE_USER, content="héllo, 世界")],
        include_request=True,
    )
    reply = await _stub(svc).Generate(clean, metadata=md)
    assert reply.request_json == openai_fake.requests()[-1].body.decode() and not reply.request_redacted

    scripted = await _stub(svc).Generate(_request("scripted/default", include_request=True), metadata=md)
    body = json.loads(scripted.request_json)
    assert scripted.request_format == "openai.chat.completions" and scripted.request_redacted
    assert body["model"] == "default" and body["max_tokens"] == 77 and body["temperature"] == 0.25
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert body["tools"][0]["function"]["name"] == "lookup" and "hunter2" not in scripted.request_json
