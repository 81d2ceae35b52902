"""The error-class policy (docs/design.md §3): what the dispatcher does with each tool outcome.

- CONTRACT: the violations go back to the model with a typed Correction (fix the arguments); at
  most `max_contract_retries` reflective retries per call, then the call is handled as ENGINEERING.
- ENGINEERING: a Correction (do not repeat the call; the `fallback_tool`) goes into context;
  the same failing call is never re-issued (the loop answers a repeat without running it).
- PendingApproval: the task parks in WAITING_APPROVAL.
- OUTCOME_UNKNOWN (a write may have run; nobody knows): never shown to the model as a failure (it
  would re-issue the call under a new id). The task parks in WAITING_APPROVAL on the call's
  settlement; an operator says RAN or NOT_RAN.
- FATAL: the task is ABORTED at once with an incident; no further tool runs.

Pure functions: the loop applies the decision (events, checkpoint, context).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentmesh.chat import Correction, NextStep, ToolCall
from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode
from dispatcher_svc.model import PendingApproval, ToolOutcome


class Action(enum.Enum):
    OK = "ok"
    CORRECT = "correct"
    FALLBACK = "fallback"
    PARK = "park"
    ABORT = "abort"


@dataclass(frozen=True)
class Decision:
    action: Action
    correction: Correction | None = None
    """What the model is told with the result (None for plain successes)."""
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
    if err is not None and err.code == ErrorCode.OUTCOME_UNKNOWN:
        return Decision(Action.PARK, error=err)
    if err is None:
        return Decision(Action.OK)
    fallback = err.fallback_tool or spec_fallback
    cls = err.error_class
    if cls == ErrorClass.FATAL:
        return Decision(Action.ABORT, error=err)
    if cls == ErrorClass.CONTRACT:
        attempt = contract_failures + 1
        if attempt <= max_contract_retries:
            fix = Correction(NextStep.FIX_ARGUMENTS, attempt=attempt, max_attempts=max_contract_retries)
            return Decision(Action.CORRECT, correction=fix, error=err, retries_used=attempt, fallback_tool=fallback)
        stop = Correction(
            NextStep.STOP_CORRECTING, attempt=attempt, max_attempts=max_contract_retries, fallback_tool=fallback
        )
        return Decision(Action.FALLBACK, correction=stop, error=err, fallback_tool=fallback)
    use = Correction(NextStep.USE_FALLBACK, fallback_tool=fallback)
    return Decision(Action.FALLBACK, correction=use, error=err, fallback_tool=fallback)


def settlement_request(outcome: ToolOutcome, call: ToolCall) -> PendingApproval | None:
    """The settlement an OUTCOME_UNKNOWN waits for, as the task's pending approval (None: it names none)."""
    err = outcome.error
    if err is None or err.code != ErrorCode.OUTCOME_UNKNOWN or not err.metadata.get("settlement_id"):
        return None
    meta = err.metadata
    try:
        expire_ms = int(float(meta.get("expire_at", "0")) * 1000)
    except ValueError:
        expire_ms = 0
    return PendingApproval(
        approval_id=meta["settlement_id"],
        plan=call,
        impact=err.message,
        arguments_sha256=meta.get("arguments_sha256", ""),
        expire_time_ms=expire_ms,
        kind="settlement",
    )


def repeat_of_failure(call: ToolCall, code_name: str, fallback: str) -> AgentmeshError:
    """The error answered, without running it, when the model re-issues a call that already failed."""
    code = ErrorCode.__members__.get(code_name, ErrorCode.INTERNAL)
    return AgentmeshError(
        code,
        f"not run: this exact call to {call.name} already failed with {code_name}; it will fail again",
        fallback_tool=fallback,
        metadata={"repeated_call": "true"},
    )
