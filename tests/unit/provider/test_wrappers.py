"""Wrappers around any Model, with an in-memory model: retry, fallback, concurrency, GenAI spans."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError
from provider_svc.exceptions import UpstreamError
from provider_svc.models.base import (
    CallContext,
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ProviderInfo,
    Role,
    Sampling,
    StreamEvent,
    StreamFinal,
    TextDelta,
    Usage,
)
from provider_svc.models.concurrency import ConcurrencyLimitedModel
from provider_svc.models.fallback import FallbackModel, should_fall_back
from provider_svc.models.instrumented import InstrumentedModel
from provider_svc.models.retry import RetryModel, RetryPolicy

REQUEST = ModelRequest((Message(Role.USER, "hi"),), sampling=Sampling(temperature=0.3, max_tokens=20))
FAST = RetryPolicy(max_retries=3, base_s=0.001, cap_s=0.002, jitter_s=0)


class Scripted:
    """A model answering from a list of outcomes (errors raised, strings answered)."""

    def __init__(self, name: str, outcomes: list[AgentmeshError | str], delay_s: float = 0) -> None:
        self._name = name
        self.outcomes = outcomes
        self.calls = 0
        self.delay_s = delay_s

    @property
    def name(self) -> str:
        return self._name

    @property
    def provider(self) -> ProviderInfo:
        return ProviderInfo(self._name.split("/")[0], "openai")

    def _next(self) -> str:
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        if isinstance(outcome, AgentmeshError):
            raise outcome
        return outcome

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        await asyncio.sleep(self.delay_s)
        text = self._next()
        return ModelResponse(Message(Role.ASSISTANT, text), FinishReason.STOP, Usage(3, 4), self._name, http_status=200)

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        yield TextDelta("x")
        text = self._next()
        yield StreamFinal(ModelResponse(Message(Role.ASSISTANT, text), FinishReason.STOP, Usage(), self._name))


def _err(code: ErrorCode, status: int = 0, **kw: object) -> UpstreamError:
    return UpstreamError(code, code.name, provider="p", http_status=status, **kw)  # type: ignore[arg-type]


async def test_retry_records_every_attempt() -> None:
    inner = Scripted("p/m", [_err(ErrorCode.UPSTREAM_UNAVAILABLE, 503), _err(ErrorCode.UPSTREAM_TIMEOUT), "ok"])
    ctx = CallContext()
    response = await RetryModel(inner, FAST).request(REQUEST, ctx)
    assert response.message.content == "ok" and inner.calls == 3
    assert [(a.http_status, a.error.code if a.error else None) for a in ctx.attempts] == [
        (503, ErrorCode.UPSTREAM_UNAVAILABLE),
        (0, ErrorCode.UPSTREAM_TIMEOUT),
        (200, None),
    ]


@pytest.mark.parametrize(
    "err",
    [
        _err(ErrorCode.UPSTREAM_REJECTED, 400),
        _err(ErrorCode.PROVIDER_AUTH_FAILED, 401),
        _err(ErrorCode.UPSTREAM_UNAVAILABLE, 200, retryable=False),  # a malformed body
        AgentmeshError(ErrorCode.RATE_LIMITED, "ours", retryable=True, metadata={"limiter": "agentmesh"}),
        InvalidRequestError("sampling.top_p", "bad"),
        AgentmeshError(ErrorCode.DEADLINE_EXCEEDED, "late"),
    ],
)
async def test_retry_never_repeats_these(err: AgentmeshError) -> None:
    inner = Scripted("p/m", [err, "ok"])
    with pytest.raises(AgentmeshError):
        await RetryModel(inner, FAST).request(REQUEST, CallContext())
    assert inner.calls == 1


def test_backoff_schedule() -> None:
    policy = RetryPolicy()  # docs/design.md §6: base 1 s, x2, cap 8 s, jitter
    rng = random.Random(1)
    delays = [policy.backoff(n, rng) for n in range(1, 6)]
    for n, delay in enumerate(delays, 1):
        base = min(8.0, 2.0 ** (n - 1))
        assert base <= delay <= base + policy.jitter_s


async def test_retry_gives_up_when_the_delay_would_pass_the_deadline() -> None:
    inner = Scripted("p/m", [_err(ErrorCode.RATE_LIMITED, 429, retry_after=0.5), "ok"])
    ctx = CallContext.with_timeout(0.2)
    with pytest.raises(AgentmeshError) as caught:
        await RetryModel(inner, FAST).request(REQUEST, ctx)
    assert caught.value.code == ErrorCode.RATE_LIMITED and inner.calls == 1


async def test_stream_retry_only_before_the_first_event() -> None:
    inner = Scripted("p/m", [_err(ErrorCode.UPSTREAM_UNAVAILABLE, 503), "ok"])
    ctx = CallContext()
    with pytest.raises(AgentmeshError):
        async for _ in RetryModel(inner, FAST).request_stream(REQUEST, ctx):
            pass
    assert inner.calls == 1 and len(ctx.attempts) == 1


async def test_fallback_moves_on_engineering_failures_only() -> None:
    assert should_fall_back(_err(ErrorCode.UPSTREAM_UNAVAILABLE))
    assert should_fall_back(_err(ErrorCode.PROVIDER_AUTH_FAILED))
    assert should_fall_back(_err(ErrorCode.CONTEXT_LENGTH_EXCEEDED))
    assert not should_fall_back(InvalidRequestError("x", "y"))
    assert not should_fall_back(_err(ErrorCode.UPSTREAM_REJECTED))
    assert not should_fall_back(AgentmeshError(ErrorCode.SCHEMA_INVALID))
    assert not should_fall_back(AgentmeshError(ErrorCode.BUDGET_EXHAUSTED))

    first, second = Scripted("a/m", [_err(ErrorCode.UPSTREAM_UNAVAILABLE)]), Scripted("b/m", ["from b"])
    chain = FallbackModel([first, second])
    assert chain.name == "a/m"
    assert (await chain.request(REQUEST, CallContext())).message.content == "from b"

    stopped = FallbackModel([Scripted("a/m", [InvalidRequestError("x", "y")]), Scripted("b/m", ["never"])])
    with pytest.raises(InvalidRequestError):
        await stopped.request(REQUEST, CallContext())

    last = FallbackModel(
        [Scripted("a/m", [_err(ErrorCode.UPSTREAM_UNAVAILABLE)]), Scripted("b/m", [_err(ErrorCode.UPSTREAM_TIMEOUT)])]
    )
    with pytest.raises(AgentmeshError) as caught:
        await last.request(REQUEST, CallContext())
    assert caught.value.code == ErrorCode.UPSTREAM_TIMEOUT  # the last model's error

    with pytest.raises(ValueError):
        FallbackModel([])


async def test_stream_fallback_before_first_event() -> None:
    class Failing(Scripted):
        async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
            raise _err(ErrorCode.UPSTREAM_UNAVAILABLE)
            yield  # pragma: no cover

    chain = FallbackModel([Failing("a/m", ["x"]), Scripted("b/m", ["from b"])])
    events = [e async for e in chain.request_stream(REQUEST, CallContext())]
    assert isinstance(events[-1], StreamFinal) and events[-1].response.model == "b/m"


async def test_concurrency_limit_and_deadline_while_waiting() -> None:
    semaphore = asyncio.Semaphore(2)
    inner = Scripted("p/m", ["ok"], delay_s=0.05)
    model = ConcurrencyLimitedModel(inner, semaphore)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, 2 - semaphore._value)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    await asyncio.gather(*(model.request(REQUEST, CallContext()) for _ in range(6)))
    watcher.cancel()
    assert inner.calls == 6 and peak == 2
    async with semaphore, semaphore:
        with pytest.raises(AgentmeshError) as caught:
            await model.request(REQUEST, CallContext.with_timeout(0.05))
    assert caught.value.code == ErrorCode.DEADLINE_EXCEEDED


async def test_instrumented_spans_follow_genai_conventions() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    inner = Scripted("p/gpt-x", [_err(ErrorCode.UPSTREAM_UNAVAILABLE, 503), "ok"])
    model = InstrumentedModel(RetryModel(inner, FAST), tracer)
    await model.request(REQUEST, CallContext())
    failing = InstrumentedModel(RetryModel(Scripted("p/gpt-x", [_err(ErrorCode.UPSTREAM_REJECTED, 400)]), FAST), tracer)
    with pytest.raises(AgentmeshError):
        await failing.request(REQUEST, CallContext())
    async for _ in InstrumentedModel(Scripted("p/gpt-x", ["streamed"]), tracer).request_stream(REQUEST, CallContext()):
        pass
    ok, failed, streamed = exporter.get_finished_spans()
    attrs = dict(ok.attributes or {})
    assert ok.name == "chat gpt-x"
    assert attrs["gen_ai.system"] == "openai" and attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.request.model"] == "gpt-x"
    assert attrs["gen_ai.request.temperature"] == 0.3 and attrs["gen_ai.request.max_tokens"] == 20
    assert attrs["gen_ai.usage.input_tokens"] == 3 and attrs["gen_ai.usage.output_tokens"] == 4
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs["agentmesh.provider.attempts"] == 2
    codes = [(e.attributes or {}).get("agentmesh.error.code") for e in ok.events]
    assert [c for c in codes if c] == ["UPSTREAM_UNAVAILABLE"]
    assert failed.status.status_code == StatusCode.ERROR
    assert dict(failed.attributes or {})["agentmesh.error.code"] == "UPSTREAM_REJECTED"
    assert dict(streamed.attributes or {})["gen_ai.usage.input_tokens"] == 0
