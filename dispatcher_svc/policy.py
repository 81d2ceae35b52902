"""The error-class policy (docs/architecture.md §3): what the dispatcher does with each tool outcome.

- CONTRACT: the violations go back to the model with a short correction note; at most
  `max_contract_retries` reflective retries per call, then the call is handled as ENGINEERING.
- ENGINEERING: a structured note (what failed, the code, the `fallback_tool`) goes into context;
  the same failing call is never re-issued (the loop answers a repeat without running it).
- PendingApproval: the task parks in WAITING_APPROVAL.
- FATAL: the task is ABORTED at once with an incident; no further tool runs.

Pure functions: the loop applies the decision (events, checkpoint, context).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from dispatcher_svc.model import ToolOutcome


class Action(enum.Enum):
    OK = "ok"
    CORRECT = "correct"
    FALLBACK = "fallback"
    PARK = "park"
    ABORT = "abort"


@dataclass(frozen=True)
class Decision:
    action: Action
    note: str = ""
    """What the model is told with the result (empty for plain successes)."""
    error: AgentmeshError | None = None
    retries_used: int = 0
    """For CORRECT: which reflective retry this is (1-based)."""
    fallback_tool: str = ""


def decide(
    outcome: ToolOutcome,
    *,
    contract_failures: int,
    max_contract_retries: int,
    spec_fallback: str = "",
) -> Decision:
    """The decision for one tool outcome.

    `contract_failures` counts this tool's CONTRACT failures before this one (consecutive);
    `spec_fallback` is the registry's fallback for the tool, used when the error names none.
    """
    if outcome.pending is not None:
        return Decision(Action.PARK)
    err = outcome.error
    if err is None:
        return Decision(Action.OK)
    fallback = err.fallback_tool or spec_fallback
    cls = err.error_class
    if cls == ErrorClass.FATAL:
        return Decision(Action.ABORT, error=err)
    if cls == ErrorClass.CONTRACT:
        attempt = contract_failures + 1
        if attempt <= max_contract_retries:
            note = (
                f"correction {attempt} of {max_contract_retries}: the call to {outcome.tool_name} was not run. "
                "Fix the arguments using the hints above and call it again."
            )
            return Decision(Action.CORRECT, note=note, error=err, retries_used=attempt, fallback_tool=fallback)
        note = (
            f"the call to {outcome.tool_name} failed its contract {attempt} times; stop correcting it. "
            + _fallback_advice(fallback)
        )
        return Decision(Action.FALLBACK, note=note, error=err, fallback_tool=fallback)
    note = (
        f"{outcome.tool_name} failed with {err.code.name} ({cls.name}): a fault outside your control. "
        f"Do not call {outcome.tool_name} again with the same arguments. " + _fallback_advice(fallback)
    )
    return Decision(Action.FALLBACK, note=note, error=err, fallback_tool=fallback)


def _fallback_advice(fallback: str) -> str:
    if fallback:
        return f"Use the fallback tool {fallback} instead."
    return "No fallback tool exists: use another tool, or answer with what you know and say what failed."


def repeat_of_failure(call: ToolCall, code_name: str, fallback: str) -> AgentmeshError:
    """The error answered, without running it, when the model re-issues a call that already failed."""
    code = ErrorCode.__members__.get(code_name, ErrorCode.INTERNAL)
    return AgentmeshError(
        code,
        f"not run: this exact call to {call.name} already failed with {code_name}; it will fail again",
        fallback_tool=fallback,
        metadata={"repeated_call": "true"},
    )
