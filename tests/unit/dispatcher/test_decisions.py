"""The run's decisions (dispatcher_svc/run/decisions.py) on values: no Redis, no gRPC, no clock.

Every error class, every guard and every exit a decision can take is here; the loop tests
(test_loop.py) check that the phases do what these decisions say.
"""

from __future__ import annotations

import typing

import pytest

from agentmesh.backoff import Backoff
from agentmesh.chat import NextStep as ModelNextStep
from agentmesh.chat import ToolCall, Usage
from agentmesh.errors import ERROR_CLASS, AgentmeshError, ErrorClass, ErrorCode, Violation
from dispatcher_svc import policy
from dispatcher_svc.model import (
    CallStage,
    EventKind,
    ModelReply,
    PayloadRef,
    PendingApproval,
    Phase,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    ToolOutput,
)
from dispatcher_svc.run import decisions
from dispatcher_svc.run.next_step import Abort, Continue, Exit, Fail, HandOff, NextStep, Park, Stale, Succeed, WaitChild
from dispatcher_svc.run.texts import outcome_summary, raw_tokens_of, reply_text

CALL = ToolCall("call_1", "lookup", '{"id": 7}')
EVENT = TaskEvent(task_id="t1", sequence=0, kind=EventKind.TOOL_RESULT, time_ms=1, status=TaskStatus.RUNNING, step=1)
PREFIX = (EVENT,)


def err(code: ErrorCode, **kw: object) -> AgentmeshError:
    return AgentmeshError(code, f"{code.name} happened", **kw)  # type: ignore[arg-type]


def failed(code: ErrorCode, **kw: object) -> ToolOutcome:
    return ToolOutcome(CALL.id, CALL.name, error=err(code, **kw))


def judge(outcome: ToolOutcome, *, failures: int = 0, retries: int = 2, spec: str = "") -> decisions.OutcomeStep:
    return decisions.after_outcome(
        outcome, CALL, contract_failures=failures, max_contract_retries=retries, spec_fallback=spec, prefix=PREFIX
    )


CODES = [code for code in ErrorCode if code in ERROR_CLASS]


# -- exits: which one an error takes ------------------------------------------------------------


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
def test_exit_for_every_code_fatal_aborts_the_rest_fail(code: ErrorCode) -> None:
    error = err(code)
    step = decisions.exit_for(error, [EVENT])
    expected = Abort if ERROR_CLASS[code] == ErrorClass.FATAL else Fail
    assert type(step) is expected
    assert step.error is error
    assert step.prefix == PREFIX  # a tuple: the exit is a value, not a view of a list


def test_exit_for_copies_the_prefix() -> None:
    events = [EVENT]
    step = decisions.exit_for(err(ErrorCode.INTERNAL), events)
    events.append(EVENT)
    assert step.prefix == PREFIX


def test_the_union_names_every_exit() -> None:
    assert set(typing.get_args(Exit)) == {Park, Succeed, Fail, Abort, HandOff, WaitChild, Stale}
    assert set(typing.get_args(NextStep)) == {Continue, Park, Succeed, Fail, Abort, HandOff, WaitChild, Stale}
    # No bare Park: every exit but Stale writes, so a run never leaves its task RUNNING (chaos-1-6-170).
    with pytest.raises(TypeError):
        Park()  # type: ignore[call-arg]


@pytest.mark.parametrize("stage", list(CallStage))
def test_a_waiting_call_is_taken_up_by_sending_it_again(stage: CallStage) -> None:
    """A run meets a WAITING call only in a task failed while parked and then resumed: it is sent again
    with its key (RUNNING), not left waiting in a RUNNING task; every other stage is taken up as it is."""
    taken = decisions.taken_up(stage)
    assert taken is (CallStage.RUNNING if stage is CallStage.WAITING else stage)


# -- guards ------------------------------------------------------------------------------------


def test_before_step_goes_on_with_steps_and_time_left() -> None:
    assert decisions.before_step(steps_done=4, max_steps=5, now_ms=999, deadline_ms=1000) is None


