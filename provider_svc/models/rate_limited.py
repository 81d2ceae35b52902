"""A Redis token bucket per API key (default 60/min), shared by every replica (docs/design.md §6).

One token per upstream call (retries included: this wrapper sits inside retry). Without a token
the call waits for one, up to `max_wait_s` and never past the caller's deadline; then it fails
RATE_LIMITED with retry_after (marked as ours, so the retry layer does not wait again). A Redis
outage fails the call UNAVAILABLE rather than let calls through unmetered.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from provider_svc.models.base import CallContext, Model, ModelRequest, ModelResponse, StreamEvent
from provider_svc.models.retry import LOCAL_LIMITER
from provider_svc.models.wrapper import WrapperModel

__all__ = ["RateLimitedModel", "bucket_subject"]


def bucket_subject(backend: str, api_key: str, base_url: str = "") -> str:
    """The bucket's id: a digest of the key (never the key), or of the endpoint when keyless."""
    secret = api_key or f"{backend}@{base_url}"
    return "provider:" + hashlib.sha256(secret.encode()).hexdigest()[:32]


class RateLimitedModel(WrapperModel):
    """Takes a token from the bucket `subject` before each upstream call."""

    def __init__(
        self,
        wrapped: Model,
        store: Store,
        subject: str,
        *,
        per_minute: float,
        burst: int | None = None,
        max_wait_s: float = 10.0,
    ) -> None:
        super().__init__(wrapped)
        if per_minute <= 0:
            raise ValueError("per_minute must be > 0")
        self.store = store
        self.key = store.keys.ratelimit(subject)
        self.refill_per_second = per_minute / 60
        self.capacity = float(burst if burst is not None else max(1, round(per_minute)))
        self.max_wait_s = max_wait_s

    async def _take(self, ctx: CallContext) -> None:
        give_up = time.monotonic() + self.max_wait_s
        while True:
            result = await self.store.take_token(self.key, self.capacity, self.refill_per_second)
            if result.allowed:
                return
            now = time.monotonic()
            remaining = ctx.remaining()
            limit = give_up - now if remaining is None else min(give_up - now, remaining)
            if result.retry_after_s > limit:
                raise AgentmeshError(
                    ErrorCode.RATE_LIMITED,
                    f"{self.provider.name}: request rate limit reached ({self.refill_per_second * 60:g}/min)",
                    retryable=True,
                    retry_after=result.retry_after_s,
                    metadata={"limiter": LOCAL_LIMITER, "provider": self.provider.name},
                )
            await asyncio.sleep(result.retry_after_s)

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        await self._take(ctx)
        return await self.wrapped.request(request, ctx)

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        await self._take(ctx)
        async for event in self.wrapped.request_stream(request, ctx):
            yield event
