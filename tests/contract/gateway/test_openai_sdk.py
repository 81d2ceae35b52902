"""The official `openai` SDK against provider_svc's `/v1/chat/completions` and `/v1/models`: plain, stream,
tools, JSON schema and errors, with the scripted model and with a fake OpenAI upstream (itself checked
against the SDK's request and response types). Raw bodies and chunks are validated with the SDK's models."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from agentmesh.v1 import provider_pb2, provider_pb2_grpc
from tests.contract.gateway import sdk
from tests.contract.gateway.conftest import Gateway, gateway_config, upstream
from tests.contract.provider.fakes import FakeProvider, Reply

MODELS = ["scripted/default", "fake/m1"]
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "use when asked about the weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


class Forecast(BaseModel):
    city: str
    temp_c: int


@pytest.fixture
async def gw(start_gateway: Any, openai_fake: FakeProvider) -> Gateway:
    gateway: Gateway = await start_gateway(gateway_config(upstream("fake", openai_fake)))
    return gateway


async def client(gw: Gateway, **key: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url + "/v1", api_key=await gw.key(**key), max_retries=0)


async def usage_rows(gw: Gateway) -> list[Any]:
    stub = provider_pb2_grpc.ProviderServiceStub(gw.svc.channel)  # type: ignore[no-untyped-call]
    reply = await stub.GetUsage(provider_pb2.GetUsageRequest(), metadata=gw.svc.metadata(roles=("operator",)))
    return list(reply.rows)


@pytest.mark.parametrize("model", MODELS)
async def test_plain_chat(gw: Gateway, openai_fake: FakeProvider, model: str) -> None:
    api = await client(gw, agent="app")
    raw = await api.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello to Ada"}],
        max_tokens=64,
        temperature=0.2,
    )
    completion = sdk.openai_completion(raw.http_response.json())
    assert raw.headers.get("x-request-id")
    assert completion.model == model and completion.object == "chat.completion"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.total_tokens > 0
    if model == "fake/m1":
        sent = openai_fake.requests()[-1].json()
        assert sent["model"] == "m1" and sent["max_tokens"] == 64 and sent["temperature"] == 0.2
        assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    rows = await usage_rows(gw)
    assert [(r.agent_id, f"{r.provider}/{r.model}", r.calls) for r in rows] == [("app", model, 1)]
    assert rows[0].api_key_id and rows[0].usage.input_tokens == completion.usage.prompt_tokens


@pytest.mark.parametrize("model", MODELS)
async def test_stream(gw: Gateway, openai_fake: FakeProvider, model: str) -> None:
    api = await client(gw)
    messages: Any = [{"role": "user", "content": "Tell me about the order ORD-1 please"}]
    whole = await api.chat.completions.create(model=model, messages=messages)
    stream = await api.chat.completions.create(
        model=model, messages=messages, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    raw = await sdk.post(
        gw.base_url, "/v1/chat/completions", await gw.key(), {"model": model, "messages": messages, "stream": True}
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    validated = sdk.openai_stream(raw.text)
    assert validated[0].choices[0].delta.role == "assistant" and all(c.usage is None for c in validated)


@pytest.mark.parametrize("model", MODELS)
async def test_tools_round_trip(gw: Gateway, openai_fake: FakeProvider, model: str) -> None:
    api = await client(gw)
    openai_fake.push(Reply(text="", tool_calls=[("get_weather", '{"city": "Paris"}')]), Reply(text="Sunny, 21 C."))
    messages: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = await api.chat.completions.create(model=model, messages=messages, tools=[WEATHER], tool_choice="auto")
    call: Any = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    second = await api.chat.completions.create(model=model, messages=messages, tools=[WEATHER])
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content
    if model == "fake/m1":
        sent = openai_fake.requests()[-1].json()
        assert sent["tools"][0]["function"]["name"] == "get_weather"
        assert sent["messages"][-1] == {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}
        assert sent["messages"][-2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    # Streamed, the call arrives as deltas the SDK's accumulator joins.
    openai_fake.push(Reply(text="", tool_calls=[("get_weather", '{"city": "Oslo"}')]))
    async with api.chat.completions.stream(
        model=model, messages=[{"role": "user", "content": "weather in Oslo?"}], tools=[WEATHER], tool_choice="required"
    ) as stream:
        final = await stream.get_final_completion()
    streamed = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert streamed.function.name == "get_weather" and json.loads(streamed.function.arguments)["city"]


@pytest.mark.parametrize("model", MODELS)
async def test_json_schema(gw: Gateway, openai_fake: FakeProvider, model: str) -> None:
    api = await client(gw)
    openai_fake.push(Reply(text='{"city": "Paris", "temp_c": 21}'))
    parsed = await api.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Forecast for Paris: 21 degrees"}], response_format=Forecast
    )
    forecast = parsed.choices[0].message.parsed
    assert isinstance(forecast, Forecast) and forecast.city
    if model == "fake/m1":
        assert forecast == Forecast(city="Paris", temp_c=21)
        fmt = openai_fake.requests()[-1].json()["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["required"] == ["city", "temp_c"]
    plain = await api.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "json please"}], response_format={"type": "json_object"}
    )
    if model == "scripted/default":
        assert isinstance(json.loads(plain.choices[0].message.content or ""), dict)


async def test_models_list_retrieve_and_the_keys_model_patterns(gw: Gateway, openai_fake: FakeProvider) -> None:
    api = await client(gw)
    listed = [m.id async for m in api.models.list()]
    assert listed == ["fake/m1", "scripted/default"]
    assert (await api.models.retrieve("fake/m1")).owned_by == "fake"
    raw = await api.models.with_raw_response.retrieve("scripted/default")
    sdk.openai_model(raw.http_response.json())
    restricted = await client(gw, models=("fake/*",))
    assert [m.id async for m in restricted.models.list()] == ["fake/m1"]
    before = len(openai_fake.requests())
    with pytest.raises(openai.PermissionDeniedError) as denied:
        await restricted.chat.completions.create(model="scripted/default", messages=[{"role": "user", "content": "hi"}])
    assert sdk.openai_error(denied.value.response.json()).code == "model_not_allowed"
    assert (await restricted.chat.completions.create(model="fake/m1", messages=[{"role": "user", "content": "hi"}])).id
    assert len(openai_fake.requests()) == before + 1
    with pytest.raises(openai.NotFoundError):
        await api.models.retrieve("nope/none")


async def test_bad_input_gets_openai_errors_and_nothing_reaches_the_upstream(
    gw: Gateway, openai_fake: FakeProvider
) -> None:
    key = await gw.key()
    api = openai.AsyncOpenAI(base_url=gw.base_url + "/v1", api_key=key, max_retries=0)
    hi: Any = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as unknown:
        await api.chat.completions.create(model="fake/nope-model" if False else "nosuch/model", messages=hi)
    assert sdk.openai_error(unknown.value.response.json()).code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        await api.chat.completions.create(model="fake/m1", messages=[])
    assert sdk.openai_error(bad.value.response.json()).param == "messages"
    with pytest.raises(openai.BadRequestError) as unknown_arg:
        await api.chat.completions.create(model="fake/m1", messages=hi, extra_body={"frobnicate": 1})
    assert "Unrecognized request argument supplied: frobnicate" in unknown_arg.value.message
    with pytest.raises(openai.BadRequestError) as n2:
        await api.chat.completions.create(model="fake/m1", messages=hi, n=2)
    assert sdk.openai_error(n2.value.response.json()).param == "n"
    for body in (b"{not json", b"\xff\xfe", b"[1, 2]", b'{"model": "fake/m1", "messages": "hi"}', b"[" * 100_000):
        raw = await sdk.post(gw.base_url, "/v1/chat/completions", key, body)
        assert raw.status_code == 400, (body[:20], raw.text)
        assert sdk.openai_error(raw.json()).type == "invalid_request_error"
        assert raw.headers["x-should-retry"] == "false"
    huge = {"model": "fake/m1", "messages": [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]}
    raw = await sdk.post(gw.base_url, "/v1/chat/completions", key, huge)
    assert raw.status_code == 413 and sdk.openai_error(raw.json()).code == "request_too_large"
    for token in (None, "sk-not-ours", "amk_000000000000_" + "A" * 32):
        raw = await sdk.post(gw.base_url, "/v1/chat/completions", token, {"model": "fake/m1", "messages": hi})
        assert raw.status_code == 401 and sdk.openai_error(raw.json()).code == "invalid_api_key", raw.text
    with pytest.raises(openai.AuthenticationError):
        await openai.AsyncOpenAI(base_url=gw.base_url + "/v1", api_key="wrong", max_retries=0).models.list()
    revoked = await gw.key()
    await gw.keys.revoke(revoked[4:16])
    expired, _ = await gw.keys.create(agent_id="app", environment="dev", ttl_s=1)
    import asyncio

    await asyncio.sleep(1.1)
    for token, word in ((revoked, "revoked"), (expired, "expired")):
        with pytest.raises(openai.AuthenticationError) as refused:
            await openai.AsyncOpenAI(
                base_url=gw.base_url + "/v1", api_key=token, max_retries=0
            ).chat.completions.create(model="fake/m1", messages=hi)
        assert word in refused.value.message
    assert openai_fake.requests() == []  # not one of these reached the upstream


async def test_upstream_failure_is_an_openai_error_with_our_code(gw: Gateway, openai_fake: FakeProvider) -> None:
    api = await client(gw)
    openai_fake.push(*[Reply.error(503, "upstream down")] * 4)
    with pytest.raises(openai.APIStatusError) as failed:
        await api.chat.completions.create(model="fake/m1", messages=[{"role": "user", "content": "hi"}])
    error = failed.value.response.json()["error"]
    assert failed.value.status_code == 502 and error["agentmesh_code"] == "UPSTREAM_UNAVAILABLE"
    assert len(openai_fake.requests()) == 4  # the same retries as gRPC's Generate
    openai_fake.push(Reply(text="partial answer", stream_error="server_error"))
    raw = await sdk.post(
        gw.base_url,
        "/v1/chat/completions",
        await gw.key(),
        {"model": "fake/m1", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    )
    events = sdk.sse_events(raw.text)
    assert "error" in json.loads(events[-1][1]) and events[-1][1] != "[DONE]"


async def test_rate_quota_and_budget_refusals(gw: Gateway, openai_fake: FakeProvider) -> None:
    from agentmesh.config import QuotaLimits

    limited = await client(gw, limits=QuotaLimits(rpm=2))
    hi: Any = [{"role": "user", "content": "hi"}]
    for _ in range(2):
        await limited.chat.completions.create(model="fake/m1", messages=hi)
    with pytest.raises(openai.RateLimitError) as rate:
        await limited.chat.completions.create(model="fake/m1", messages=hi)
    assert sdk.openai_error(rate.value.response.json()).code == "rate_limit_exceeded"
    assert 0 < int(rate.value.response.headers["retry-after"]) <= 60
    poor = await client(gw, limits=QuotaLimits(budget_usd_day=0.0001))
    with pytest.raises(openai.RateLimitError) as budget:
        await poor.chat.completions.create(model="fake/m1", messages=hi, max_tokens=500)
    body = budget.value.response.json()["error"]
    assert body["code"] == "insufficient_quota" and body["agentmesh_code"] == "BUDGET_EXCEEDED"
    assert budget.value.response.headers["x-should-retry"] == "false"
    assert len(openai_fake.requests()) == 2
