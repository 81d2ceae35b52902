"""One tool call of a step: issued after the loop guard, its outcome judged by the error-class
policy (decisions.after_outcome) and recorded in the cursor. I/O is the phases' (phases.act)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError
from agentmesh.redacted import redact_free_text
from dispatcher_svc import policy
from dispatcher_svc.model import CallStage, EventKind, TaskEvent, ToolOutcome
from dispatcher_svc.run import decisions
from dispatcher_svc.run.context import Run
from dispatcher_svc.run.names import READ_PAYLOAD_TOOL
from dispatcher_svc.run.next_step import Abort, Continue, Fail, Park
from dispatcher_svc.run.texts import clip, outcome_summary
from dispatcher_svc.tasks import CallState, Cursor


def start_call(run: Run, index: int, *, prefix: Sequence[TaskEvent]) -> list[TaskEvent] | Abort:
    """Marks call `index` as issued (its TOOL_CALL event, for the next commit) after the loop guard;
    a repeat of an ENGINEERING failure is answered at once without running it."""
    c, ckpt = run.state.cursor, run.checkpoints
    cs = c.calls[index]
    call = cs.call
    signature = call.signature()
    times = c.signatures.get(signature, 0) + 1
    c.signatures[signature] = times
    # The preview masked before it is clipped (a clip could cut a secret to a tail no rule knows).
    preview = clip(redact_free_text(call.arguments_json), 120)
    tool_event = ckpt.event(EventKind.TOOL_CALL, f"{call.name} {preview}", tool_call=call)
    looping = decisions.before_call(
        call, times=times, threshold=run.settings.loop_threshold, prefix=[*prefix, tool_event]
    )
    if looping is not None:
        return looping
    if signature not in c.failed:
        cs.state = CallStage.RUNNING
        run.state.started.add(call.id)
        return [tool_event]
    # ENGINEERING: the same failing call is never re-issued; the model hears why.
    fallback = run.downstream.fallback_for(call.name)
    cs.outcome = decisions.repeat_answer(call, c.failed[signature], fallback)
    cs.state = CallStage.DONE
    fallback_event = ckpt.event(
        EventKind.FALLBACK,
        f"{call.name}: repeat of a failed call not run; "
        + (f"fallback_tool: {fallback}" if fallback else "no fallback tool"),
        tool_call=call,
        error=cs.outcome.error,
    )
    return [tool_event, fallback_event]


def apply(run: Run, cs: CallState, outcome: ToolOutcome) -> list[TaskEvent] | Park | Fail | Abort:
    """Applies the policy to a tool outcome: the events to commit with it, or the exit it takes."""
    c, call, ckpt = run.state.cursor, cs.call, run.checkpoints
    if outcome.tool_call_id != call.id or outcome.tool_name != call.name:
        outcome = replace(outcome, tool_call_id=call.id, tool_name=call.name)
    result_event = ckpt.event(EventKind.TOOL_RESULT, outcome_summary(outcome), tool_call=call, tool_result=outcome)
    _enter_ledger(run, call, outcome)
    step = decisions.after_outcome(
        outcome,
        call,
        contract_failures=c.contract_failures.get(call.name, 0),
        max_contract_retries=run.settings.max_contract_retries,
        spec_fallback=run.downstream.fallback_for(call.name),
        prefix=[result_event],
    )
    if step.decision.action == policy.Action.PARK:
        # Parked (or failed: nothing to wait for) before the outcome is recorded: a resumed run
        # takes the outcome its approval delivers.
        assert not isinstance(step.next, Continue)
        if isinstance(step.next, Park):
            cs.state = CallStage.WAITING
        return step.next
    cs.outcome = step.outcome
    cs.state = CallStage.DONE
    if isinstance(step.next, Abort):
        return step.next
    assert isinstance(step.next, Continue)
    return [result_event, *_record(run, cs, step)]


@dataclass(frozen=True)
class Marks:
    """What `apply` may change in the cursor besides the call's own entries, as it was before."""

    contract_failures: dict[str, int]
    failed: dict[str, str]
    pinned: list[str]

    @classmethod
    def of(cls, cursor: Cursor) -> Marks:
        return cls(dict(cursor.contract_failures), dict(cursor.failed), list(cursor.pinned))


