"""The base of every cross-cutting wrapper: a Model around a Model, delegating by default.

Wrappers (retry, rate limit, concurrency, fallback, instrumentation) each add one concern and
expose the same interface, so they compose in any order at start-up (docs/design.md §6).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from provider_svc.models.base import CallContext, Model, ModelRequest, ModelResponse, ProviderInfo, StreamEvent

__all__ = ["WrapperModel"]


class WrapperModel:
    """Delegates everything to `wrapped`; subclasses override what they change."""

    def __init__(self, wrapped: Model) -> None:
        self.wrapped = wrapped

    @property
    def name(self) -> str:
        return self.wrapped.name

    @property
    def provider(self) -> ProviderInfo:
        return self.wrapped.provider

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        return await self.wrapped.request(request, ctx)

    def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        return self.wrapped.request_stream(request, ctx)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.wrapped!r})"
