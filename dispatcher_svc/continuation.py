"""Conversations that continue: a task on an existing session, one task at a time (docs/design.md §7).

StartTask with a `session_id` makes the new task the session's next turn. context_svc records each
session's newest task and attaches tasks by a compare-and-set on it (context_svc/attach.py, AttachTask,
called with the StartTask caller's own token, so context_svc applies its rule: the session's owner or an
operator, and the session's agent). The dispatcher knows whether that newest task has ended, so it
decides, then sets:

1. AttachTask with no expectation: attached at once only if the task is the newest already (a retry);
   else context_svc names the newest task and its generation;
2. the newest task's status: not ended (PENDING, RUNNING, WAITING_APPROVAL) is FAILED_PRECONDITION;
   unknown (expired, or never created) counts as ended, unless it became the newest less than
   `starting_grace_s` ago: a StartTask that attached it may still be creating it (the task that
   opened the session, named by the session id, is always created first);
3. AttachTask expecting that task at that generation: of two StartTasks racing from the same
   expectation exactly one wins; the other reads the new newest task (the winner, not ended) and
   is refused. The task is created after it is attached.

The only way back from an ended status is resuming a FAILED task, and a resume must not let an older
turn run beside a newer one: `confirm` (AttachTask of the task itself, which bumps the generation) runs
after the resume's own FAILED -> PENDING commit and before the task is queued. A StartTask that read
the FAILED status before that commit then fails its compare-and-set; one that set first makes the
confirm fail, and the resume is undone (service.py). Either way one of them runs.

Domain code: no grpc, no stubs.
"""

from __future__ import annotations

import logging

from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError, NotFoundError
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.ports import CallOptions, ContextPort
from dispatcher_svc.tasks import StaleOwnerError, TaskRecord, TaskStore, WrongStatusError, fields_of

__all__ = ["CLAIM_ATTEMPTS", "Conversations", "session_busy"]

log = logging.getLogger("dispatcher_svc.continuation")

CLAIM_ATTEMPTS = 4
"""Compare-and-set rounds before StartTask gives up on a session that keeps changing."""


def session_busy(session_id: str, task_id: str, state: str) -> FailedPreconditionError:
    return FailedPreconditionError(
        f"session {session_id} runs one task at a time and its task {task_id} is {state}: "
        "start the next turn when it has ended",
        metadata={"session_id": session_id, "task_id": task_id, "status": state},
    )


class Conversations:
    """Attaching tasks to existing sessions (see the module docstring)."""

    def __init__(
        self,
        tasks: TaskStore,
        context: ContextPort,
        *,
        call_timeout_s: float,
        starting_grace_s: float,
        task_ttl_s: int,
    ) -> None:
        self.tasks = tasks
        self.context = context
        self.call_timeout_s = call_timeout_s
        self.starting_grace_s = starting_grace_s
        self.task_ttl_s = task_ttl_s

    def _opts(self, request_id: str) -> CallOptions:
        # No token of our own: context_svc sees the StartTask caller (its owner rule applies to them).
        return CallOptions(identity_token="", request_id=request_id, timeout_s=self.call_timeout_s)

    async def claim(self, session_id: str, task_id: str, agent_id: str, *, request_id: str) -> None:
        """Makes `task_id` the session's newest task unless the newest has not ended.

        NOT_FOUND (unknown or expired session) and PERMISSION_DENIED come from context_svc;
        FAILED_PRECONDITION when the session's newest task has not ended."""
        opts = self._opts(request_id)
        expected, generation = "", 0
        for _ in range(CLAIM_ATTEMPTS):
            attached = await self.context.attach_task(
                session_id, task_id, agent_id, opts, expected_task_id=expected, expected_generation=generation
            )
            if attached.attached:
                return
            newest = attached.newest_task_id
            try:
                status, _ = await self.tasks.status(newest)
            except NotFoundError:
                # The task that opened the session existed before it: gone means expired (or the
                # session was made without a task). A later newest may still be being created.
                if newest != session_id and attached.newest_age_s < self.starting_grace_s:
                    raise session_busy(session_id, newest, "STARTING") from None
                status = TaskStatus.UNSPECIFIED
            if status != TaskStatus.UNSPECIFIED and not status.terminal:
                raise session_busy(session_id, newest, status.name)
            expected, generation = newest, attached.generation
        raise FailedPreconditionError(
            f"session {session_id} changed {CLAIM_ATTEMPTS} times while task {task_id} was being attached; try again",
            metadata={"session_id": session_id},
        )

    async def taken(self, session_id: str, *, request_id: str) -> bool:
        """Whether a session of that id exists already (readable by the caller or not): a new task
        naming its own id must not open a session someone else made under it (issue 39, the
        squatted session id). Best effort: a context_svc that cannot say is taken for "no" (the
        task's run then meets the session, typed, as before)."""
        try:
            await self.context.get_session(session_id, self._opts(request_id))
        except AgentmeshError as err:
            if err.code == ErrorCode.PERMISSION_DENIED:
                return True
            if err.code != ErrorCode.NOT_FOUND:
                log.warning("cannot tell whether session %s exists: %s", session_id, err)
            return False
        return True

    async def confirm(self, session_id: str, task_id: str, agent_id: str, *, request_id: str) -> str:
        """Before a resumed task is queued: "" when it is still its session's newest task (or the
        session does not exist yet: its first run never created it), else the newest task's id.
        Other errors (PERMISSION_DENIED, UNAVAILABLE) are raised."""
        try:
            attached = await self.context.attach_task(session_id, task_id, agent_id, self._opts(request_id))
        except AgentmeshError as err:
            if err.code == ErrorCode.NOT_FOUND:
                return ""
            raise
        return "" if attached.attached else attached.newest_task_id

    async def fail_again(self, record: TaskRecord, why: AgentmeshError) -> None:
        """Undoes a resume (or a start) that must not run: the task, PENDING (or RUNNING, from a stray
        queue entry), is FAILED again with its previous error, and a run that took it is fenced out.

        A stray entry's run may even have parked it (WAITING_APPROVAL) before the confirm failed: it is
        failed too, its pending approval cleared, since a turn the session moved on from must not wait
        to run beside the newer one. Its call stays WAITING in the cursor; a later resume sends it again
        with its key (run.decisions.taken_up), so nothing runs twice (chaos-1-6-170)."""
        error = record.error or why
        for _ in range(8):
            current = await self.tasks.load(record.task_id)
            if current.status.terminal:
                return
            event = TaskEvent(
                task_id=record.task_id,
                sequence=0,
                kind=EventKind.STATUS,
                time_ms=now_ms(),
                status=TaskStatus.FAILED,
                step=current.cursor.step,
                message=f"status FAILED: not resumed: {why.message}",
                error=error,
            )
            try:
                await self.tasks.commit(
                    record.task_id,
                    fence=current.fence,
                    expect_status=current.status,
                    bump_fence=True,  # a run that took it meanwhile stops at its next write
                    fields=fields_of(
                        status=TaskStatus.FAILED, error=error, pending=None, update_ms=now_ms(), lease_until=0
                    ),
                    events=[event],
                    ttl_s=self.task_ttl_s,
                    agent=record.agent_id,
                )
            except (StaleOwnerError, WrongStatusError):
                continue
            return
        log.warning("task %s: could not undo its resume (it kept changing)", record.task_id)
