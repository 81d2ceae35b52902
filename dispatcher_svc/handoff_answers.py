"""A delegated task's answer delivered to the task that waits for it (an ask handoff, issue 44).

The parent parks in WAITING_CHILD on its ask call; the child (or, after transfers, the last task of the
child's chain: every task a transfer creates inherits `answer_to`) ends. Its answer — the typed output
when it has one, else the answer text — becomes the call's outcome; a child that ended without one
(FAILED, ABORTED, CANCELLED) becomes an ENGINEERING HANDOFF_FAILED the model is told about. The parent
then goes back to the queue, as a resolved approval's task does (settling.py), and its run takes the
outcome as the call's result.

Delivery is one compare-and-set on the parent's WAITING_CHILD status and fence, so of the child's own
delivery (exits.py, CancelTask), the parent's check right after it parked (the child may have ended
before) and the sweeper (`sweep_waiting`: a child whose owner died between its terminal commit and the
delivery) exactly one moves the parent. A parking parent is indexed first (`index_waiting`), as a task
parked on an approval is: the sweeper finds every waiting task.
"""

from __future__ import annotations

import logging
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import CallStage, EventKind, TaskEvent, TaskStatus, ToolOutcome, ToolOutput
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.tasks import StaleOwnerError, TaskRecord, TaskStore, WrongStatusError, fields_of

__all__ = ["answer_outcome", "deliver", "deliver_if_ended", "index_waiting", "sweep_waiting"]

log = logging.getLogger("dispatcher_svc.handoffs")

_MAX_CHAIN = 64
"""Transfers followed from a waiting task's child to the chain's last task (depth is capped lower)."""
RECHECK_MS = 5_000
"""How often the sweeper looks at a task waiting for a child (a lost delivery is found this late)."""
_SWEEP_BATCH = 32


def _waiting_key(tasks: TaskStore) -> str:
    return f"{tasks.store.keys.prefix}:tasks:waiting_children"


async def index_waiting(tasks: TaskStore, task_id: str) -> None:
    """Adds a task about to park in WAITING_CHILD to the sweeper's index (a superset of the waiting tasks)."""
    async with tasks.store.guard("index waiting child"):
        await tasks.store.redis.zadd(_waiting_key(tasks), {task_id: now_ms() + RECHECK_MS})


async def sweep_waiting(tasks: TaskStore, queue: TaskQueue) -> int:
    """One pass over the tasks waiting for a child: those whose child's chain has ended get its answer
    (a delivery its owner did not make); those no longer waiting leave the index. The tasks resumed."""
    key, now = _waiting_key(tasks), now_ms()
    raw: Any = await tasks.store.call(
        "waiting children", tasks.store.redis.zrangebyscore(key, "-inf", now, start=0, num=_SWEEP_BATCH)
    )
    resumed = 0
    for member in raw or ():
        task_id = member.decode() if isinstance(member, bytes) else str(member)
        try:
            parent = await tasks.load(task_id)
        except AgentmeshError:
            parent = None
        if parent is None or parent.status is not TaskStatus.WAITING_CHILD:
            await tasks.store.call("waiting children", tasks.store.redis.zrem(key, task_id))
            continue
        if await deliver_if_ended(tasks, queue, parent.child_task_id):
            resumed += 1
            await tasks.store.call("waiting children", tasks.store.redis.zrem(key, task_id))
        else:
            await tasks.store.call(
                "waiting children", tasks.store.redis.zadd(key, {task_id: now + RECHECK_MS}, xx=True)
            )
    return resumed


def answer_outcome(call_id: str, tool_name: str, ended: TaskRecord) -> ToolOutcome:
    """The ask call's outcome from the task that ended: its answer, or HANDOFF_FAILED."""
    if ended.status is TaskStatus.SUCCEEDED:
        if ended.output_json:
            return ToolOutcome(
                call_id, tool_name, output=ToolOutput(inline=ended.output_json, result_type="structured")
            )
        return ToolOutcome(call_id, tool_name, output=ToolOutput(inline=ended.answer, result_type="text"))
    child_code = ended.error.code.name if ended.error is not None else ""
    reason = f": {ended.error.code.name}: {ended.error.message}" if ended.error is not None else ""
    error = AgentmeshError(
        ErrorCode.HANDOFF_FAILED,
        f"agent {ended.agent_id} (task {ended.task_id}) ended {ended.status.name} without an answer{reason}"[:1000],
        metadata={"child_task_id": ended.task_id, "child_status": ended.status.name, "child_code": child_code},
    )
    return ToolOutcome(call_id, tool_name, error=error)


async def deliver(tasks: TaskStore, queue: TaskQueue, ended: TaskRecord) -> bool:
    """Moves the task waiting for `ended`'s answer (ended.answer_to) back to the queue with it, once.
    False when nobody waits for it (or another delivery came first)."""
    if not ended.answer_to or not ended.status.terminal or ended.status is TaskStatus.HANDED_OFF:
        return False
    try:
        parent = await tasks.load(ended.answer_to)
    except AgentmeshError:
        return False
    if parent.status is not TaskStatus.WAITING_CHILD:
        return False
    cursor = parent.cursor
    waiting = [cs for cs in cursor.calls if cs.state is CallStage.WAITING]
    if not waiting:
        log.warning("task %s waits for a child but no call of it waits", parent.task_id)
        return False
    outcome = answer_outcome(waiting[0].call.id, waiting[0].call.name, ended)
    for cs in waiting:
        cs.state = CallStage.RUNNING
        cs.resolved = outcome
    now = now_ms()
    events = [
        TaskEvent(
            task_id=parent.task_id,
            sequence=0,
            kind=EventKind.HANDOFF,
            time_ms=now,
            status=TaskStatus.PENDING,
            step=cursor.step,
            message=f"answer of agent {ended.agent_id} (task {ended.task_id}): {ended.status.name}",
            attributes={
                "parent_task_id": parent.task_id,
                "child_task_id": ended.task_id,
                "mode": "answer",
                "child_status": ended.status.name,
            },
        ),
        TaskEvent(
            task_id=parent.task_id,
            sequence=0,
            kind=EventKind.STATUS,
            time_ms=now,
            status=TaskStatus.PENDING,
            step=cursor.step,
            message="status PENDING: resuming with the delegated answer",
        ),
    ]
    try:
        await tasks.commit(
            parent.task_id,
            fence=parent.fence,
            expect_status=TaskStatus.WAITING_CHILD,
            fields=fields_of(status=TaskStatus.PENDING, cursor=cursor, update_ms=now),
            events=events,
            agent=parent.agent_id,
        )
    except (StaleOwnerError, WrongStatusError):
        return False
    await queue.enqueue(parent.task_id)
    return True


async def deliver_if_ended(tasks: TaskStore, queue: TaskQueue, child_task_id: str) -> bool:
    """After a task parked on `child_task_id`: if the child's chain has ended already, deliver its answer."""
    task_id = child_task_id
    for _ in range(_MAX_CHAIN):
        try:
            record = await tasks.load(task_id)
        except AgentmeshError:
            return False
        if record.status is TaskStatus.HANDED_OFF and record.child_task_id:
            task_id = record.child_task_id
            continue
        return await deliver(tasks, queue, record) if record.status.terminal else False
    return False
