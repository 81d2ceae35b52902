"""The exits of a run: what each `next_step.Exit` writes before the run ends.

Succeed, Fail and Abort commit a terminal status (with the events the phase gathered first), then
hand the answer to the task that waits for it, if any (an ask handoff: handoff_answers.py); HandOff
commits HANDED_OFF naming the child a transfer created; Park indexes the approval and commits
WAITING_APPROVAL; WaitChild commits WAITING_CHILD (and delivers at once if the child has ended
already); Stale (another owner has the task) writes nothing.
"""

from __future__ import annotations

import logging
from typing import assert_never

from opentelemetry import trace

from agentmesh.errors import AgentmeshError
from agentmesh.redacted import set_error_status
from agentmesh.semconv import ATTR_ERROR_CLASS, ATTR_ERROR_CODE, ERROR_TYPE
from dispatcher_svc import handoff_answers
from dispatcher_svc.model import CallStage, EventKind, TaskStatus
from dispatcher_svc.run.context import Run
from dispatcher_svc.run.downstream import PortFailure
from dispatcher_svc.run.names import message_id
from dispatcher_svc.run.next_step import Abort, Exit, Fail, HandOff, Park, RunResult, Stale, Succeed, WaitChild
from dispatcher_svc.run.texts import clip

log = logging.getLogger("dispatcher_svc.loop")


async def finish(run: Run, step: Exit) -> RunResult:
    """Carries out an exit; the run's result."""
    if isinstance(step, Succeed):
        await _succeed(run, step)
        await _answer_parent(run)
        return RunResult.FINISHED
    if isinstance(step, Fail):
        await _fail(run, step)
        await _answer_parent(run)
        return RunResult.FINISHED
    if isinstance(step, Abort):
        await _abort(run, step)
        await _answer_parent(run)
        return RunResult.FINISHED
    if isinstance(step, HandOff):
        await _hand_off(run, step)
        return RunResult.FINISHED
    if isinstance(step, WaitChild):
        await _wait_child(run, step)
        return RunResult.PARKED
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
    set_error_status(span, f"{err.code.name}: {clip(err.message, 200)}")


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


async def _hand_off(run: Run, step: HandOff) -> None:
    """Transfer: the task ends HANDED_OFF; the child (created already) goes on with the work."""
    status, event = TaskStatus.HANDED_OFF, run.checkpoints.event
    await run.checkpoints.commit(
        [*step.prefix, event(EventKind.STATUS, f"status HANDED_OFF to task {step.child_task_id}", status=status)],
        status=status,
        answer=f"handed off to agent {step.to_agent} (task {step.child_task_id})",
        child_task_id=step.child_task_id,
        error=None,
    )


async def _wait_child(run: Run, step: WaitChild) -> None:
    """Ask: WAITING_CHILD on the call; the child's end moves the task on (handoff_answers.py). A child that
    ended before this commit could not deliver: checked right after it."""
    status, event = TaskStatus.WAITING_CHILD, run.checkpoints.event
    for cs in run.state.cursor.calls:
        if cs.call.id == step.call.id:
            cs.state = CallStage.WAITING
    await handoff_answers.index_waiting(run.tasks, run.state.record.task_id)
    await run.checkpoints.commit(
        [*step.prefix, event(EventKind.STATUS, f"status WAITING_CHILD on task {step.child_task_id}", status=status)],
        status=status,
        child_task_id=step.child_task_id,
    )
    if run.queue is not None:
        await handoff_answers.deliver_if_ended(run.tasks, run.queue, step.child_task_id)


async def _answer_parent(run: Run) -> None:
    """A task an ask handoff delegated to (or a transfer of it) has ended: its answer goes to the task
    waiting for it. Best effort here: the parent's own check after parking covers a child that ended first."""
    record = run.state.record
    if not record.answer_to or run.queue is None:
        return
    try:
        ended = await run.tasks.load(record.task_id)
        await handoff_answers.deliver(run.tasks, run.queue, ended)
    except Exception as exc:  # the task has ended already; its parent is told on its next check
        log.warning("task %s: answer not delivered to task %s: %s", record.task_id, record.answer_to, exc)
