"""Pure parts of the dispatcher: the error-class policy, the guards, codecs and agent config."""

from __future__ import annotations

import pytest

from agentmesh.chat import NextStep, ToolCall, Usage
from agentmesh.config import ConfigError, Settings
from agentmesh.errors import ERROR_CLASS, AgentmeshError, ErrorClass, ErrorCode, Violation
from dispatcher_svc import guards, policy
from dispatcher_svc.agents import AgentRegistry
from dispatcher_svc.model import (
    CallStage,
    EventKind,
    ExecStats,
    PayloadRef,
    PendingApproval,
    Phase,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    ToolOutput,
)
from dispatcher_svc.model_json import event_from_json, event_to_json
from dispatcher_svc.tasks import CallState, Cursor

CALL = ToolCall("c1", "lookup", '{"id": 12345678901234567890}')


def failing(code: ErrorCode, **kw: object) -> ToolOutcome:
    return ToolOutcome("c1", "lookup", error=AgentmeshError(code, "failed", **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("code", [c for c, k in ERROR_CLASS.items() if k == ErrorClass.CONTRACT])
def test_contract_errors_are_corrected_twice_then_engineering(code: ErrorCode) -> None:
    first = policy.decide(failing(code), contract_failures=0, max_contract_retries=2)
    second = policy.decide(failing(code), contract_failures=1, max_contract_retries=2)
    third = policy.decide(failing(code), contract_failures=2, max_contract_retries=2)
    assert (first.action, first.retries_used) == (policy.Action.CORRECT, 1)
    assert (second.action, second.retries_used) == (policy.Action.CORRECT, 2)
    assert third.action == policy.Action.FALLBACK
    assert first.correction is not None and third.correction is not None
    assert (first.correction.next_step, first.correction.attempt, first.correction.max_attempts) == (
        NextStep.FIX_ARGUMENTS,
        1,
        2,
    )
    assert third.correction.next_step is NextStep.STOP_CORRECTING and third.correction.attempt == 3
    assert "correction 1 of 2" in first.correction.text("lookup")
    assert "stop correcting" in third.correction.text("lookup")


@pytest.mark.parametrize(
    "code",
    [c for c, k in ERROR_CLASS.items() if k == ErrorClass.ENGINEERING and c != ErrorCode.OUTCOME_UNKNOWN],
)
def test_engineering_errors_take_the_fallback(code: ErrorCode) -> None:
    named = policy.decide(failing(code, fallback_tool="plan_b"), contract_failures=0, max_contract_retries=2)
    from_spec = policy.decide(failing(code), contract_failures=0, max_contract_retries=2, spec_fallback="plan_c")
    none = policy.decide(failing(code), contract_failures=0, max_contract_retries=2)
    assert named.action == from_spec.action == none.action == policy.Action.FALLBACK
    assert named.correction is not None and none.correction is not None
    assert named.fallback_tool == "plan_b" and named.correction.fallback_tool == "plan_b"
    assert named.correction.next_step is NextStep.USE_FALLBACK
    assert "fallback tool plan_b" in named.correction.text("lookup")
    assert from_spec.fallback_tool == "plan_c"
    assert "No fallback tool" in none.correction.text("lookup")
    assert "Do not call lookup again with the same arguments" in none.correction.text("lookup")


@pytest.mark.parametrize("code", [c for c, k in ERROR_CLASS.items() if k == ErrorClass.FATAL])
def test_fatal_errors_abort(code: ErrorCode) -> None:
    decision = policy.decide(failing(code), contract_failures=0, max_contract_retries=2)
    assert decision.action == policy.Action.ABORT
    assert decision.error is not None and decision.error.code == code


def test_success_and_pending() -> None:
    ok = ToolOutcome("c1", "lookup", output=ToolOutput(inline="x"))
    pending = ToolOutcome("c1", "lookup", pending=PendingApproval("ap", CALL))
    assert policy.decide(ok, contract_failures=1, max_contract_retries=2).action == policy.Action.OK
    assert policy.decide(pending, contract_failures=0, max_contract_retries=2).action == policy.Action.PARK


def test_zero_reflective_retries_is_engineering_at_once() -> None:
    decision = policy.decide(failing(ErrorCode.SCHEMA_INVALID), contract_failures=0, max_contract_retries=0)
    assert decision.action == policy.Action.FALLBACK


def test_repeat_of_a_failure_keeps_the_code() -> None:
    err = policy.repeat_of_failure(CALL, "UPSTREAM_NOT_FOUND", "plan_b")
    assert err.code == ErrorCode.UPSTREAM_NOT_FOUND and err.fallback_tool == "plan_b"
    assert policy.repeat_of_failure(CALL, "NO_SUCH_CODE", "").code == ErrorCode.INTERNAL


def test_guards() -> None:
    assert guards.budget(spent=10, prompt_tokens=20, reserve_tokens=70, token_budget=100) is None
    over = guards.budget(spent=10, prompt_tokens=21, reserve_tokens=70, token_budget=100)
    assert over is not None and over.code == ErrorCode.BUDGET_EXHAUSTED and over.error_class == ErrorClass.FATAL
    assert over.metadata["token_budget"] == "100"
    assert guards.max_steps(steps_done=2, limit=3) is None
    stop = guards.max_steps(steps_done=3, limit=3)
    assert stop is not None and stop.code == ErrorCode.MAX_STEPS_EXCEEDED
    assert guards.loop(CALL, times=2, threshold=3) is None
    looping = guards.loop(CALL, times=3, threshold=3)
    assert looping is not None and looping.code == ErrorCode.LOOP_DETECTED
    assert guards.deadline(now_ms=9, deadline_ms=10) is None
    late = guards.deadline(now_ms=10, deadline_ms=10)
    assert late is not None and late.code == ErrorCode.DEADLINE_EXCEEDED


def test_event_and_checkpoint_codecs_round_trip() -> None:
    err = AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "bad",
        violations=[Violation("$.id", "pattern", "^A", '"b"', "use A-1")],
        retry_after=1.5,
        fallback_tool="f",
        metadata={"k": "v"},
    )
    outcomes = [
        ToolOutcome("c1", "t", output=ToolOutput(inline="12345678901234567890", result_type="text")),
        ToolOutcome(
            "c1",
            "t",
            output=ToolOutput(ref=PayloadRef("pl_x", "s", 200_000, "text/plain", "ab" * 32, 99), digest="d"),
            stats=ExecStats(2, 3.5, True, 200_000),
        ),
        ToolOutcome("c1", "t", error=err),
        ToolOutcome("c1", "t", pending=PendingApproval("ap", CALL, "impact", "sha", 5, "agent")),
    ]
    for outcome in outcomes:
        event = TaskEvent(
            "task",
            0,
            EventKind.TOOL_RESULT,
            123,
            TaskStatus.RUNNING,
            step=2,
            message="m",
            tool_call=CALL,
            tool_result=outcome,
            error=outcome.error,
            pending_approval=outcome.pending,
            usage=Usage(1, 2),
            attributes={"a": "b"},
        )
        back = event_from_json("task", 7, event_to_json(event))
        assert back.sequence == 7
        assert back.tool_result is not None
        if outcome.error is None:
            assert back.tool_result == outcome
        else:
            assert back.tool_result.error is not None
            assert vars(back.tool_result.error) == vars(outcome.error)
        assert (back.tool_call, back.usage, back.attributes, back.step) == (CALL, Usage(1, 2), {"a": "b"}, 2)
    cursor = Cursor(
        phase=Phase.ACTING, step=3, ctx_count=5, calls=[CallState(CALL, CallStage.DONE, outcomes[2], note="n")]
    )
    cursor.signatures[CALL.signature()] = 2
    again = Cursor.from_json(cursor.to_json())
    assert again.to_json() == cursor.to_json()
    # Model ids above 2**53 survive untouched in the raw arguments.
    assert again.calls[0].call.arguments_json == CALL.arguments_json


def test_agents_config_is_validated() -> None:
    agent = {"id": "ops", "permissions": ["prod:ops.read:read"]}
    registry = AgentRegistry(Settings(auth={"mode": "disabled"}, agents=[agent]).agents)
    assert registry.get("ops").permissions == ("prod:ops.read:read",)
    with pytest.raises(AgentmeshError) as caught:
        registry.get("nobody")
    assert caught.value.code == ErrorCode.NOT_FOUND and "ops" in caught.value.message
    with pytest.raises(ConfigError, match=r"agents\[1\]\.id: duplicate"):
        AgentRegistry(Settings(auth={"mode": "disabled"}, agents=[agent, agent]).agents)
    for bad in ({"id": "ops", "token_budget": 0}, {"id": "Bad Id"}, {"id": "ops", "permissions": ["prod:read"]}):
        with pytest.raises(ValueError):
            Settings(auth={"mode": "disabled"}, agents=[bad])


def test_an_unknown_outcome_parks_on_its_settlement_and_is_never_shown_as_a_failure() -> None:
    """OUTCOME_UNKNOWN is not a failed call the model could re-issue: the task waits for an operator."""
    err = AgentmeshError(
        ErrorCode.OUTCOME_UNKNOWN,
        "may have run",
        metadata={"settlement_id": "stl_1", "arguments_sha256": "ab" * 32, "expire_at": "1700000000.5"},
    )
    outcome = ToolOutcome("c1", "charge", error=err)
    decision = policy.decide(outcome, contract_failures=0, max_contract_retries=2, spec_fallback="plan_c")
    assert decision.action == policy.Action.PARK and decision.correction is None
    call = ToolCall("c1", "charge", "{}")
    pending = policy.settlement_request(outcome, call)
    assert pending is not None and pending.is_settlement
    found = (pending.approval_id, pending.arguments_sha256, pending.expire_time_ms)
    assert found == ("stl_1", "ab" * 32, 1700000000500)
    assert pending.plan == call
    # Without a settlement to wait for, there is nothing to park on: the task fails typed instead.
    bare = ToolOutcome("c1", "charge", error=AgentmeshError(ErrorCode.OUTCOME_UNKNOWN, "may have run"))
    assert policy.settlement_request(bare, call) is None
