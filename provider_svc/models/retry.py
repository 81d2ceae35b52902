"""Retries of transient upstream failures: the one retry layer of provider_svc (docs/design.md §6).

Retried: network errors and timeouts, 5xx / 529 (UPSTREAM_UNAVAILABLE) and 429 (RATE_LIMITED),
when the error says it is retryable. Never: any other 4xx, malformed bodies (the call may have
been billed), our own rate limiter's refusal (it already waited). Backoff: base x multiplier^n,
capped, plus random jitter; a Retry-After from the upstream is honoured instead. No retry starts
when its delay would end past the caller's deadline, or when Retry-After exceeds
`max_retry_after_s` (the caller gets the 429 with its retry_after at once).

Every attempt, failed or not, is appended to `ctx.attempts`. A stream is retried only while it
has not yielded anything.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from agentmesh.backoff import Backoff
from agentmesh.errors import AgentmeshError, ErrorCode
from provider_svc.models.base import (
    Attempt,
    CallContext,
    Model,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    StreamFinal,
)
from provider_svc.models.wrapper import WrapperModel

__all__ = ["RETRIED_CODES", "RetryModel", "RetryPolicy", "http_status_of", "retry_delay", "should_retry"]

log = logging.getLogger("provider_svc.retry")

RETRIED_CODES = frozenset({ErrorCode.UPSTREAM_UNAVAILABLE, ErrorCode.UPSTREAM_TIMEOUT, ErrorCode.RATE_LIMITED})
LOCAL_LIMITER = "agentmesh"
"""`metadata["limiter"]` of a RATE_LIMITED raised by our own token bucket (not retried here)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """docs/design.md §6 defaults: max 3 retries, base 1 s, x2, cap 8 s, jitter."""

    max_retries: int = 3
    base_s: float = 1.0
    multiplier: float = 2.0
    cap_s: float = 8.0
    jitter_s: float = 0.5
    max_retry_after_s: float = 60.0

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """Delay before retry number `retry` (1-based), jitter included: the shared schedule
        (`agentmesh.backoff`, the one every retry loop uses) with a random draw."""
        schedule = Backoff(self.base_s, self.cap_s, multiplier=self.multiplier, jitter_s=self.jitter_s)
        return schedule.delay(retry, (rng or random).random())


def should_retry(err: AgentmeshError) -> bool:
    return err.code in RETRIED_CODES and err.retryable and err.metadata.get("limiter") != LOCAL_LIMITER


def retry_delay(
    policy: RetryPolicy, err: AgentmeshError, retry: int, ctx: CallContext, rng: random.Random | None = None
) -> float | None:
    """Seconds to wait before retry number `retry` (1-based), or None to give up with `err`: not a
    retried failure, retries used up, a Retry-After over the policy's bound, or a delay past the deadline."""
    if not should_retry(err) or retry > policy.max_retries:
        return None
    if err.retry_after is not None:
        if err.retry_after > policy.max_retry_after_s:
            return None
        delay = err.retry_after
    else:
        delay = policy.backoff(retry, rng)
    remaining = ctx.remaining()
    if remaining is not None and delay >= remaining:
        return None
    return delay


def http_status_of(err: AgentmeshError) -> int:
    status = getattr(err, "http_status", 0)
    return status if isinstance(status, int) else 0


class RetryModel(WrapperModel):
    """Retries `wrapped` per `policy`, recording every attempt in the call context."""

    def __init__(self, wrapped: Model, policy: RetryPolicy, *, rng: random.Random | None = None) -> None:
        super().__init__(wrapped)
        self.policy = policy
        self._rng = rng or random.Random()

    def _delay(self, err: AgentmeshError, retry: int, ctx: CallContext) -> float | None:
        return retry_delay(self.policy, err, retry, ctx, self._rng)

    def _record(self, ctx: CallContext, started: float, err: AgentmeshError | None, status: int) -> None:
        ctx.attempts.append(Attempt(self.name, err, status, time.monotonic() - started))

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        retry = 0
        while True:
            started = time.monotonic()
            try:
                response = await self.wrapped.request(request, ctx)
            except AgentmeshError as err:
                self._record(ctx, started, err, http_status_of(err))
                retry += 1
                delay = self._delay(err, retry, ctx)
                if delay is None:
                    raise
                log.info("retrying %s in %.2fs after %s (retry %d)", self.name, delay, err.code.name, retry)
                await asyncio.sleep(delay)
                continue
            self._record(ctx, started, None, response.http_status)
            return response

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        retry = 0
        while True:
            started = time.monotonic()
            yielded = False
            try:
                async for event in self.wrapped.request_stream(request, ctx):
                    if isinstance(event, StreamFinal):
                        self._record(ctx, started, None, event.response.http_status)
                    yielded = True
                    yield event
                return
            except AgentmeshError as err:
                self._record(ctx, started, err, http_status_of(err))
                retry += 1
                delay = None if yielded else self._delay(err, retry, ctx)
                if delay is None:
                    raise
                log.info("retrying stream of %s in %.2fs after %s (retry %d)", self.name, delay, err.code.name, retry)
                await asyncio.sleep(delay)
