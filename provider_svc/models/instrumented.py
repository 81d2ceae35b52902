"""GenAI spans around a model call (OTel GenAI semantic conventions).

One CLIENT span "chat <model>" per model tried, with `gen_ai.system`, `gen_ai.provider.name`,
`gen_ai.request.model` and the sampling parameters; on success `gen_ai.response.model`,
`gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons`; on
failure the span is in error with our code and class. Each attempt (from the retry layer) is a span
event. Never a message, a prompt or a key: only counts, names and codes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from agentmesh.errors import AgentmeshError
from agentmesh.semconv import (
    ATTR_ERROR_CLASS,
    ATTR_ERROR_CODE,
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_REQUEST_TEMPERATURE,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
)
from provider_svc.models.base import CallContext, Model, ModelRequest, ModelResponse, StreamEvent, StreamFinal
from provider_svc.models.wrapper import WrapperModel

__all__ = ["GEN_AI_SYSTEM", "InstrumentedModel"]

GEN_AI_SYSTEM = "gen_ai.system"
"""The older name of gen_ai.provider.name; both are set for backends that read either."""
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
ATTR_PROVIDER = "agentmesh.provider"
ATTR_ATTEMPTS = "agentmesh.provider.attempts"


class InstrumentedModel(WrapperModel):
    """Wraps `wrapped` in a GenAI span from `tracer` (a no-op tracer when None)."""

    def __init__(self, wrapped: Model, tracer: trace.Tracer | None = None) -> None:
        super().__init__(wrapped)
        self.tracer = tracer or trace.NoOpTracer()
        self.model_id = wrapped.name.partition("/")[2]

    def _attributes(self, request: ModelRequest) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: "chat",
            GEN_AI_SYSTEM: self.provider.type,
            GEN_AI_PROVIDER_NAME: self.provider.type,
            GEN_AI_REQUEST_MODEL: self.model_id,
            ATTR_PROVIDER: self.provider.name,
        }
        sampling = request.sampling
        if sampling.temperature is not None:
            attributes[GEN_AI_REQUEST_TEMPERATURE] = sampling.temperature
        if sampling.top_p is not None:
            attributes[GEN_AI_REQUEST_TOP_P] = sampling.top_p
        if sampling.max_tokens is not None:
            attributes[GEN_AI_REQUEST_MAX_TOKENS] = sampling.max_tokens
        return attributes

    @contextmanager
    def _span(self, request: ModelRequest, ctx: CallContext, *, current: bool = True) -> Iterator[trace.Span]:
        first_attempt = len(ctx.attempts)
        span = self.tracer.start_span(
            f"chat {self.model_id}",
            kind=SpanKind.CLIENT,
            attributes={**self._attributes(request), **ctx.route},
            record_exception=False,
            set_status_on_exception=False,
        )
        # A stream's span is not made current: an async generator may be closed from another
        # context, where detaching would fail; nothing below starts child spans anyway.
        with (
            trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False)
            if current
            else span
        ):
            try:
                yield span
            except AgentmeshError as err:
                span.set_status(Status(StatusCode.ERROR, err.code.name))
                span.set_attribute(ATTR_ERROR_CODE, err.code.name)
                span.set_attribute(ATTR_ERROR_CLASS, err.error_class.name)
                span.set_attribute(ERROR_TYPE, err.code.name)
                raise
            except BaseException as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                span.set_attribute(ERROR_TYPE, type(exc).__name__)
                raise
            finally:
                attempts = ctx.attempts[first_attempt:]
                span.set_attribute(ATTR_ATTEMPTS, len(attempts))
                for number, attempt in enumerate(attempts, 1):
                    event: dict[str, Any] = {
                        "attempt": number,
                        "http_status": attempt.http_status,
                        "duration_ms": round(attempt.duration_s * 1000, 3),
                    }
                    if attempt.error is not None:
                        event[ATTR_ERROR_CODE] = attempt.error.code.name
                    span.add_event("gen_ai.attempt", event)

    def _succeeded(self, span: trace.Span, response: ModelResponse) -> None:
        span.set_attributes(
            {
                GEN_AI_RESPONSE_MODEL: response.provider_model or self.model_id,
                GEN_AI_USAGE_INPUT_TOKENS: response.usage.input_tokens,
                GEN_AI_USAGE_OUTPUT_TOKENS: response.usage.output_tokens,
                GEN_AI_RESPONSE_FINISH_REASONS: [response.finish_reason.value],
            }
        )

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        with self._span(request, ctx) as span:
            response = await self.wrapped.request(request, ctx)
            self._succeeded(span, response)
            return response

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        with self._span(request, ctx, current=False) as span:
            async for event in self.wrapped.request_stream(request, ctx):
                if isinstance(event, StreamFinal):
                    self._succeeded(span, event.response)
                yield event
