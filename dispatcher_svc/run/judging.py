"""A final answer judged (issue 41): its output schema and its claims of actions against the task's
ledger (decisions.judge_answer); accepted, the task fails, or the answer goes back to the model with
its correction (phase CORRECTING, phases.correct)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

from agentmesh.claims import LedgerEntry
from agentmesh.errors import ErrorCode
from dispatcher_svc.model import EventKind, Phase
from dispatcher_svc.run import decisions
from dispatcher_svc.run.context import Run
from dispatcher_svc.run.next_step import Continue, NextStep, Succeed
from dispatcher_svc.run.texts import clip


async def judge(run: Run, done: Succeed) -> NextStep:
    """The verdicts on a final answer (decisions.judge_answer): accepted, the task fails, or the answer
    goes back to the model with its correction (phase CORRECTING, checkpointed before the appends)."""
    state, c, event = run.state, run.state.cursor, run.checkpoints.event
    reply = done.reply
    verdict = decisions.judge_answer(
        reply.text,
        schema=state.output_schema,
        ledger=ledger_of(c.ledger),
        write_tools=[name for name, info in state.tools_seen.items() if info.write],
        claims_mode=state.agent.claims,
        answer_corrections=c.answer_corrections,
        claim_corrections=c.claim_corrections,
    )
    events = list(done.prefix)
    if verdict.claims is not None:
        claims = verdict.claims
        trace.get_current_span().set_attributes(
            {"agentmesh.claims.verdict": claims.verdict, "agentmesh.claims.mode": verdict.claims_mode}
        )
    if verdict.claims is not None and verdict.claims.verdict != "none":
        # An event for every answer that claims something (supported, unsupported or warned).
        claims = verdict.claims
        events.append(
            event(
                EventKind.CLAIM_CHECK,
                f"claims {claims.verdict}" + (f": {clip(claims.gap, 200)}" if claims.gap else ""),
                attributes={
                    "verdict": claims.verdict,
                    "mode": verdict.claims_mode,
                    "claims": clip("; ".join(claims.claims), 400),
                    "gap": clip(claims.gap, 400),
                },
            )
        )
    if verdict.action == "accept":
        return Succeed(reply, tuple(events), output_json=verdict.output_json, answer=verdict.answer)
    err = verdict.error
    assert err is not None
    if verdict.action == "fail":
        return decisions.exit_for(err, events)
    if err.code == ErrorCode.OUTPUT_INVALID:
        c.answer_corrections += 1
        used, limit = c.answer_corrections, decisions.MAX_ANSWER_CORRECTIONS
    else:
        c.claim_corrections += 1
        used, limit = c.claim_corrections, decisions.MAX_CLAIM_CORRECTIONS
    hints = "; ".join(f"{v.path} {v.rule}: {v.hint or v.expected}" for v in err.violations)
    events.append(
        event(
            EventKind.CORRECTION,
            f"final answer: {err.code.name}, correction {used} of {limit}"
            + (f" ({clip(hints, 140)})" if hints else ""),
            error=err,
        )
    )
    c.reply, c.reply_appended, c.calls = reply, False, []
    c.fix = decisions.correction_text(err)
    c.phase = Phase.CORRECTING
    await run.checkpoints.commit(events)
    return Continue(Phase.CORRECTING)  # phases.correct: the answer and its correction go to the session


def ledger_of(ledger: Mapping[str, list[Any]]) -> list[LedgerEntry]:
    """The cursor's ledger as the claims check reads it."""
    return [
        LedgerEntry(call_id, str(entry[0]), str(entry[1]), bool(entry[2]) if len(entry) > 2 else False)
        for call_id, entry in ledger.items()
    ]