def test_before_step_aborts_once_every_step_is_used() -> None:
    step = decisions.before_step(steps_done=5, max_steps=5, now_ms=0, deadline_ms=1000, prefix=[EVENT])
    assert isinstance(step, Abort)
    assert step.error.code == ErrorCode.MAX_STEPS_EXCEEDED
    assert step.error.metadata["max_steps"] == "5"
    assert step.prefix == PREFIX


def test_before_step_fails_once_the_deadline_passed() -> None:
    step = decisions.before_step(steps_done=0, max_steps=5, now_ms=1000, deadline_ms=1000, prefix=[EVENT])
    assert isinstance(step, Fail), "DEADLINE_EXCEEDED is ENGINEERING: resumable, not an incident"
    assert step.error.code == ErrorCode.DEADLINE_EXCEEDED
    assert step.prefix == PREFIX


def test_before_step_steps_used_up_wins_over_a_passed_deadline() -> None:
    step = decisions.before_step(steps_done=5, max_steps=5, now_ms=2000, deadline_ms=1000)
    assert isinstance(step, Abort) and step.error.code == ErrorCode.MAX_STEPS_EXCEEDED


def test_before_generate_allows_a_call_that_fits_exactly() -> None:
    assert decisions.before_generate(spent=100, prompt_tokens=50, reserve_tokens=50, token_budget=200) is None


def test_before_generate_aborts_a_call_one_token_over() -> None:
    step = decisions.before_generate(spent=101, prompt_tokens=50, reserve_tokens=50, token_budget=200)
    assert isinstance(step, Abort)
    assert step.error.code == ErrorCode.BUDGET_EXHAUSTED
    assert step.error.metadata == {
        "spent_tokens": "101",
        "prompt_tokens": "50",
        "reserve_tokens": "50",
        "token_budget": "200",
    }
    assert step.prefix == ()


def test_before_call_lets_a_call_repeat_below_the_threshold() -> None:
    assert decisions.before_call(CALL, times=2, threshold=3) is None


def test_before_call_aborts_at_the_threshold() -> None:
    step = decisions.before_call(CALL, times=3, threshold=3, prefix=[EVENT])
    assert isinstance(step, Abort)
    assert step.error.code == ErrorCode.LOOP_DETECTED
    assert step.error.metadata["signature"] == CALL.signature()
    assert step.prefix == PREFIX


# -- after a reply -------------------------------------------------------------------------------


def test_after_reply_with_tool_calls_acts_even_with_text() -> None:
    assert decisions.after_reply(ModelReply(text="let me look", tool_calls=(CALL,))) == Continue(Phase.ACTING)


def test_after_reply_with_text_alone_succeeds() -> None:
    reply = ModelReply(text="42", usage=Usage(3, 1))
    step = decisions.after_reply(reply, [EVENT])
    assert step == Succeed(reply, PREFIX)


@pytest.mark.parametrize("text", ["", "  \n\t"])
def test_after_reply_with_nothing_fails_internal(text: str) -> None:
    step = decisions.after_reply(ModelReply(text=text, finish_reason="length"), [EVENT])
    assert isinstance(step, Fail)
    assert step.error.code == ErrorCode.INTERNAL
    assert step.error.metadata == {"reason": "empty_reply", "finish_reason": "length"}
    assert step.prefix == PREFIX


# -- a tool outcome, by error class --------------------------------------------------------------


def test_a_success_continues_without_a_correction() -> None:
    step = judge(ToolOutcome(CALL.id, CALL.name, output=ToolOutput(inline="ok")), failures=1)
    assert step.decision.action == policy.Action.OK
    assert step.next == Continue(Phase.ACTING)
    assert step.outcome.correction is None and step.outcome.output == ToolOutput(inline="ok")