def retake(run: Run, cs: CallState, stored: ToolOutcome, marks: Marks | None) -> list[TaskEvent] | Park | Fail | Abort:
    """`apply` to the result the session log holds for the call instead of the one this run had
    (AppendConflict, issue 39): with the cursor as it was before that one was applied when this run
    applied it (`marks`); a call taken up as DONE keeps the earlier run's marks (its ledger entry
    is replaced). When this run's own attempt ran (an output) where the stored one failed, the
    ledger says OK (the claims check must not call the model's report of it unsupported) and the
    model is told in a note (`RunState.ran_again`, appended after the reply's last result)."""
    c, own = run.state.cursor, cs.outcome
    if marks is not None:
        c.contract_failures, c.failed, c.pinned = dict(marks.contract_failures), dict(marks.failed), list(marks.pinned)
    cs.state, cs.outcome = CallStage.RUNNING, None
    applied = apply(run, cs, stored)
    if own is not None and own.output is not None and stored.output is None and isinstance(applied, list):
        _enter_ledger(run, cs.call, own)
        run.state.ran_again.append(own)
    return applied


def _enter_ledger(run: Run, call: ToolCall, outcome: ToolOutcome) -> None:
    """The call's result in the task's action ledger (what the claims check reads, issue 41): OK, the
    error's code, or APPROVAL_REQUIRED while it waits; a later outcome of the same call replaces it."""
    if outcome.output is not None:
        result = "OK"
    elif outcome.error is not None:
        result = outcome.error.code.name
    else:
        result = "APPROVAL_REQUIRED"
    info = run.state.tools_seen.get(call.name)
    write = info.write if info is not None else bool(outcome.pending is not None)
    run.state.cursor.ledger.pop(call.id, None)
    run.state.cursor.ledger[call.id] = [call.name, result, write]


def _record(run: Run, cs: CallState, step: decisions.OutcomeStep) -> list[TaskEvent]:
    """Records a judged outcome in the cursor (contract retries, failed calls, pinned tools); the
    events that say so."""
    c, call, decision = run.state.cursor, cs.call, step.decision
    action = decision.action
    if action == policy.Action.OK:
        c.contract_failures.pop(call.name, None)
        output = step.outcome.output
        if output is not None and output.ref is not None and READ_PAYLOAD_TOOL not in c.pinned:
            c.pinned.append(READ_PAYLOAD_TOOL)
        return []
    if action == policy.Action.CORRECT:
        err = decision.error
        assert err is not None
        c.contract_failures[call.name] = decision.retries_used
        return [_correction_event(run, cs, err, decision.retries_used)]
    assert action == policy.Action.FALLBACK, action
    err = step.outcome.error
    assert err is not None
    c.contract_failures.pop(call.name, None)
    c.failed[call.signature()] = err.code.name
    if decision.fallback_tool and decision.fallback_tool not in c.pinned:
        c.pinned.append(decision.fallback_tool)
    fallback = decision.fallback_tool
    return [
        run.checkpoints.event(
            EventKind.FALLBACK,
            f"{call.name}: {err.code.name} ({err.error_class.name}); "
            + (f"fallback_tool: {fallback}" if fallback else "no fallback tool"),
            tool_call=call,
            error=err,
        )
    ]


def _correction_event(run: Run, cs: CallState, err: AgentmeshError, attempt: int) -> TaskEvent:
    hints = "; ".join(f"{v.path} {v.rule}: {v.hint or v.expected}" for v in err.violations if v.hint or v.expected)
    return run.checkpoints.event(
        EventKind.CORRECTION,
        f"{cs.call.name}: {err.code.name}, correction {attempt} of "
        f"{run.settings.max_contract_retries}" + (f" ({clip(hints, 140)})" if hints else ""),
        tool_call=cs.call,
        error=err,
    )
