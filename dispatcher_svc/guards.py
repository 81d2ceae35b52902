"""Guards that stop a task before it does something unsafe or unpaid (docs/design.md §7).

Each returns None when the task may go on, or the typed error that stops it: FATAL errors
(budget, max steps, loop) abort the task; a passed deadline fails it.
"""

from __future__ import annotations

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode


def budget(*, spent: int, prompt_tokens: int, reserve_tokens: int, token_budget: int) -> AgentmeshError | None:
    """BUDGET_EXHAUSTED if the next model call could take the task over its token budget.

    The call could use the prompt plus up to `reserve_tokens` of completion; it is refused
    before it is made, never after.
    """
    needed = spent + prompt_tokens + reserve_tokens
    if needed <= token_budget:
        return None
    return AgentmeshError(
        ErrorCode.BUDGET_EXHAUSTED,
        f"the next model call could use {prompt_tokens} prompt + {reserve_tokens} completion tokens; "
        f"with {spent} already spent that exceeds the task's budget of {token_budget}",
        metadata={
            "spent_tokens": str(spent),
            "prompt_tokens": str(prompt_tokens),
            "reserve_tokens": str(reserve_tokens),
            "token_budget": str(token_budget),
        },
    )


def max_steps(*, steps_done: int, limit: int) -> AgentmeshError | None:
    """MAX_STEPS_EXCEEDED once `limit` steps are done and the model still wants another."""
    if steps_done < limit:
        return None
    return AgentmeshError(
        ErrorCode.MAX_STEPS_EXCEEDED,
        f"the task used all {limit} of its steps without an answer",
        metadata={"max_steps": str(limit)},
    )


def loop(call: ToolCall, *, times: int, threshold: int) -> AgentmeshError | None:
    """LOOP_DETECTED when the same tool with the same arguments is issued the `threshold`-th time."""
    if times < threshold:
        return None
    return AgentmeshError(
        ErrorCode.LOOP_DETECTED,
        f"{call.name} was called {times} times with the same arguments; the task is going in circles",
        metadata={"tool": call.name, "times": str(times), "signature": call.signature()},
    )


def deadline(*, now_ms: int, deadline_ms: int) -> AgentmeshError | None:
    """DEADLINE_EXCEEDED once the task's deadline has passed."""
    if now_ms < deadline_ms:
        return None
    return AgentmeshError(
        ErrorCode.DEADLINE_EXCEEDED,
        f"the task's deadline passed {(now_ms - deadline_ms) / 1000:.1f}s ago",
        metadata={"deadline_ms": str(deadline_ms)},
    )
