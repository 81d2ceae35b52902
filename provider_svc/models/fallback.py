"""A fallback chain: the next model is tried when one fails with an ENGINEERING error.

Not on CONTRACT/FATAL errors, and not on ENGINEERING errors that another model cannot fix because
the request itself is at fault or the caller is gone: INVALID_REQUEST (our validation), UPSTREAM_REJECTED
(the upstream's 400), CANCELLED and DEADLINE_EXCEEDED. It does move on after UNAVAILABLE / timeouts /
429 (after the retry layer gave up), PROVIDER_AUTH_FAILED (e.g. an unset key), UPSTREAM_NOT_FOUND,
CONTEXT_LENGTH_EXCEEDED and CONTENT_FILTERED: another model may well accept the same request.
A stream falls back only while it has not yielded anything.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence

from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from provider_svc.models.base import CallContext, Model, ModelRequest, ModelResponse, ProviderInfo, StreamEvent

__all__ = ["NO_FALLBACK_CODES", "FallbackModel", "should_fall_back"]

log = logging.getLogger("provider_svc.fallback")

NO_FALLBACK_CODES = frozenset(
    {ErrorCode.INVALID_REQUEST, ErrorCode.UPSTREAM_REJECTED, ErrorCode.CANCELLED, ErrorCode.DEADLINE_EXCEEDED}
)


def should_fall_back(err: AgentmeshError) -> bool:
    return err.error_class == ErrorClass.ENGINEERING and err.code not in NO_FALLBACK_CODES


class FallbackModel:
    """Tries `models` in order; answers as the first one (name, provider) for routing purposes."""

    def __init__(self, models: Sequence[Model]) -> None:
        if not models:
            raise ValueError("a fallback chain needs at least one model")
        self.models = tuple(models)

    @property
    def name(self) -> str:
        return self.models[0].name

    @property
    def provider(self) -> ProviderInfo:
        return self.models[0].provider

    def _next(self, err: AgentmeshError, index: int, ctx: CallContext) -> bool:
        remaining = ctx.remaining()
        if index + 1 >= len(self.models) or not should_fall_back(err) or (remaining is not None and remaining <= 0):
            return False
        log.warning(
            "%s failed with %s; falling back to %s", self.models[index].name, err.code.name, self.models[index + 1].name
        )
        return True

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        for index, model in enumerate(self.models):
            try:
                return await model.request(request, ctx)
            except AgentmeshError as err:
                if not self._next(err, index, ctx):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        for index, model in enumerate(self.models):
            yielded = False
            try:
                async for event in model.request_stream(request, ctx):
                    yielded = True
                    yield event
                return
            except AgentmeshError as err:
                if yielded or not self._next(err, index, ctx):
                    raise

    def __repr__(self) -> str:
        return f"FallbackModel({list(self.models)!r})"
