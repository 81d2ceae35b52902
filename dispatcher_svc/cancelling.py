"""CancelTask's write: a task that has not ended becomes CANCELLED (its owner, if any, is fenced out), and
with it every task of its handoff tree (issue 44): cancelling a root cancels the tasks its handoffs created,
and a cancelled task some task waits for (an ask) hands that task a HANDOFF_FAILED answer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError, NotFoundError
from dispatcher_svc import handoff_answers
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.tasks import StaleOwnerError, TaskRecord, TaskStore, WrongStatusError, fields_of

__all__ = ["cancel_one", "cancel_tree"]

log = logging.getLogger("dispatcher_svc.service")

Unindex = Callable[[str, str], Awaitable[None]]
"""Drops a parked task's approval from the expiry sweeper's index (ApprovalSettler.unindex)."""


async def cancel_one(
    tasks: TaskStore, record: TaskRecord, reason: str, *, task_ttl_s: int, unindex: Unindex
) -> TaskRecord | None:
    """Cancels `record`'s task unless it has ended (FailedPreconditionError naming its status); retries a
    task that moves on meanwhile. The cancelled record, None when it kept changing."""
    task_id = record.task_id
    for attempt in range(8):
        if attempt:
            record = await tasks.load(task_id)
        if record.status.terminal:
            raise FailedPreconditionError(
                f"task {task_id} has already ended with status {record.status.name}",
                metadata={"status": record.status.name},
            )
        err = AgentmeshError(ErrorCode.CANCELLED, reason or "cancelled by a client")
        event = TaskEvent(
            task_id=task_id,
            sequence=0,
            kind=EventKind.STATUS,
            time_ms=now_ms(),
            status=TaskStatus.CANCELLED,
            step=record.cursor.step,
            message=f"status CANCELLED: {err.message}",
            error=err,
        )
        try:
            await tasks.commit(
                task_id,
                fence=record.fence,
                expect_status=record.status,
                bump_fence=True,  # the owner, if any, is now stale
                fields=fields_of(
                    status=TaskStatus.CANCELLED, error=err, pending=None, update_ms=now_ms(), lease_until=0
                ),
                events=[event],
                ttl_s=task_ttl_s,
                agent=record.agent_id,
            )
        except (StaleOwnerError, WrongStatusError):
            continue  # it moved on meanwhile; look again
        if record.status == TaskStatus.WAITING_APPROVAL and record.pending is not None:
            await unindex(task_id, record.pending.approval_id)
        return await tasks.load(task_id)
    return None


async def cancel_tree(
    tasks: TaskStore, queue: TaskQueue, cancelled: TaskRecord, *, task_ttl_s: int, unindex: Unindex
) -> int:
    """After a task was cancelled: the rest of its handoff tree when it is a root (each task that has not
    ended), and the answer to whoever waits for it. The tasks cancelled."""
    count = 0
    if not cancelled.parent_task_id:
        for task_id in await tasks.tree(cancelled.task_id):
            try:
                member = await tasks.load(task_id)
                if member.status.terminal:
                    continue
                done = await cancel_one(
                    tasks, member, f"its root task {cancelled.task_id} was cancelled", task_ttl_s=task_ttl_s,
                    unindex=unindex,
                )  # fmt: skip
            except (NotFoundError, FailedPreconditionError):
                continue  # not created yet (its first run sees the root cancelled), or ended meanwhile
            count += done is not None
    elif cancelled.answer_to:
        await handoff_answers.deliver(tasks, queue, cancelled)
    return count
