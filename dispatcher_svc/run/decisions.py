"""The run's decisions, as pure functions of values: no I/O, no clock, no state of their own.

Each answers one question a phase asks and returns a value: the guards before a step, before
Generate and before a tool call; what follows a model reply; what a tool outcome's error class means
for the call (`policy.decide`, turned into the run's next step); which exit an error takes; whether
an outage of one of our services is waited out or ends the run (`after_outage`). The
phases do the I/O around them (phases.py, tool_calls.py); the unit tests call them on values
(tests/unit/dispatcher/test_decisions.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentmesh import answers
from agentmesh import claims as claim_check
from agentmesh.backoff import Backoff
from agentmesh.chat import ANSWER_CORRECTION_PREFIX, Correction, ToolCall
from agentmesh.chat import NextStep as ModelNextStep
from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode, Violation
from dispatcher_svc import guards, policy
from dispatcher_svc.model import CallStage, ModelReply, Phase, TaskEvent, ToolOutcome
from dispatcher_svc.run.next_step import Abort, Continue, Fail, Park, Succeed
from dispatcher_svc.run.texts import clip


def exit_for(error: AgentmeshError, prefix: Sequence[TaskEvent] = ()) -> Fail | Abort:
    """How an error ends the run: FATAL aborts (an incident, a human decides), any other class
    fails (StartTask may resume the task)."""
    if error.error_class == ErrorClass.FATAL:
        return Abort(error, tuple(prefix))
    return Fail(error, tuple(prefix))


def taken_up(stage: CallStage) -> CallStage:
    """The stage a run takes a call up at. WAITING is sent again with its idempotency key (RUNNING).

    A parked task is never acquired (tasks.acquire) and settling one turns its WAITING call into
    RUNNING, so a run that meets a WAITING call runs a task that was moved off its parked status by
    something else (a resume undone over it, a settlement that expired: FAILED) and then resumed.
    Ending that run without a write left it RUNNING for good (chaos-1-6-170). Asked again with its
    key, tool_svc never runs the call twice: it answers the same pending approval or settlement (the
    run parks again, fenced, with its events), the outcome it was settled to, or a new settlement."""
    return CallStage.RUNNING if stage is CallStage.WAITING else stage


def before_step(
    *, steps_done: int, max_steps: int, now_ms: int, deadline_ms: int, prefix: Sequence[TaskEvent] = ()
) -> Abort | Fail | None:
    """The guards before a step starts: all steps used aborts; a passed deadline fails. None: go on."""
    used_up = guards.max_steps(steps_done=steps_done, limit=max_steps)
    if used_up is not None:
        return Abort(used_up, tuple(prefix))
    late = guards.deadline(now_ms=now_ms, deadline_ms=deadline_ms)
    if late is not None:
        return exit_for(late, prefix)
    return None


def before_generate(*, spent: int, prompt_tokens: int, reserve_tokens: int, token_budget: int) -> Abort | None:
    """The budget guard: a model call that could exceed the task's budget is never made."""
    over = guards.budget(
        spent=spent, prompt_tokens=prompt_tokens, reserve_tokens=reserve_tokens, token_budget=token_budget
    )
    return Abort(over) if over is not None else None


def after_reply(reply: ModelReply, prefix: Sequence[TaskEvent] = ()) -> Continue | Succeed | Fail | Abort:
    """Tool calls: act on them. Text alone: the answer. Neither: the task fails (INTERNAL)."""
    if reply.tool_calls:
        return Continue(Phase.ACTING)
    if not reply.text.strip():
        empty = AgentmeshError(
            ErrorCode.INTERNAL,
            "the model replied with neither text nor a tool call",
            metadata={"reason": "empty_reply", "finish_reason": reply.finish_reason},
        )
        return exit_for(empty, prefix)
    return Succeed(reply, tuple(prefix))


