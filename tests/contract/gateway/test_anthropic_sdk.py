"""The official `anthropic` SDK against provider_svc's `/v1/messages` (and `/v1/models` in Anthropic's format):
plain, stream, tools, structured output and errors, with the scripted model and with a fake Anthropic
upstream (itself checked against the SDK's types). Raw bodies and events are validated with its models."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from agentmesh.config import QuotaLimits
from tests.contract.gateway import sdk
from tests.contract.gateway.conftest import Gateway, gateway_config, upstream
from tests.contract.provider.fakes import FakeProvider, Reply

MODELS = ["scripted/default", "claude/m1"]
WEATHER: Any = {
    "name": "get_weather",
    "description": "use when asked about the weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
HI: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def gw(start_gateway: Any, anthropic_fake: FakeProvider) -> Gateway:
    gateway: Gateway = await start_gateway(gateway_config(upstream("claude", anthropic_fake)))
    return gateway


async def client(gw: Gateway, **key: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.base_url, api_key=await gw.key(**key), max_retries=0)


@pytest.mark.parametrize("model", MODELS)
async def test_plain_message(gw: Gateway, anthropic_fake: FakeProvider, model: str) -> None:
    api = await client(gw)
    raw = await api.messages.with_raw_response.create(
        model=model,
        max_tokens=128,
        system="Be brief.",
        messages=[{"role": "user", "content": "Say hello to Ada"}],
        stop_sequences=["###"],
    )
    message = sdk.anthropic_message(raw.http_response.json())
    assert message.model == model and message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    if model == "claude/m1":
        sent = anthropic_fake.requests()[-1].json()
        assert sent["system"] == "Be brief." and sent["max_tokens"] == 128 and sent["stop_sequences"] == ["###"]


@pytest.mark.parametrize("model", MODELS)
async def test_stream(gw: Gateway, anthropic_fake: FakeProvider, model: str) -> None:
    api = await client(gw)
    messages: Any = [{"role": "user", "content": "Tell me about the order ORD-1 please"}]
    whole = await api.messages.create(model=model, max_tokens=256, messages=messages)
    async with api.messages.stream(model=model, max_tokens=256, messages=messages) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == whole.content[0].text == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens
    raw = await sdk.post(
        gw.base_url,
        "/v1/messages",
        await gw.key(),
        {"model": model, "max_tokens": 64, "messages": messages, "stream": True},
    )
    events = sdk.anthropic_stream(raw.text)
    assert [e.type for e in events][:2] == ["message_start", "content_block_start"]
    assert [e.type for e in events][-2:] == ["message_delta", "message_stop"]


@pytest.mark.parametrize("model", MODELS)
async def test_tools_round_trip(gw: Gateway, anthropic_fake: FakeProvider, model: str) -> None:
    api = await client(gw)
    anthropic_fake.push(Reply(text="", tool_calls=[("get_weather", '{"city": "Paris"}')]), Reply(text="Sunny."))
    messages: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = await api.messages.create(model=model, max_tokens=256, messages=messages, tools=[WEATHER])
    use = next(b for b in first.content if b.type == "tool_use")
    assert first.stop_reason == "tool_use" and use.name == "get_weather" and use.input["city"]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny, 21 C"}]},
    ]
    second = await api.messages.create(model=model, max_tokens=256, messages=messages, tools=[WEATHER])
    assert second.stop_reason == "end_turn" and second.content[0].type == "text"
    if model == "claude/m1":
        sent = anthropic_fake.requests()[-1].json()
        assert sent["tools"][0]["name"] == "get_weather"
        assert sent["messages"][-1]["content"][0]["type"] == "tool_result"
        assert sent["messages"][-2]["content"][-1]["input"] == {"city": "Paris"}
    anthropic_fake.push(Reply(text="", tool_calls=[("get_weather", '{"city": "Oslo"}')]))
    async with api.messages.stream(
        model=model,
        max_tokens=256,
        messages=[{"role": "user", "content": "weather in Oslo?"}],
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as stream:
        final = await stream.get_final_message()
    streamed = next(b for b in final.content if b.type == "tool_use")
    assert streamed.name == "get_weather" and streamed.input["city"]


@pytest.mark.parametrize("model", MODELS)
async def test_structured_output(gw: Gateway, anthropic_fake: FakeProvider, model: str) -> None:
    api = await client(gw)
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
        "required": ["city", "temp_c"],
        "additionalProperties": False,
    }
    anthropic_fake.push(Reply(text='{"city": "Paris", "temp_c": 21}'))
    message = await api.messages.create(
        model=model,
        max_tokens=256,
        messages=[{"role": "user", "content": "Forecast for Paris: 21 degrees"}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    value = json.loads(message.content[0].text)  # type: ignore[union-attr]
    assert set(value) == {"city", "temp_c"} and isinstance(value["temp_c"], int)
    if model == "claude/m1":
        assert anthropic_fake.requests()[-1].json()["output_config"]["format"]["schema"] == schema


async def test_models_in_anthropics_format(gw: Gateway) -> None:
    api = await client(gw)
    page = await api.models.list()
    assert [m.id for m in page.data] == ["claude/m1", "scripted/default"]
    assert (await api.models.retrieve("claude/m1")).display_name == "claude/m1"


async def test_bad_input_gets_anthropic_errors_and_nothing_reaches_the_upstream(
    gw: Gateway, anthropic_fake: FakeProvider
) -> None:
    key = await gw.key()
    api = anthropic.AsyncAnthropic(base_url=gw.base_url, api_key=key, max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as unknown:
        await api.messages.create(model="nosuch/model", max_tokens=10, messages=HI)
    assert sdk.anthropic_error(unknown.value.response.json()).error.type == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as bad:
        await api.messages.create(model="claude/m1", max_tokens=0, messages=HI)
    assert "max_tokens" in bad.value.message
    with pytest.raises(anthropic.BadRequestError):
        await api.messages.create(model="claude/m1", max_tokens=10, messages=HI, extra_body={"frobnicate": 1})
    with pytest.raises(anthropic.BadRequestError) as image:
        await api.messages.create(
            model="claude/m1",
            max_tokens=10,
            messages=[
                {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}
            ],
        )
    assert sdk.anthropic_error(image.value.response.json()).error.type == "invalid_request_error"
    for body in (b"{not json", b"\xff", b"[]", b'{"model": "claude/m1", "messages": []}'):
        raw = await sdk.post(gw.base_url, "/v1/messages", None, body, **{"x-api-key": key})
        assert raw.status_code == 400, raw.text
        assert sdk.anthropic_error(raw.json()).error.type == "invalid_request_error"
    huge = {"model": "claude/m1", "max_tokens": 10, "messages": [{"role": "user", "content": "x" * (5 << 20)}]}
    raw = await sdk.post(gw.base_url, "/v1/messages", None, huge, **{"x-api-key": key})
    assert raw.status_code == 413 and sdk.anthropic_error(raw.json()).error.type == "invalid_request_error"
    revoked = await gw.key()
    await gw.keys.revoke(revoked[4:16])
    for token in ("sk-ant-not-ours", revoked):
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await anthropic.AsyncAnthropic(base_url=gw.base_url, api_key=token, max_retries=0).messages.create(
                model="claude/m1", max_tokens=10, messages=HI
            )
        assert sdk.anthropic_error(refused.value.response.json()).error.type == "authentication_error"
    assert anthropic_fake.requests() == []


async def test_quota_and_budget_errors(gw: Gateway, anthropic_fake: FakeProvider) -> None:
    limited = await client(gw, limits=QuotaLimits(rpm=1))
    await limited.messages.create(model="claude/m1", max_tokens=10, messages=HI)
    with pytest.raises(anthropic.RateLimitError) as rate:
        await limited.messages.create(model="claude/m1", max_tokens=10, messages=HI)
    assert sdk.anthropic_error(rate.value.response.json()).error.type == "rate_limit_error"
    assert rate.value.response.headers["retry-after"]
    poor = await client(gw, limits=QuotaLimits(budget_usd_month=0.00001))
    with pytest.raises(anthropic.APIStatusError) as budget:
        await poor.messages.create(model="claude/m1", max_tokens=500, messages=HI)
    assert budget.value.status_code == 402
    assert sdk.anthropic_error(budget.value.response.json()).error.type == "billing_error"
    assert len(anthropic_fake.requests()) == 1