@pytest.mark.parametrize("code", [c for c in CODES if ERROR_CLASS[c] == ErrorClass.CONTRACT], ids=lambda c: c.name)
def test_contract_corrects_then_stops_correcting(code: ErrorCode) -> None:
    first = judge(failed(code), failures=0, retries=2)
    assert first.decision.action == policy.Action.CORRECT
    assert first.next == Continue(Phase.ACTING)
    assert first.outcome.correction is not None
    assert first.outcome.correction.next_step == ModelNextStep.FIX_ARGUMENTS
    assert (first.outcome.correction.attempt, first.outcome.correction.max_attempts) == (1, 2)
    second = judge(failed(code), failures=1, retries=2)
    assert second.decision.action == policy.Action.CORRECT and second.decision.retries_used == 2
    third = judge(failed(code), failures=2, retries=2, spec="lookup_cache")
    assert third.decision.action == policy.Action.FALLBACK
    assert third.next == Continue(Phase.ACTING)
    assert third.outcome.correction is not None
    assert third.outcome.correction.next_step == ModelNextStep.STOP_CORRECTING
    assert third.outcome.correction.fallback_tool == "lookup_cache"
    assert third.outcome.error is not None and third.outcome.error.fallback_tool == "lookup_cache"


def test_contract_without_retries_stops_correcting_at_once() -> None:
    step = judge(failed(ErrorCode.SCHEMA_INVALID), failures=0, retries=0)
    assert step.decision.action == policy.Action.FALLBACK
    assert step.outcome.correction is not None
    assert step.outcome.correction.next_step == ModelNextStep.STOP_CORRECTING


ENGINEERING = [c for c in CODES if ERROR_CLASS[c] == ErrorClass.ENGINEERING and c != ErrorCode.OUTCOME_UNKNOWN]


@pytest.mark.parametrize("code", ENGINEERING, ids=lambda c: c.name)
def test_engineering_falls_back_and_the_model_sees_the_registry_fallback(code: ErrorCode) -> None:
    step = judge(failed(code), spec="lookup_cache")
    assert step.decision.action == policy.Action.FALLBACK
    assert step.next == Continue(Phase.ACTING)
    assert step.outcome.correction is not None
    assert step.outcome.correction.next_step == ModelNextStep.USE_FALLBACK
    assert step.outcome.error is not None and step.outcome.error.fallback_tool == "lookup_cache"
    assert step.outcome.error.code == code


def test_engineering_the_errors_own_fallback_wins_over_the_registrys() -> None:
    step = judge(failed(ErrorCode.UPSTREAM_TIMEOUT, fallback_tool="lookup_v2"), spec="lookup_cache")
    assert step.decision.fallback_tool == "lookup_v2"
    assert step.outcome.error is not None and step.outcome.error.fallback_tool == "lookup_v2"


def test_engineering_without_any_fallback_leaves_the_error_as_it_came() -> None:
    outcome = failed(ErrorCode.UPSTREAM_REJECTED)
    step = judge(outcome)
    assert step.decision.fallback_tool == ""
    assert step.outcome.error is outcome.error
    assert step.outcome.correction is not None and step.outcome.correction.fallback_tool == ""


@pytest.mark.parametrize("code", [c for c in CODES if ERROR_CLASS[c] == ErrorClass.FATAL], ids=lambda c: c.name)
def test_fatal_aborts_with_the_result_event_first(code: ErrorCode) -> None:
    step = judge(failed(code), spec="lookup_cache")
    assert step.decision.action == policy.Action.ABORT
    assert isinstance(step.next, Abort)
    assert step.next.error.code == code
    assert step.next.prefix == PREFIX


def test_a_pending_approval_parks_on_it() -> None:
    pending = PendingApproval("ap-1", CALL, impact="deletes a row", expire_time_ms=5000)
    step = judge(ToolOutcome(CALL.id, CALL.name, pending=pending))
    assert step.decision.action == policy.Action.PARK
    assert step.next == Park(pending, CALL)


def test_outcome_unknown_parks_on_its_settlement() -> None:
    outcome = failed(
        ErrorCode.OUTCOME_UNKNOWN, metadata={"settlement_id": "st-9", "expire_at": "12.5", "arguments_sha256": "ab"}
    )
    step = judge(outcome)
    assert isinstance(step.next, Park)
    pending = step.next.pending
    assert pending is not None and pending.is_settlement
    assert (pending.approval_id, pending.expire_time_ms, pending.arguments_sha256) == ("st-9", 12500, "ab")
    assert step.next.call == CALL
    assert step.outcome.correction is None, "never shown to the model as a failure"


