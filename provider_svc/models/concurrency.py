"""A per-backend semaphore (default 8): at most that many upstream calls in flight per replica.

Waiting for a slot is bounded by the caller's deadline (DEADLINE_EXCEEDED, nothing sent). The slot
is held for the upstream call only, not during retry backoff (this wrapper sits inside retry).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from agentmesh.errors import AgentmeshError, ErrorCode
from provider_svc.models.base import CallContext, Model, ModelRequest, ModelResponse, StreamEvent
from provider_svc.models.wrapper import WrapperModel

__all__ = ["ConcurrencyLimitedModel"]


class ConcurrencyLimitedModel(WrapperModel):
    """Holds one slot of `semaphore` (shared by a backend's models) per upstream call."""

    def __init__(self, wrapped: Model, semaphore: asyncio.Semaphore) -> None:
        super().__init__(wrapped)
        self.semaphore = semaphore

    async def _acquire(self, ctx: CallContext) -> None:
        remaining = ctx.remaining()
        try:
            async with asyncio.timeout(remaining if remaining is None else max(remaining, 0)):
                await self.semaphore.acquire()
        except TimeoutError:
            raise AgentmeshError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"no free upstream slot for {self.name} before the caller's deadline",
                metadata={"provider": self.provider.name},
            ) from None

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        await self._acquire(ctx)
        try:
            return await self.wrapped.request(request, ctx)
        finally:
            self.semaphore.release()

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        await self._acquire(ctx)
        try:
            async for event in self.wrapped.request_stream(request, ctx):
                yield event
        finally:
            self.semaphore.release()