def before_call(call: ToolCall, *, times: int, threshold: int, prefix: Sequence[TaskEvent] = ()) -> Abort | None:
    """The loop guard: the `threshold`-th issue of the same call (tool and arguments) aborts."""
    looping = guards.loop(call, times=times, threshold=threshold)
    return Abort(looping, tuple(prefix)) if looping is not None else None


def repeat_answer(call: ToolCall, failed_code: str, fallback: str) -> ToolOutcome:
    """The outcome a repeat of an ENGINEERING failure gets without being run: the model hears why,
    and which tool to use instead."""
    error = policy.repeat_of_failure(call, failed_code, fallback)
    not_repeated = Correction(ModelNextStep.NOT_REPEATED, fallback_tool=fallback, failed_with=error.code)
    return ToolOutcome(call.id, call.name, error=error, correction=not_repeated)


@dataclass(frozen=True)
class OutcomeStep:
    """What a tool outcome means for the run."""

    decision: policy.Decision
    outcome: ToolOutcome
    """The outcome as the model sees it (its correction, and the fallback the registry named)."""
    next: Continue | Park | Fail | Abort
    """Continue: append the result and go on; Park: wait for an approval or a settlement."""


def after_outcome(
    outcome: ToolOutcome,
    call: ToolCall,
    *,
    contract_failures: int,
    max_contract_retries: int,
    spec_fallback: str,
    prefix: Sequence[TaskEvent] = (),
) -> OutcomeStep:
    """The error-class policy (policy.decide) applied to one call's outcome: OK, CONTRACT (a
    correction, then as ENGINEERING), ENGINEERING (a fallback), FATAL (abort), a pending approval or
    OUTCOME_UNKNOWN (park; without a settlement to wait for, the task fails). `prefix`: the events
    an exit commits first (the TOOL_RESULT)."""
    decision = policy.decide(
        outcome,
        contract_failures=contract_failures,
        max_contract_retries=max_contract_retries,
        spec_fallback=spec_fallback,
    )
    action = decision.action
    if action == policy.Action.PARK:
        pending = outcome.pending or policy.settlement_request(outcome, call)
        if pending is None:
            assert decision.error is not None
            return OutcomeStep(decision, outcome, exit_for(decision.error, prefix))
        return OutcomeStep(decision, outcome, Park(pending, call))
    if action == policy.Action.FALLBACK and outcome.error is not None and decision.fallback_tool:
        # The model sees the fallback even when only the registry named it.
        outcome = replace(outcome, error=outcome.error.replace(fallback_tool=decision.fallback_tool))
    shown = replace(outcome, correction=decision.correction)
    if action == policy.Action.ABORT:
        assert decision.error is not None
        return OutcomeStep(decision, shown, Abort(decision.error, tuple(prefix)))
    return OutcomeStep(decision, shown, Continue(Phase.ACTING))


# --- the final answer: output schema and claims (issue 41) -------------------------------------------------

MAX_ANSWER_CORRECTIONS = 2
"""Answers sent back for breaking the output schema before the task fails OUTPUT_INVALID."""
MAX_CLAIM_CORRECTIONS = 1
"""Answers sent back for an unsupported claim before the task fails CLAIM_UNSUPPORTED."""


@dataclass(frozen=True)
class AnswerVerdict:
    """What a final answer gets: accepted (`output_json` and `answer` for a typed one), sent back with
    `error` as its correction, or the task fails with `error`. `claims` is the claims check's verdict
    (None when not checked), recorded as an event and a span attribute whatever follows."""

    action: str
    """"accept", "correct" or "fail"."""
    output_json: str = ""
    answer: str = ""
    error: AgentmeshError | None = None
    claims: claim_check.Verdict | None = None
    claims_mode: str = "off"


def _answer_error(violations: Sequence[Violation], attempt: int) -> AgentmeshError:
    first = violations[0]
    more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
    return AgentmeshError(
        ErrorCode.OUTPUT_INVALID,
        f"the final answer violates the task's output schema: {first.path} {first.rule}{more}",
        violations=list(violations),
        metadata={"reason": "final_answer", "attempt": str(attempt)},
    )