def test_outcome_unknown_without_a_settlement_fails_the_task() -> None:
    step = judge(failed(ErrorCode.OUTCOME_UNKNOWN))
    assert step.decision.action == policy.Action.PARK
    assert isinstance(step.next, Fail)
    assert step.next.error.code == ErrorCode.OUTCOME_UNKNOWN
    assert step.next.prefix == PREFIX


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
def test_every_code_has_exactly_one_next_step(code: ErrorCode) -> None:
    """The table of the error-class policy, code by code (with a settlement where one can park)."""
    meta = {"settlement_id": "st-1"} if code == ErrorCode.OUTCOME_UNKNOWN else {}
    step = judge(failed(code, metadata=meta), failures=5, retries=2)
    cls = ERROR_CLASS[code]
    if code == ErrorCode.OUTCOME_UNKNOWN:
        assert isinstance(step.next, Park)
    elif cls == ErrorClass.FATAL:
        assert isinstance(step.next, Abort)
    else:
        assert step.next == Continue(Phase.ACTING)
        assert step.decision.action == policy.Action.FALLBACK


# -- a repeat of a failed call --------------------------------------------------------------------


def test_repeat_answer_is_not_run_and_names_the_fallback() -> None:
    outcome = decisions.repeat_answer(CALL, "UPSTREAM_TIMEOUT", "lookup_cache")
    assert outcome.tool_call_id == CALL.id and outcome.error is not None
    assert outcome.error.code == ErrorCode.UPSTREAM_TIMEOUT
    assert outcome.error.fallback_tool == "lookup_cache"
    assert outcome.error.metadata == {"repeated_call": "true"}
    assert outcome.correction is not None
    assert outcome.correction.next_step == ModelNextStep.NOT_REPEATED
    assert outcome.correction.failed_with == ErrorCode.UPSTREAM_TIMEOUT


def test_repeat_answer_of_a_code_this_build_does_not_know_is_internal() -> None:
    outcome = decisions.repeat_answer(CALL, "NO_SUCH_CODE", "")
    assert outcome.error is not None and outcome.error.code == ErrorCode.INTERNAL


# -- texts ---------------------------------------------------------------------------------------


def test_texts_of_replies_and_outcomes() -> None:
    assert reply_text(["a", "b"], "ignored") == "model asked for 2 tool call(s): a, b"
    assert reply_text([], "  ") == "model replied with nothing"
    assert reply_text([], "x" * 300).endswith("…")
    ref = PayloadRef("ref-123456789012345678", size_bytes=4000)
    offloaded = ToolOutcome(CALL.id, CALL.name, output=ToolOutput(ref=ref))
    assert raw_tokens_of(offloaded, 10) == 1000
    assert raw_tokens_of(ToolOutcome(CALL.id, CALL.name, output=ToolOutput(inline="x")), 10) == 10
    assert "offloaded" in outcome_summary(offloaded)
    contract = failed(ErrorCode.SCHEMA_INVALID, violations=[Violation(path="id", rule="type")])
    assert outcome_summary(contract).startswith("lookup -> SCHEMA_INVALID (CONTRACT)")


def test_every_phase_a_cursor_can_name_has_a_phase_function() -> None:
    from dispatcher_svc.run.phases import PHASES

    assert set(PHASES) == set(Phase), "a Phase without an entry in PHASES would stop a resumed run"


# --- outages (issue 49) ---------------------------------------------------------------------------

BACKOFF = Backoff(initial_s=0.5, max_s=4.0, jitter_s=1.0)
OUTAGE = decisions.Outage("context_svc", "BuildContext", since_ms=10_000)
DOWN = AgentmeshError(ErrorCode.UNAVAILABLE, "connection refused")


def after(outage: decisions.Outage = OUTAGE, error: AgentmeshError = DOWN, **kw: typing.Any) -> typing.Any:
    args: dict[str, typing.Any] = {
        "now_ms": 10_000,
        "deadline_ms": 1_000_000,
        "budget_s": 120.0,
        "quiet_retries": 3,
        "backoff": BACKOFF,
        "draw": 0.0,
    }
    args.update(kw)
    return decisions.after_outage(outage, error, **args)


def retried(outage: decisions.Outage, times: int) -> decisions.Outage:
    return decisions.Outage(outage.service, outage.call, outage.since_ms, times)


