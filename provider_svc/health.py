"""Which models are healthy, for price routing (docs/design.md §6).

A `choose: cheapest` route skips a model whose breaker is open or that its upstream rate-limits:
- its breaker opens after `gateway.health.failure_threshold` consecutive failed calls (after the
  retries: UPSTREAM_UNAVAILABLE, UPSTREAM_TIMEOUT, malformed replies) and stays open `open_s`; then
  one call may try it again (half-open): a success closes it, a failure opens it again;
- a 429 (RATE_LIMITED after the retries) marks it out of quota until its Retry-After, at least
  `rate_limited_s`.

Per replica, in memory: a replica learns of a sick upstream from its own calls within
`failure_threshold` of them, which is what routing needs (a wrong guess costs one fallback).
Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from agentmesh.config import ModelHealthSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from provider_svc.models.base import CallContext, Model, ModelRequest, ModelResponse, StreamEvent
from provider_svc.models.wrapper import WrapperModel

__all__ = ["HealthTrackedModel", "ModelHealth"]

_SICK = frozenset({ErrorCode.UPSTREAM_UNAVAILABLE, ErrorCode.UPSTREAM_TIMEOUT})


@dataclass
class _State:
    failures: int = 0
    open_until: float = 0.0
    limited_until: float = 0.0


class ModelHealth:
    """Per model: consecutive failures, the breaker, the upstream's rate limit."""

    def __init__(self, settings: ModelHealthSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self._states: dict[str, _State] = {}

    def healthy(self, name: str) -> bool:
        """Whether a price route may pick `name` now (its breaker closed or half-open, in quota)."""
        state = self._states.get(name)
        if state is None:
            return True
        now = self.clock()
        return now >= state.open_until and now >= state.limited_until

    def why_not(self, name: str) -> str:
        """ "breaker open" / "rate-limited" / "" for a healthy model."""
        state = self._states.get(name)
        now = self.clock()
        if state is not None and now < state.open_until:
            return "breaker open"
        if state is not None and now < state.limited_until:
            return "rate-limited"
        return ""

    def succeeded(self, name: str) -> None:
        state = self._states.get(name)
        if state is not None:
            state.failures = 0
            state.open_until = 0.0

    def failed(self, name: str, err: AgentmeshError) -> None:
        now = self.clock()
        if err.code == ErrorCode.RATE_LIMITED:
            state = self._states.setdefault(name, _State())
            state.limited_until = now + max(err.retry_after or 0.0, self.settings.rate_limited_s)
            return
        if err.code not in _SICK:
            return  # the request's fault, or the caller's: says nothing about the model
        state = self._states.setdefault(name, _State())
        state.failures += 1
        if state.failures >= self.settings.failure_threshold:
            state.open_until = now + self.settings.open_s


class HealthTrackedModel(WrapperModel):
    """Reports each call's outcome (after its retries) to a `ModelHealth`."""

    def __init__(self, wrapped: Model, health: ModelHealth) -> None:
        super().__init__(wrapped)
        self.health = health

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        try:
            response = await self.wrapped.request(request, ctx)
        except AgentmeshError as err:
            self.health.failed(self.name, err)
            raise
        self.health.succeeded(self.name)
        return response

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        try:
            async for event in self.wrapped.request_stream(request, ctx):
                yield event
        except AgentmeshError as err:
            self.health.failed(self.name, err)
            raise
        self.health.succeeded(self.name)