def _claim_error(verdict: claim_check.Verdict, attempt: int) -> AgentmeshError:
    return AgentmeshError(
        ErrorCode.CLAIM_UNSUPPORTED,
        f"the final answer claims what no tool call of this task did: {verdict.gap}",
        violations=[
            Violation(
                path="$",
                rule="claim",
                expected="a succeeded write call for every action claimed",
                actual=clip("; ".join(verdict.claims), 200),
                hint=clip(verdict.gap, 400),
            )
        ],
        metadata={
            "claim": clip("; ".join(verdict.claims), 200),
            "gap": clip(verdict.gap, 400),
            "attempt": str(attempt),
        },
    )


def judge_answer(
    text: str,
    *,
    schema: Mapping[str, Any] | None,
    ledger: Sequence[claim_check.LedgerEntry],
    write_tools: Iterable[str],
    claims_mode: str,
    answer_corrections: int,
    claim_corrections: int,
) -> AnswerVerdict:
    """The verdicts on a final answer, in order: the output schema (at most MAX_ANSWER_CORRECTIONS
    corrections, then OUTPUT_INVALID), then its claims against the ledger (`claims_mode` check: at most
    MAX_CLAIM_CORRECTIONS, then CLAIM_UNSUPPORTED; warn: recorded only; off: not checked)."""
    output_json, answer, prose, cited = "", "", text, None
    if schema is not None:
        checked = answers.check_answer(schema, text)
        if not checked.ok:
            attempt = answer_corrections + 1
            err = _answer_error(checked.violations, attempt)
            if answer_corrections >= MAX_ANSWER_CORRECTIONS:
                return AnswerVerdict("fail", error=err)
            return AnswerVerdict("correct", error=err)
        output_json = answers.canonical(checked.value)
        if isinstance(checked.value, Mapping):
            cited = checked.value.get(answers.ACTIONS_FIELD)
            rest = {k: v for k, v in checked.value.items() if k != answers.ACTIONS_FIELD}
            prose = answers.render(rest)
        else:
            prose = answers.render(checked.value)
        answer = answers.render(checked.value)
    if claims_mode == "off":
        return AnswerVerdict("accept", output_json, answer)
    writes = list(write_tools)
    by_text = claim_check.unsupported(prose, ledger, writes)
    by_cite = claim_check.cited_gaps(cited, ledger, writes)
    verdict = _combine(by_text, by_cite)
    if verdict.verdict != "unsupported":
        return AnswerVerdict("accept", output_json, answer, claims=verdict, claims_mode=claims_mode)
    if claims_mode == "warn":
        warned = claim_check.Verdict("warned", verdict.claims, verdict.gap)
        return AnswerVerdict("accept", output_json, answer, claims=warned, claims_mode=claims_mode)
    err = _claim_error(verdict, claim_corrections + 1)
    action = "fail" if claim_corrections >= MAX_CLAIM_CORRECTIONS else "correct"
    return AnswerVerdict(action, error=err, claims=verdict, claims_mode=claims_mode)


def _combine(*verdicts: claim_check.Verdict) -> claim_check.Verdict:
    claims = tuple(c for v in verdicts for c in v.claims)
    gaps = "; ".join(v.gap for v in verdicts if v.gap)
    if any(v.verdict == "unsupported" for v in verdicts):
        return claim_check.Verdict("unsupported", claims, gaps)
    if claims:
        return claim_check.Verdict("supported", claims)
    return claim_check.Verdict("none")


def correction_text(err: AgentmeshError) -> str:
    """What the model reads after a rejected final answer: the rule it broke, the violations in the
    format of tool arguments, and what to do."""
    lines = [f"{ANSWER_CORRECTION_PREFIX}: {err.code.name}: {err.message}"]
    if err.violations:
        lines.append(answers.violations_text(err.violations))
    if err.code == ErrorCode.CLAIM_UNSUPPORTED:
        lines.append(
            "Say only what the tool calls of this task did: report the action as not done (and why), "
            "or do it first with its tool."
        )
    else:
        lines.append("Answer again with JSON only, following the output schema.")
    return "\n".join(lines)