def test_the_first_retries_of_an_outage_are_quiet_then_each_wait_is_reported() -> None:
    waits = [after(retried(OUTAGE, n)) for n in range(5)]
    assert [w.retry for w in waits] == [1, 2, 3, 4, 5]
    assert [w.reported for w in waits] == [False, False, True, True, True]
    assert [w.delay_s for w in waits] == pytest.approx([0.5, 1.0, 2.0, 4.0, 4.0])
    assert waits[2].message == "context_svc unavailable, retrying in 2.0 s"


def test_the_jitter_comes_from_the_draw() -> None:
    assert after(draw=0.25).delay_s == pytest.approx(0.75)


def test_a_service_that_names_its_retry_delay_is_taken_at_its_word() -> None:
    busy = AgentmeshError(ErrorCode.UNAVAILABLE, "in progress", retry_after=0.3)
    assert after(retried(OUTAGE, 4), busy).delay_s == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("code", "word"),
    [(ErrorCode.OVERLOADED, "overloaded"), (ErrorCode.DEADLINE_EXCEEDED, "not answering"),
     (ErrorCode.CANCELLED, "dropped the call")],
)  # fmt: skip
def test_the_wait_says_what_the_service_did(code: ErrorCode, word: str) -> None:
    wait = after(retried(OUTAGE, 2), err(code))
    assert wait.message == f"context_svc {word}, retrying in 2.0 s"


def test_an_outage_past_the_budget_fails_unavailable_naming_the_service_and_how_long() -> None:
    # Down 119 s: the next wait (2 s) would end past the 120 s budget.
    failed = after(retried(OUTAGE, 2), now_ms=129_000)
    assert isinstance(failed, AgentmeshError)
    assert failed.code == ErrorCode.UNAVAILABLE and failed.retryable
    assert failed.error_class != ErrorClass.FATAL  # FAILED, resumable: not an abort
    assert "context_svc was unavailable for 119.0 s, past the outage budget of 120 s" in failed.message
    assert "BuildContext: connection refused" in failed.message
    assert failed.metadata == {
        "service": "context_svc",
        "call": "BuildContext",
        "down_s": "119.0",
        "last_code": "UNAVAILABLE",
        "reason": "outage_budget",
        "budget_s": "120",
    }
    assert isinstance(decisions.exit_for(failed), Fail)


def test_within_the_budget_the_outage_is_waited_out() -> None:
    assert isinstance(after(retried(OUTAGE, 2), now_ms=127_900), decisions.OutageWait)  # 117.9 + 2.0 <= 120


def test_the_quiet_retries_are_made_whatever_the_budget() -> None:
    # Budget 0 is the behaviour before issue 49: the quiet attempts, then FAILED.
    assert after(budget_s=0).reported is False
    assert after(retried(OUTAGE, 1), budget_s=0).reported is False
    failed = after(retried(OUTAGE, 2), budget_s=0)
    assert isinstance(failed, AgentmeshError) and failed.metadata["reason"] == "outage_budget"


def test_one_quiet_attempt_reports_the_first_wait() -> None:
    assert after(quiet_retries=1).reported is True


def test_no_wait_ends_past_the_deadline() -> None:
    failed = after(retried(OUTAGE, 3), now_ms=20_000, deadline_ms=23_000)  # a 4 s wait; 3 s left
    assert isinstance(failed, AgentmeshError)
    assert failed.code == ErrorCode.DEADLINE_EXCEEDED
    assert failed.metadata["reason"] == "outage_deadline" and failed.metadata["service"] == "context_svc"
    assert "deadline came while context_svc was unavailable for 10.0 s" in failed.message
    # Even a quiet retry does not outlive the task.
    assert isinstance(after(now_ms=999_800), AgentmeshError)


def test_which_errors_are_outages() -> None:
    assert {ErrorCode.UNAVAILABLE, ErrorCode.OVERLOADED} == decisions.OUTAGE_CODES
    # A write whose outcome is unknown is never among them (it parks for settlement instead).
    assert ErrorCode.OUTCOME_UNKNOWN not in decisions.UNCERTAIN_CODES
    assert {ErrorCode.DEADLINE_EXCEEDED, ErrorCode.CANCELLED} == decisions.UNCERTAIN_CODES - decisions.OUTAGE_CODES
