"""No API key, identity token or baggage goes where it does not belong; the trace context does.

Calls go through the real gRPC service with an identity token, W3C baggage, traceparent and an
x-request-id; upstream errors echo the key back. Then the fake's received headers, every captured
log line, every exported span, every error and ListModels are grepped. The model server gets the
call's trace (`traceparent` of provider_svc's CLIENT span, in the caller's trace) and its
`x-request-id` (issue 42), and nothing else of the incoming call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import grpc.aio
import pytest

from agentmesh.callctx import IDENTITY_HEADER, REQUEST_ID_HEADER
from agentmesh.v1 import common_pb2, provider_pb2, provider_pb2_grpc
from provider_svc.server import SPEC
from tests.conftest import RunningService
from tests.contract.provider.conftest import ANTHROPIC_KEY, FAST_RETRY, OPENAI_KEY, backend
from tests.contract.provider.fakes import FakeProvider, Reply

Start = Callable[..., Awaitable[RunningService]]
NEVER_FORWARDED = ("baggage", IDENTITY_HEADER)
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


async def test_keys_tokens_and_internal_metadata_stay_home(
    start_service: Start,
    openai_fake: FakeProvider,
    anthropic_fake: FakeProvider,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    svc = await start_service(
        SPEC,
        {
            "telemetry": {"log_level": "DEBUG"},
            "providers": {
                "backends": [
                    backend("openai", openai_fake, retry={**FAST_RETRY, "max_retries": 1}),
                    backend("claude", anthropic_fake, retry={**FAST_RETRY, "max_retries": 0}),
                    {
                        "name": "scripted",
                        "type": "scripted",
                        "rate_limit_per_min": None,
                        "models": [{"name": "default"}],
                    },
                ],
                "default_model": "scripted/default",
                "fallbacks": {"openai/m1": ["claude/m1"]},
            },
        },
    )
    token = svc.token(agent_id="agent-secret-check")
    request_id = "req-provider-secret-check-1"
    metadata = (
        (IDENTITY_HEADER, token),
        (REQUEST_ID_HEADER, request_id),
        ("baggage", "agentmesh.request_id=" + request_id + ",tenant=acme"),
        ("traceparent", f"00-{TRACE_ID}-b7ad6b7169203331-01"),
    )
    stub = provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    req = provider_pb2.GenerateRequest(
        model="openai/m1", messages=[common_pb2.Message(role=common_pb2.ROLE_USER, content="hello")]
    )

    # 1: success through OpenAI, streamed and not.
    await stub.Generate(req, metadata=metadata)
    async for _ in stub.GenerateStream(provider_pb2.GenerateStreamRequest(request=req), metadata=metadata):
        pass
    # 2: upstream errors that echo our keys back; a 503 retried, then the fallback's 401.
    openai_fake.push(
        Reply.error(503, f"upstream broke for key {OPENAI_KEY}"),
        Reply.error(401, f"Incorrect API key provided: {OPENAI_KEY}"),
    )
    anthropic_fake.push(Reply.error(401, f"invalid x-api-key {ANTHROPIC_KEY}", error_type="authentication_error"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(req, metadata=metadata)
    errors = [caught.value.details() or "", repr(caught.value.trailing_metadata())]
    listing = await stub.ListModels(provider_pb2.ListModelsRequest(), metadata=metadata)
    svc.host.telemetry.force_flush()

    # The fakes saw our key in the auth header only, and none of the internal metadata.
    for fake, key, header in ((openai_fake, OPENAI_KEY, "authorization"), (anthropic_fake, ANTHROPIC_KEY, "x-api-key")):
        received = fake.requests()
        assert received
        for r in received:
            assert key in r.headers[header]
            assert not [h for h in NEVER_FORWARDED if h in r.headers]
            # The trace and the request continue upstream: a span of our own in the caller's trace.
            assert r.headers["traceparent"].startswith(f"00-{TRACE_ID}-")
            assert r.headers["traceparent"] != f"00-{TRACE_ID}-b7ad6b7169203331-01"
            assert r.headers[REQUEST_ID_HEADER] == request_id
            others = {k: v for k, v in r.headers.items() if k != header}
            assert key not in repr(others)
            assert token not in repr(r.headers) and token.encode() not in r.body
            assert request_id.encode() not in r.body

    logs = capsys.readouterr().err + "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records)
    spans = await asyncio.to_thread(Path(svc.settings.telemetry.span_file).read_text, encoding="utf-8")
    assert "chat m1" in spans and "gen_ai.usage.input_tokens" in spans  # the spans were exported
    assert request_id in spans  # and they do carry the request id, as they should
    for where, text in (("logs", logs), ("spans", spans), ("errors", "\n".join(errors)), ("ListModels", str(listing))):
        for secret in (OPENAI_KEY, ANTHROPIC_KEY, token):
            assert secret not in text, f"a secret leaked into {where}"
    assert "***" in errors[0]  # the echoed key was scrubbed, not just lost


GITHUB_PAT = "ghp_R8kq2Zt7Lw0XbN4vYc9Pj6Hs1Fm3Ud5Ea8Gi"
AWS_SECRET = "k8Jd2LmQ/9xZ+vB4nR7tY1wE5sA3fG6hJ0cV2bN4"


async def test_an_upstream_error_body_quoting_a_foreign_secret_leaves_none(
    start_service: Start, openai_fake: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 40: an error body that quotes someone else's secrets (not our key: the redactor, not the
    key scrubbing, must catch them): no 12-character run of either in the error, the logs or the spans."""
    caplog.set_level("DEBUG")
    svc = await start_service(
        SPEC,
        {
            "telemetry": {"log_level": "DEBUG"},
            "providers": {
                "backends": [backend("openai", openai_fake, retry={**FAST_RETRY, "max_retries": 1})],
                "default_model": "openai/m1",
            },
        },
    )
    body = f"proxy refused: token {GITHUB_PAT} revoked; aws_secret_access_key={AWS_SECRET}"
    openai_fake.push(Reply.error(503, body), Reply.error(400, body))
    stub = provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    req = provider_pb2.GenerateRequest(
        model="openai/m1", messages=[common_pb2.Message(role=common_pb2.ROLE_USER, content="hello")]
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(req, metadata=((IDENTITY_HEADER, svc.token(agent_id="agent-body-check")),))
    error = f"{caught.value.details()} {caught.value.trailing_metadata()!r}"
    assert "[REDACTED]" in error  # the body is quoted, masked
    svc.host.telemetry.force_flush()
    spans = await asyncio.to_thread(Path(svc.settings.telemetry.span_file).read_text, encoding="utf-8")
    assert "chat m1" in spans
    logs = "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records)
    for where, text in (("the error", error), ("the spans", spans), ("the logs", logs)):
        for secret in (GITHUB_PAT, AWS_SECRET):
            runs = [secret[i : i + 12] for i in range(len(secret) - 11)]
            assert not [run for run in runs if run in text], f"{secret!r} leaked into {where}"
