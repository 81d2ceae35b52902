"""ProviderService.Embed through real gRPC (issue 51): the offline multilingual default, the OpenAI-compatible
/embeddings adapter against the fake (itself checked by the official SDK), the content-hash cache, usage
and cost in GetUsage, and a typed error for each bad input."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import numpy as np
import pytest

from agentmesh.errors import ErrorCode
from agentmesh.rpc.status import from_rpc_error
from agentmesh.v1 import provider_pb2, provider_pb2_grpc
from provider_svc.embedding import MAX_CHARS, MAX_INPUTS, MAX_TOTAL_CHARS, OFFLINE_NAME
from provider_svc.server import SPEC
from tests.conftest import RunningService
from tests.contract.provider.conftest import OPENAI_KEY, backend
from tests.contract.provider.fakes import EMBEDDING_DIM, FakeProvider, Reply, fake_embedding

Start = Callable[..., Awaitable[RunningService]]

SCRIPTED = {"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": [{"name": "default"}]}


def _providers(*backends: dict[str, Any]) -> dict[str, Any]:
    return {"providers": {"backends": [*backends, SCRIPTED], "default_model": "scripted/default"}}


def _stub(svc: RunningService) -> provider_pb2_grpc.ProviderServiceStub:
    return provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]


def _matrix(reply: provider_pb2.EmbedResponse) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.array([list(e.values) for e in reply.embeddings], dtype=np.float32)


async def test_the_offline_default_embeds_across_languages_caches_and_records_usage(start_service: Start) -> None:
    svc = await start_service(SPEC, _providers())
    stub = _stub(svc)
    md = svc.metadata(agent_id="agent-a")
    texts = ["I prefer invoices in EUR", "以后发票都用欧元", "The meeting moved to Tuesday", "以后发票都用欧元"]
    reply = await stub.Embed(provider_pb2.EmbedRequest(inputs=texts), metadata=md)
    assert reply.model == OFFLINE_NAME and reply.dimensions == 512 and reply.cost_usd == 0.0
    assert [e.index for e in reply.embeddings] == [0, 1, 2, 3] and not any(e.cached for e in reply.embeddings)
    m = _matrix(reply)
    assert np.allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5) and np.allclose(m[1], m[3])
    assert m[1] @ m[0] > m[1] @ m[2] + 0.2  # the Chinese preference is near its English, not the meeting
    tokens = reply.usage.input_tokens
    assert tokens > 0 and reply.usage.output_tokens == 0

    again = await stub.Embed(provider_pb2.EmbedRequest(inputs=[texts[1], "new text"]), metadata=md)
    assert [e.cached for e in again.embeddings] == [True, False]
    assert np.allclose(_matrix(again)[0], m[1]) and again.usage.input_tokens == 2  # "new text": 8 bytes / 4

    usage = await stub.GetUsage(provider_pb2.GetUsageRequest(), metadata=svc.metadata(roles=("operator",)))
    rows = [(r.agent_id, r.provider, r.model, r.calls, r.usage.input_tokens) for r in usage.rows]
    assert rows == [("agent-a", "offline", "use-multilingual-v3", 2, tokens + 2)]


async def test_an_openai_compatible_backend_embeds_with_cost_and_cache(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    svc = await start_service(SPEC, _providers(backend("openai", openai_fake)))
    stub = _stub(svc)
    md = svc.metadata(agent_id="a1")
    reply = await stub.Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["alpha", "βeta"]), metadata=md)
    assert reply.model == "openai/m1" and reply.dimensions == EMBEDDING_DIM
    for row, text in zip(_matrix(reply), ["alpha", "βeta"], strict=True):
        expected = np.array(fake_embedding(text), dtype=np.float32)
        assert np.allclose(row, expected / np.linalg.norm(expected), atol=1e-6)
    assert reply.usage.input_tokens == 2 and reply.cost_usd == pytest.approx(2 * 2.0 / 1e6)
    sent = openai_fake.requests()[-1]
    assert sent.path == "/v1/embeddings" and sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert sent.json() == {"model": "m1", "input": ["alpha", "βeta"], "encoding_format": "float"}

    again = await stub.Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["βeta"]), metadata=md)
    assert again.embeddings[0].cached and again.cost_usd == 0.0 and len(openai_fake.requests()) == 1


async def test_upstream_failures_are_typed(start_service: Start, openai_fake: FakeProvider) -> None:
    svc = await start_service(SPEC, _providers(backend("openai", openai_fake)))
    openai_fake.push(Reply(raw_body=b'{"data": [{"embedding": "nope"}]}'))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["x"]), metadata=svc.metadata())
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert from_rpc_error(caught.value).metadata["reason"] == "malformed_response"
    # A Retry-After over the policy's bound (60 s) is not waited for: the 429 is the answer at once.
    openai_fake.push(Reply.error(429, "slow down", error_type="rate_limit_error", headers={"retry-after": "120"}))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["y"]), metadata=svc.metadata())
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert OPENAI_KEY not in str(caught.value.details())


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (provider_pb2.EmbedRequest(), "inputs"),
        (provider_pb2.EmbedRequest(inputs=["x"] * (MAX_INPUTS + 1)), "inputs"),
        (provider_pb2.EmbedRequest(inputs=["ok", "  "]), "inputs[1]"),
        (provider_pb2.EmbedRequest(inputs=["x" * (MAX_CHARS + 1)]), "inputs[0]"),
        (provider_pb2.EmbedRequest(inputs=["x" * MAX_CHARS] * (MAX_TOTAL_CHARS // MAX_CHARS + 1)), "inputs"),
        (provider_pb2.EmbedRequest(model="scripted/default", inputs=["x"]), "model"),
    ],
)
async def test_bad_requests_are_invalid_argument_naming_the_field(
    start_service: Start, request_: provider_pb2.EmbedRequest, field: str
) -> None:
    svc = await start_service(SPEC, _providers())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Embed(request_, metadata=svc.metadata())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = from_rpc_error(caught.value)
    assert err.code == ErrorCode.INVALID_REQUEST and err.violations[0].path == field


async def test_an_unknown_model_is_not_found_as_in_generate(start_service: Start) -> None:
    svc = await start_service(SPEC, _providers())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Embed(provider_pb2.EmbedRequest(model="no-such/model", inputs=["x"]), metadata=svc.metadata())
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_keyless_backend_is_a_failed_precondition(start_service: Start, openai_fake: FakeProvider) -> None:
    keyless = backend("openai", openai_fake, api_key="")
    svc = await start_service(SPEC, _providers(keyless))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stub(svc).Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["x"]), metadata=svc.metadata())
    assert from_rpc_error(caught.value).code == ErrorCode.PROVIDER_AUTH_FAILED
    assert openai_fake.requests() == []


def test_the_fake_embeddings_endpoint_speaks_the_official_sdk(openai_fake: FakeProvider) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=openai_fake.base_url, api_key=OPENAI_KEY, max_retries=0)
    created = client.embeddings.create(model="m1", input=["hello", "世界"])
    assert [d.index for d in created.data] == [0, 1]
    assert created.data[1].embedding == pytest.approx(fake_embedding("世界"))
    assert created.usage.prompt_tokens == 2 and created.model == "m1"
    single = client.embeddings.create(model="m1", input="one")
    assert len(single.data) == 1 and len(single.data[0].embedding) == EMBEDDING_DIM


async def test_transient_upstream_failures_are_retried_and_counted_once(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    svc = await start_service(SPEC, _providers(backend("openai", openai_fake)))
    md = svc.metadata(agent_id="retrying")
    openai_fake.push(Reply.error(503, "overloaded"), Reply.error(429, "slow down", error_type="rate_limit_error"))
    reply = await _stub(svc).Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["alpha"]), metadata=md)
    assert reply.model == "openai/m1" and len(reply.embeddings) == 1
    assert [r.path for r in openai_fake.requests()] == ["/v1/embeddings"] * 3  # two failures, then the answer
    usage = await _stub(svc).GetUsage(provider_pb2.GetUsageRequest(), metadata=svc.metadata(roles=("operator",)))
    assert [(r.agent_id, r.calls, r.usage.input_tokens) for r in usage.rows] == [("retrying", 1, 1)]
    # A 4xx other than 429 is the caller's: never retried.
    openai_fake.push(Reply.error(400, "bad input", error_type="invalid_request_error"))
    with pytest.raises(grpc.aio.AioRpcError):
        await _stub(svc).Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["beta"]), metadata=md)
    assert len(openai_fake.requests()) == 4


async def test_embed_is_admitted_in_the_callers_quotas_like_generate(
    start_service: Start, openai_fake: FakeProvider
) -> None:
    config = _providers(backend("openai", openai_fake))
    config["gateway"] = {"agents": {"capped": {"rpm": 2}, "frugal": {"tpm": 5}}}
    svc = await start_service(SPEC, config)
    stub = _stub(svc)
    capped = svc.metadata(agent_id="capped")
    for text in ("one", "two"):
        await stub.Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=[text]), metadata=capped)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["three"]), metadata=capped)
    err = from_rpc_error(caught.value)
    assert err.code == ErrorCode.RATE_LIMITED and err.metadata["limit"] == "rpm"
    assert len(openai_fake.requests()) == 2  # the refused call never went upstream
    # Answered from the cache: nothing is computed, nothing is admitted.
    cached = await stub.Embed(provider_pb2.EmbedRequest(model="openai/m1", inputs=["two"]), metadata=capped)
    assert cached.embeddings[0].cached
    # Tokens too (the offline model's estimate: UTF-8 bytes / 4): a batch over the minute's 5 never fits.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Embed(provider_pb2.EmbedRequest(inputs=["x" * 40]), metadata=svc.metadata(agent_id="frugal"))
    assert from_rpc_error(caught.value).code == ErrorCode.INVALID_REQUEST  # can never fit: not a retry later
    small = await stub.Embed(provider_pb2.EmbedRequest(inputs=["tiny"]), metadata=svc.metadata(agent_id="frugal"))
    assert small.usage.input_tokens == 1