OUTAGE_CODES = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.OVERLOADED})
"""Errors of our own infrastructure (a service or its Redis restarting, shedding load) that any call
may wait out: the same call may succeed in a moment, and nothing ran (or what ran is named, below)."""
UNCERTAIN_CODES = OUTAGE_CODES | {ErrorCode.DEADLINE_EXCEEDED, ErrorCode.CANCELLED}
"""Errors after which the call may or may not have landed: waited out only by calls that are safe to
send again (reads, named appends, keyed ExecuteTool: docs/design.md §7)."""

_DOWN_WORDS = {
    ErrorCode.UNAVAILABLE: "unavailable",
    ErrorCode.OVERLOADED: "overloaded",
    ErrorCode.DEADLINE_EXCEEDED: "not answering",
    ErrorCode.CANCELLED: "dropped the call",
}


@dataclass(frozen=True)
class Outage:
    """One call's run of failed attempts, since its first failure (an outage as this run sees it)."""

    service: str
    """Who is down: context_svc, tool_svc, provider_svc."""
    call: str
    """The call that met it ("BuildContext", "ExecuteTool(calc)")."""
    since_ms: int
    """When its first attempt failed."""
    retries: int = 0
    """Retries made so far."""


@dataclass(frozen=True)
class OutageWait:
    """Wait `delay_s`, then send the call again (retry number `retry`)."""

    delay_s: float
    retry: int
    reported: bool
    """Whether the wait is a task event (the quiet first retries are not)."""
    message: str
    """"context_svc unavailable, retrying in 2.0 s"."""


def after_outage(
    outage: Outage,
    error: AgentmeshError,
    *,
    now_ms: int,
    deadline_ms: int,
    budget_s: float,
    quiet_retries: int,
    backoff: Backoff,
    draw: float,
) -> OutageWait | AgentmeshError:
    """Whether a call met by an outage error waits and is sent again, or the run ends with an error.

    The first `quiet_retries` retries are made whatever the budget (a blip); after them each wait is
    reported and must end within `budget_s` of the outage's first failure. No wait ends past the
    task's deadline. The final error is typed: UNAVAILABLE (reason `outage_budget`) or
    DEADLINE_EXCEEDED (reason `outage_deadline`), naming the service, the call and how long the
    service was down (metadata `service`, `call`, `down_s`, `last_code`); both leave the task
    resumable. `draw` in [0, 1) is the caller's random number for the jitter."""
    retry = outage.retries + 1
    # A service that says when to come back (tool_svc's "in progress") is taken at its word.
    delay = error.retry_after if error.retry_after else backoff.delay(retry, draw)
    down_s = max(0, now_ms - outage.since_ms) / 1000
    word = _DOWN_WORDS.get(error.code, error.code.name)
    metadata = {
        "service": outage.service,
        "call": outage.call,
        "down_s": f"{down_s:.1f}",
        "last_code": error.code.name,
    }
    if now_ms + int(delay * 1000) >= deadline_ms:
        return AgentmeshError(
            ErrorCode.DEADLINE_EXCEEDED,
            f"the task's deadline came while {outage.service} was {word} for {down_s:.1f} s "
            f"({outage.call}: {error.message})",
            metadata={**metadata, "reason": "outage_deadline"},
        )
    quiet = retry < max(1, quiet_retries)
    if not quiet and down_s + delay > budget_s:
        return AgentmeshError(
            ErrorCode.UNAVAILABLE,
            f"{outage.service} was {word} for {down_s:.1f} s, past the outage budget of {budget_s:g} s "
            f"({outage.call}: {error.message})",
            metadata={**metadata, "reason": "outage_budget", "budget_s": f"{budget_s:g}"},
        )
    return OutageWait(delay, retry, not quiet, f"{outage.service} {word}, retrying in {delay:.1f} s")
