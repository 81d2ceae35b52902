"""The exits of a run: what each `next_step.Exit` writes before the run ends.

Succeed, Fail and Abort commit a terminal status (with the events the phase gathered first);
Park indexes the approval and commits WAITING_APPROVAL; Stale (another owner has the task) writes nothing.
"""

from __future__ import annotations

import logging
from typing import assert_never

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from agentmesh.errors import AgentmeshError
from agentmesh.semconv import ATTR_ERROR_CLASS, ATTR_ERROR_CODE, ERROR_TYPE
from dispatcher_svc.model import EventKind, TaskStatus
from dispatcher_svc.run.context import Run
from dispatcher_svc.run.downstream import PortFailure
from dispatcher_svc.run.names import message_id
from dispatcher_svc.run.next_step import Abort, Exit, Fail, Park, RunResult, Stale, Succeed
from dispatcher_svc.run.texts import clip

log = logging.getLogger("dispatcher_svc.loop")


async def finish(run: Run, step: Exit) -> RunResult:
    """Carries out an exit; the run's result."""
    if isinstance(step, Succeed):
        await _succeed(run, step)
        return RunResult.FINISHED
    if isinstance(step, Fail):
        await _fail(run, step)
        return RunResult.FINISHED
    if isinstance(step, Abort):
        await _abort(run, step)
        return RunResult.FINISHED
    if isinstance(step, Park):
        await _park(run, step)
        return RunResult.PARKED
    if isinstance(step, Stale):
        log.info("task %s: stopping, %s", run.state.record.task_id, step.reason)
        return RunResult.STALE
    assert_never(step)


def _mark_error(run: Run, err: AgentmeshError) -> None:
    run.state.error = err
    span = trace.get_current_span()
    span.set_attributes(
        {ATTR_ERROR_CODE: err.code.name, ATTR_ERROR_CLASS: err.error_class.name, ERROR_TYPE: err.code.name}
    )
    span.set_status(Status(StatusCode.ERROR, f"{err.code.name}: {clip(err.message, 200)}"))


async def _fail(run: Run, step: Fail) -> None:
    err, status, event = step.error, TaskStatus.FAILED, run.checkpoints.event
    _mark_error(run, err)
    await run.checkpoints.commit(
        [*step.prefix, event(EventKind.STATUS, f"status FAILED: {err}", status=status, error=err)],
        status=status,
        error=err,
    )


async def _abort(run: Run, step: Abort) -> None:
    err, status, event = step.error, TaskStatus.ABORTED, run.checkpoints.event
    _mark_error(run, err)
    await run.checkpoints.commit(
        [
            *step.prefix,
            event(
                EventKind.INCIDENT,
                f"incident: {err.code.name}: {clip(err.message, 200)}; task aborted, a human decides what next",
                status=status,
                error=err,
            ),
            event(EventKind.STATUS, f"status ABORTED: {err.code.name}", status=status, error=err),
        ],
        status=status,
        error=err,
    )


async def _succeed(run: Run, step: Succeed) -> None:
    """The final answer: checkpointed with the reply, then recorded in the session (best effort)."""
    reply, status, event = step.reply, TaskStatus.SUCCEEDED, run.checkpoints.event
    answer = step.answer or reply.text
    await run.checkpoints.commit(
        [
            *step.prefix,
            event(EventKind.ANSWER, answer, status=status, output_json=step.output_json),
            event(EventKind.STATUS, "status SUCCEEDED", status=status),
        ],
        status=status,
        answer=answer,
        output_json=step.output_json,
        error=None,
    )
    record, down = run.state.record, run.downstream
    answer_id = message_id(record.task_id, "answer")
    try:
        await down.append_once(
            "AppendMessage(answer)",
            lambda o: down.ports.context.append_message(
                record.session_id, "assistant", reply.text, (), o, client_message_id=answer_id
            ),
            # The task has ended: no outage wait (its events would follow the terminal status).
            wait_out=False,
        )
    except PortFailure as exc:
        # The task has its answer already; the session misses it until a resume appends it.
        log.warning("task %s: answer not recorded in the session: %s", record.task_id, exc)


async def _park(run: Run, step: Park) -> None:
    """WAITING_APPROVAL on the pending approval (indexed first: the expiry sweeper must find every
    parked task)."""
    pending, call = step.pending, step.call
    status, event = TaskStatus.WAITING_APPROVAL, run.checkpoints.event
    await run.checkpoints.index_approval(pending)
    await run.checkpoints.commit(
        [
            event(
                EventKind.APPROVAL_REQUIRED,
                f"{call.name} needs settlement {pending.approval_id} (RAN or NOT_RAN): its outcome is unknown"
                if pending.is_settlement
                else f"{call.name} needs approval {pending.approval_id}: {clip(pending.impact, 140)}",
                status=status,
                tool_call=call,
                pending_approval=pending,
            ),
            event(EventKind.STATUS, "status WAITING_APPROVAL", status=status),
        ],
        status=status,
        pending=pending,
    )
