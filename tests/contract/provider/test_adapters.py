"""The OpenAI and Anthropic adapters against local fakes speaking each wire format (SDK-validated).

Both protocols run through the same tests where the behaviour is the same; protocol specifics
(system prompt placement, tool_result blocks, max_tokens, 529, SSE event names) have their own.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode
from provider_svc.models._http import HttpBackend, HttpTimeouts
from provider_svc.models.anthropic import AnthropicModel
from provider_svc.models.base import (
    CallContext,
    FinishReason,
    Message,
    Model,
    ModelRequest,
    Role,
    Sampling,
    StreamEvent,
    StreamFinal,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolDef,
)
from provider_svc.models.openai import OpenAIModel
from tests.contract.provider.fakes import FakeProvider, Reply

BIG_ARGS = '{"order_id": 123456789012345678901234567890, "amount": 19.990, "tag": "\\u00e9t\\u00e9"}'
TOOL = ToolDef(
    "get_order",
    "use when looking up an order",
    {"type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]},
)


@pytest.fixture(params=["openai", "anthropic"])
async def fake_and_model(request: pytest.FixtureRequest) -> AsyncIterator[tuple[FakeProvider, Model]]:
    kind = request.param
    fake = FakeProvider(kind).start()
    model, http = _model(fake)
    try:
        yield fake, model
    finally:
        await http.aclose()
        fake.stop()
    assert not fake.errors, "\n".join(fake.errors)


def _model(fake: FakeProvider, **timeouts: float) -> tuple[Model, HttpBackend]:
    if fake.kind == "openai":
        http = HttpBackend(
            "openai", fake.base_url, auth_headers={"authorization": "Bearer k"}, timeouts=HttpTimeouts(**timeouts)
        )
        return OpenAIModel(http, "openai", "m1"), http
    http = HttpBackend(
        "anthropic",
        fake.base_url,
        auth_headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        timeouts=HttpTimeouts(**timeouts),
    )
    return AnthropicModel(http, "anthropic", "m1", default_max_tokens=321), http


def _req(**kw: Any) -> ModelRequest:
    messages = kw.pop("messages", (Message(Role.SYSTEM, "be brief"), Message(Role.USER, "where is my order?")))
    return ModelRequest(messages=messages, **kw)


async def _stream(model: Model, request: ModelRequest) -> list[StreamEvent]:
    return [e async for e in model.request_stream(request, CallContext())]


async def test_text_reply_and_usage(fake_and_model: tuple[FakeProvider, Model]) -> None:
    fake, model = fake_and_model
    fake.push(Reply(text="It ships today.", usage=(40, 5)))
    response = await model.request(_req(), CallContext())
    assert response.message.content == "It ships today."
    assert response.finish_reason == FinishReason.STOP
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40, 5)
    assert response.model == f"{fake.kind}/m1" and response.provider_model == "m1"


async def test_tool_call_round_trip_keeps_arguments_byte_identical(fake_and_model: tuple[FakeProvider, Model]) -> None:
    fake, model = fake_and_model
    fake.push(Reply(text="", tool_calls=[("get_order", BIG_ARGS)]))
    response = await model.request(_req(tools=(TOOL,), tool_choice=ToolChoice("tool", "get_order")), CallContext())
    call = response.message.tool_calls[0]
    assert response.finish_reason == FinishReason.TOOL_CALLS and call.name == "get_order"
    if fake.kind == "openai":
        assert call.arguments_json == BIG_ARGS
    else:
        # An object on this wire: its compact text, numbers exactly as the upstream wrote them.
        assert call.arguments_json == '{"order_id":123456789012345678901234567890,"amount":19.990,"tag":"été"}'
    assert json.loads(call.arguments_json)["order_id"] == 123456789012345678901234567890
    sent = fake.requests()[-1].json()
    if fake.kind == "openai":
        function = {"name": "get_order", "description": TOOL.description, "parameters": dict(TOOL.input_schema)}
        assert sent["tools"] == [{"type": "function", "function": function}]
        assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_order"}}
    else:
        assert sent["tools"] == [
            {"name": "get_order", "description": TOOL.description, "input_schema": dict(TOOL.input_schema)}
        ]
        assert sent["tool_choice"] == {"type": "tool", "name": "get_order"}


async def test_tool_call_history_goes_back_upstream_verbatim(fake_and_model: tuple[FakeProvider, Model]) -> None:
    fake, model = fake_and_model
    history = (
        Message(Role.SYSTEM, "sys"),
        Message(Role.USER, "find order"),
        Message(Role.ASSISTANT, "", tool_calls=(ToolCall("call_1", "get_order", BIG_ARGS),)),
        Message(Role.TOOL, '{"status": "shipped"}', tool_call_id="call_1", name="get_order"),
    )
    await model.request(_req(messages=history, tools=(TOOL,)), CallContext())
    raw = fake.requests()[-1].body.decode()
    sent = json.loads(raw)
    if fake.kind == "openai":
        assert sent["messages"][2]["tool_calls"][0]["function"]["arguments"] == BIG_ARGS
        assert sent["messages"][3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped"}'}
    else:
        assert sent["system"] == "sys"
        assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
        tool_use = sent["messages"][1]["content"][0]
        assert tool_use["type"] == "tool_use" and tool_use["id"] == "call_1"
        assert '"order_id":123456789012345678901234567890,"amount":19.990' in raw  # no float round trip
        assert sent["messages"][2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": "call_1",
            "content": '{"status": "shipped"}',
        }


async def test_streaming_text_and_tool_call_deltas(fake_and_model: tuple[FakeProvider, Model]) -> None:
    fake, model = fake_and_model
    fake.push(Reply(text="Checking the order now.", tool_calls=[("get_order", BIG_ARGS)], usage=(30, 12)))
    events = await _stream(model, _req(tools=(TOOL,)))
    final = events[-1]
    assert isinstance(final, StreamFinal)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert text == final.response.message.content == "Checking the order now."
    assert deltas[0].name == "get_order" and deltas[0].id
    assert "".join(d.arguments_delta for d in deltas) == BIG_ARGS == final.response.message.tool_calls[0].arguments_json
    assert final.response.finish_reason == FinishReason.TOOL_CALLS
    assert (final.response.usage.input_tokens, final.response.usage.output_tokens) == (30, 12)
    sent = fake.requests()[-1].json()
    assert sent["stream"] is True
    if fake.kind == "openai":
        assert sent["stream_options"] == {"include_usage": True}


async def test_sampling_parameters_on_the_wire(fake_and_model: tuple[FakeProvider, Model]) -> None:
    fake, model = fake_and_model
    sampling = Sampling(temperature=1.2, top_p=0.5, max_tokens=64, stop=("END",), seed=7)
    await model.request(_req(sampling=sampling), CallContext())
    sent = fake.requests()[-1].json()
    if fake.kind == "openai":
        assert {k: sent[k] for k in ("temperature", "top_p", "max_tokens", "stop", "seed")} == {
            "temperature": 1.2, "top_p": 0.5, "max_tokens": 64, "stop": ["END"], "seed": 7,
        }  # fmt: skip
    else:
        # The current Messages API has no temperature/top_p/seed: dropped (warned), not sent.
        assert sent["max_tokens"] == 64 and sent["stop_sequences"] == ["END"]
        assert not {"temperature", "top_p", "seed"} & set(sent)


async def test_response_schema(fake_and_model: tuple[FakeProvider, Model]) -> None:
    fake, model = fake_and_model
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    await model.request(_req(response_schema=schema), CallContext())
    sent = fake.requests()[-1].json()
    if fake.kind == "openai":
        assert sent["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    else:
        assert sent["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


async def test_a_strict_compatible_schema_is_sent_strict(fake_and_model: tuple[FakeProvider, Model]) -> None:
    # Closed objects whose properties are all required: OpenAI's strict structured output takes them (issue 41).
    fake, model = fake_and_model
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    await model.request(_req(response_schema=schema), CallContext())
    sent = fake.requests()[-1].json()
    if fake.kind == "openai":
        assert sent["response_format"]["json_schema"] == {"name": "response", "schema": schema, "strict": True}
    else:
        assert sent["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply(raw_body=b"not json at all"), ErrorCode.UPSTREAM_UNAVAILABLE),
        (Reply(raw_body=b"[1, 2]"), ErrorCode.UPSTREAM_UNAVAILABLE),
        (Reply(raw_body=b'{"id": "x"}'), ErrorCode.UPSTREAM_UNAVAILABLE),
        (Reply(raw_body=b'{"choices": [{"message": {"tool_calls": [{"function": {}}]}}], '
                        b'"content": [{"type": "tool_use"}]}'), ErrorCode.UPSTREAM_UNAVAILABLE),
        (Reply(raw_body=b'{"choices": [{"message": {"content": 5}}], "content": [{"type": "text", "text": 5}]}'),
         ErrorCode.UPSTREAM_UNAVAILABLE),
    ],
    ids=["not-json", "not-object", "missing-fields", "tool-without-name", "wrong-types"],
)  # fmt: skip
async def test_malformed_bodies_are_typed_never_key_errors(
    fake_and_model: tuple[FakeProvider, Model], reply: Reply, code: ErrorCode
) -> None:
    fake, model = fake_and_model
    fake.push(reply)
    with pytest.raises(AgentmeshError) as caught:
        await model.request(_req(), CallContext())
    assert caught.value.code == code
    assert caught.value.metadata["reason"] == "malformed_response" and not caught.value.retryable


async def test_streams_cut_short_or_failing_midway_are_typed(fake_and_model: tuple[FakeProvider, Model]) -> None:
    fake, model = fake_and_model
    fake.push(Reply(text="partial answer", stream_cut=True))
    with pytest.raises(AgentmeshError) as cut:
        await _stream(model, _req())
    assert cut.value.code == ErrorCode.UPSTREAM_UNAVAILABLE and "stream ended" in cut.value.message
    fake.push(Reply(text="partial answer", stream_error="overloaded_error"))
    with pytest.raises(AgentmeshError) as failed:
        await _stream(model, _req())
    assert failed.value.code == ErrorCode.UPSTREAM_UNAVAILABLE


async def test_content_filter(fake_and_model: tuple[FakeProvider, Model]) -> None:
    fake, model = fake_and_model
    fake.push(Reply(text="", finish_reason="content_filter" if fake.kind == "openai" else "refusal"))
    with pytest.raises(AgentmeshError) as caught:
        await model.request(_req(), CallContext())
    assert caught.value.code == ErrorCode.CONTENT_FILTERED
    fake.push(Reply.error(400, "Your request was rejected by our content management policy", code="content_filter"))
    with pytest.raises(AgentmeshError) as rejected:
        await model.request(_req(), CallContext())
    assert rejected.value.code == ErrorCode.CONTENT_FILTERED


@pytest.mark.parametrize(
    ("status", "message", "code", "retryable"),
    [
        (429, "rate limited", ErrorCode.RATE_LIMITED, True),
        (500, "internal", ErrorCode.UPSTREAM_UNAVAILABLE, True),
        (503, "unavailable", ErrorCode.UPSTREAM_UNAVAILABLE, True),
        (529, "Overloaded", ErrorCode.UPSTREAM_UNAVAILABLE, True),
        (400, "prompt is too long: 250000 tokens > 200000 maximum", ErrorCode.CONTEXT_LENGTH_EXCEEDED, False),
        (400, "messages: field required", ErrorCode.UPSTREAM_REJECTED, False),
        (401, "invalid x-api-key", ErrorCode.PROVIDER_AUTH_FAILED, False),
        (403, "permission denied", ErrorCode.PROVIDER_AUTH_FAILED, False),
        (404, "model not found", ErrorCode.UPSTREAM_NOT_FOUND, False),
        (413, "request too large", ErrorCode.UPSTREAM_REJECTED, False),
    ],
)
async def test_error_rows(
    fake_and_model: tuple[FakeProvider, Model], status: int, message: str, code: ErrorCode, retryable: bool
) -> None:
    fake, model = fake_and_model
    fake.push(Reply.error(status, message, headers={"retry-after": "3"} if status == 429 else {}))
    with pytest.raises(AgentmeshError) as caught:
        await model.request(_req(), CallContext())
    err = caught.value
    assert (err.code, err.retryable, err.metadata["http_status"]) == (code, retryable, str(status))
    assert message[:20] in err.message
    if status == 429:
        assert err.retry_after == 3


async def test_timeouts_and_deadlines() -> None:
    with FakeProvider("openai") as fake:
        model, http = _model(fake, read_s=0.2)
        try:
            fake.push(Reply(delay_s=0.6))
            with pytest.raises(AgentmeshError) as slow:
                await model.request(_req(), CallContext())
            assert slow.value.code == ErrorCode.UPSTREAM_TIMEOUT and slow.value.retryable
            fake.push(Reply(delay_s=0.6))
            with pytest.raises(AgentmeshError) as late:
                await model.request(_req(), CallContext.with_timeout(0.1))
            assert late.value.code == ErrorCode.DEADLINE_EXCEEDED
            with pytest.raises(AgentmeshError) as gone:
                await model.request(_req(), CallContext.with_timeout(-1))
            assert gone.value.code == ErrorCode.DEADLINE_EXCEEDED
        finally:
            await http.aclose()


async def test_connection_refused_is_unavailable_and_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    http = HttpBackend("openai", f"http://127.0.0.1:{port}/v1", auth_headers={})
    try:
        with pytest.raises(AgentmeshError) as caught:
            await OpenAIModel(http, "openai", "m1").request(_req(), CallContext())
    finally:
        await http.aclose()
    assert caught.value.code == ErrorCode.UPSTREAM_UNAVAILABLE and caught.value.retryable


async def test_anthropic_specifics() -> None:
    with FakeProvider("anthropic") as fake:
        model, http = _model(fake)
        try:
            messages = (
                Message(Role.SYSTEM, "one"),
                Message(Role.SYSTEM, "two"),
                Message(Role.USER, "a"),
                Message(Role.USER, "b"),
                Message(Role.ASSISTANT, "", tool_calls=(ToolCall("t1", "x", "{}"), ToolCall("t2", "x", "not json"))),
                Message(Role.TOOL, "r1", tool_call_id="t1"),
                Message(Role.TOOL, "r2", tool_call_id="t2"),
            )
            await model.request(_req(messages=messages, tool_choice=ToolChoice("required")), CallContext())
            sent = fake.requests()[-1].json()
            assert sent["system"] == "one\n\ntwo"
            assert sent["max_tokens"] == 321  # the configured default: the API requires one
            assert sent["tool_choice"] == {"type": "any"}
            assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
            assert len(sent["messages"][0]["content"]) == 2 and len(sent["messages"][2]["content"]) == 2
            assert sent["messages"][1]["content"][1]["input"] == {"_unparsed_arguments": "not json"}
        finally:
            await http.aclose()
        assert not fake.errors, fake.errors


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("with_tools", [False, True])
async def test_anthropic_structured_output_as_a_forced_final_tool(stream: bool, with_tools: bool) -> None:
    # `structured_output: tool` (issue 41): the schema is the input schema of a forced `final_answer` tool, whose
    # input comes back as the reply's text; the request passes the official SDK's types (the fake validates it).
    fake = FakeProvider("anthropic").start()
    http = HttpBackend("anthropic", fake.base_url, auth_headers={"x-api-key": "k", "anthropic-version": "2023-06-01"})
    model = AnthropicModel(http, "anthropic", "m1", structured_output="tool")
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    answer = '{"answer": "it ships today"}'
    try:
        fake.push(Reply(text="", tool_calls=[("final_answer", answer)], finish_reason="tool_use"))
        request = _req(response_schema=schema, tools=(TOOL,) if with_tools else ())
        if stream:
            events = await _stream(model, request)
            final = events[-1]
            assert isinstance(final, StreamFinal)
            response = final.response
            assert "".join(e.text for e in events if isinstance(e, TextDelta)) == response.message.content
            assert not [e for e in events if isinstance(e, ToolCallDelta)]
        else:
            response = await model.request(request, CallContext())
        assert json.loads(response.message.content) == json.loads(answer)
        assert response.message.tool_calls == () and response.finish_reason == FinishReason.STOP
        sent = fake.requests()[-1].json()
        assert "output_config" not in sent
        assert sent["tools"][-1] == {
            "name": "final_answer",
            "description": sent["tools"][-1]["description"],
            "input_schema": schema,
        }
        forced = {"type": "any"} if with_tools else {"type": "tool", "name": "final_answer"}
        assert sent["tool_choice"] == forced
    finally:
        await http.aclose()
        fake.stop()
    assert not fake.errors, "\n".join(fake.errors)
