"""Execution with a per-attempt timeout and retries of transient faults (docs/design.md §5).

Only UPSTREAM_TIMEOUT and UPSTREAM_UNAVAILABLE are transient, and only read-only or idempotent tools are
retried: repeating a write that may have happened could do it twice. Delays: initial * 2^(n-1), capped,
plus uniform jitter (defaults 1 s, 2 s, 4 s + 0-500 ms); none is started that would outlive the caller's
deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from agentmesh import callctx
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.redacted import traceback_text
from tool_svc.call import CallState
from tool_svc.model import Executor, Invocation, Outcome, Produced, RetryPolicy, ToolDef

log = logging.getLogger("tool_svc.retry")

T = TypeVar("T")

TRANSIENT: frozenset[ErrorCode] = frozenset({ErrorCode.UPSTREAM_TIMEOUT, ErrorCode.UPSTREAM_UNAVAILABLE})
# Time kept back from the caller's deadline so our answer still reaches it.
_DEADLINE_MARGIN_S = 0.05


def backoff_delay(policy: RetryPolicy, retry: int, rng: random.Random | None = None) -> float:
    """Delay before retry number `retry` (1-based): the policy's schedule (`agentmesh.backoff`, the one
    every retry loop uses), spread by a random draw (none drawn when the policy has no jitter)."""
    draw = (rng or random).random() if policy.max_jitter_s > 0 else 0.0
    return policy.schedule.delay(retry, draw)


def retryable(tool: ToolDef, err: AgentmeshError) -> bool:
    return err.code in TRANSIENT and (tool.read_only or tool.idempotent)


@dataclass
class Attempted(Generic[T]):
    """The final value or error and how many attempts it took."""

    value: T | None
    error: AgentmeshError | None
    attempts: int
    errors: list[AgentmeshError]


async def run_with_retries(
    attempt: Callable[[], Awaitable[T]],
    tool: ToolDef,
    *,
    remaining: Callable[[], float | None],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> Attempted[T]:
    """Runs `attempt` under the tool's timeout, retrying transient faults per its policy."""
    policy = tool.retry
    max_attempts = max(1, policy.max_attempts)
    errors: list[AgentmeshError] = []
    for number in range(1, max_attempts + 1):
        left = remaining()
        timeout = tool.timeout_s if left is None else min(tool.timeout_s, left - _DEADLINE_MARGIN_S)
        if timeout <= 0:
            err = AgentmeshError(
                ErrorCode.UPSTREAM_TIMEOUT,
                f"{tool.name}: no time left before the caller's deadline",
                fallback_tool=tool.fallback_tool,
            )
            errors.append(err)
            return Attempted(None, err, number - 1, errors)
        try:
            async with asyncio.timeout(timeout):
                value = await attempt()
            return Attempted(value, None, number, errors)
        except TimeoutError:
            err = AgentmeshError(
                ErrorCode.UPSTREAM_TIMEOUT,
                f"{tool.name} did not answer within {timeout:.3g}s",
                fallback_tool=tool.fallback_tool,
            )
        except AgentmeshError as exc:
            err = exc
        errors.append(err)
        if number == max_attempts or not retryable(tool, err):
            return Attempted(None, err, number, errors)
        delay = backoff_delay(policy, number, rng)
        left = remaining()
        if left is not None and left - delay - _DEADLINE_MARGIN_S <= 0:
            return Attempted(None, err, number, errors)
        log.info("retrying %s after %s (attempt %d, delay %.3fs)", tool.name, err.code.name, number, delay)
        await sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


class Execute:
    """Pipeline step: run the tool's executor under its timeout, with retries of transient faults."""

    def __init__(
        self,
        executors: Mapping[str, Executor],
        http: Executor,
        *,
        mcp: Executor | None = None,
        remaining: Callable[[], float | None] = callctx.remaining_time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.executors = executors
        self.http = http
        self.mcp = mcp
        self.remaining = remaining
        self.sleep = sleep
        self.rng = rng

    async def __call__(self, call: CallState) -> Outcome | None:
        spec = call.spec
        executor: Executor | None
        if spec.executor == "http":
            executor = self.http
        elif spec.executor == "mcp":
            executor = self.mcp
        else:
            executor = self.executors.get(spec.builtin)
        if executor is None:
            return AgentmeshError(
                ErrorCode.INTERNAL, f"{spec.name}: no executor {spec.builtin or spec.executor!r} in this build"
            )
        invocation = Invocation(
            tool=spec,
            arguments=call.arguments,
            session_id=call.request.session_id,
            goal=call.request.goal,
            timeout_s=spec.timeout_s,
            caller=call.caller,
            idempotency_key=call.request.idempotency_key,
        )

        async def attempt() -> Produced:
            try:
                return await executor(invocation)
            except AgentmeshError:
                raise
            except Exception as exc:
                # A bug in an executor is our fault, not the model's: typed, logged (masked: the text may
                # quote the upstream's answer), never a traceback to the caller.
                log.error("executor of %s failed\n%s", spec.name, traceback_text(exc))
                raise AgentmeshError(
                    ErrorCode.INTERNAL, f"{spec.name} failed unexpectedly", fallback_tool=spec.fallback_tool
                ) from None

        for hook in call.before_send:
            await hook()
        call.executed = True
        done = await run_with_retries(attempt, spec, remaining=self.remaining, sleep=self.sleep, rng=self.rng)
        call.stats.attempts = done.attempts
        if done.error is not None:
            call.exec_error = done.error
            return done.error
        call.produced = done.value
        return None
