"""The dispatcher's operations (what the RPCs do), in plain Python.

`Dispatcher` validates requests, creates and queues tasks, serves their state and events,
cancels them, and resolves approvals (forwarded to tool_svc, which is authoritative) before
re-queueing the parked task. The work itself is done by `Worker` + `AgentLoop`.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from opentelemetry import trace

from agentmesh.auth import Authenticator
from agentmesh.config import Settings
from agentmesh.errors import (
    AgentmeshError,
    ErrorCode,
    FailedPreconditionError,
    InvalidRequestError,
    Violation,
)
from agentmesh.store import Store
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.events import EventLog, now_ms
from dispatcher_svc.loop import AgentLoop, Hook
from dispatcher_svc.model import (
    ApprovalRecord,
    EventKind,
    Task,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    Usage,
)
from dispatcher_svc.ports import Ports
from dispatcher_svc.tasks import (
    StaleOwnerError,
    TaskQueue,
    TaskRecord,
    TaskStore,
    WrongStatusError,
    fields_of,
)
from dispatcher_svc.worker import Worker

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_GOAL_CHARS = 32_000
_RESOLVE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class StartRequest:
    agent_id: str
    goal: str
    token_budget: int | None = None
    """None keeps the agent's."""
    max_steps: int | None = None
    """None keeps the agent's."""
    task_id: str = ""


def check_task_id(task_id: str, field: str = "task_id") -> str:
    if not task_id:
        raise InvalidRequestError(field, "required")
    if not _TASK_ID.match(task_id):
        raise InvalidRequestError(field, "must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}", metadata={"field": field})
    return task_id


class Dispatcher:
    """One replica's dispatcher: the operations plus its worker."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: Store,
        ports: Ports,
        authenticator: Authenticator,
        tracer: trace.Tracer | None = None,
        hook: Hook | None = None,
    ) -> None:
        ds = settings.dispatcher
        self.settings = settings
        self.authenticator = authenticator
        self.ports = ports
        self.agents = AgentRegistry(settings.agents)
        self.tasks = TaskStore(store, ds)
        self.events = EventLog(store, self.tasks, ds.heartbeat_interval_s)
        consumer = ds.consumer_name or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.queue = TaskQueue(store, ds.consumer_group, consumer)
        self.loop = AgentLoop(
            tasks=self.tasks,
            agents=self.agents,
            ports=ports,
            settings=ds,
            mint_token=self.mint_task_token,
            tracer=tracer,
            hook=hook,
            token_ttl_s=settings.auth.token_ttl_s,
        )
        self.worker = Worker(tasks=self.tasks, queue=self.queue, loop=self.loop, settings=ds)

    async def start(self) -> None:
        await self.worker.start()

    async def stop(self) -> None:
        await self.worker.stop()

    def mint_task_token(self, record: TaskRecord, agent: AgentConfig) -> str:
        """The task's identity: agent, instance, environment, roles, permissions, task id, expiry."""
        return self.authenticator.mint(
            subject=agent.id,
            roles=("agent",),
            agent_id=agent.id,
            instance=f"{agent.id}/{record.task_id}",
            environment=self.settings.environment,
            permissions=agent.permissions,
            task_id=record.task_id,
        )

    # -- StartTask -----------------------------------------------------------------------------

    async def start_task(self, request: StartRequest, *, request_id: str, traceparent: str = "") -> Task:
        """Creates and queues a task; idempotent on `task_id`; resumes a FAILED task of that id."""
        if not request.agent_id:
            raise InvalidRequestError("agent_id", "required: the id of a configured agent")
        agent = self.agents.get(request.agent_id)
        goal = request.goal.strip()
        if not goal:
            raise InvalidRequestError("goal", "must not be empty")
        if len(goal) > MAX_GOAL_CHARS:
            raise InvalidRequestError("goal", f"must be at most {MAX_GOAL_CHARS} characters, got {len(goal)}")
        if request.token_budget is not None and request.token_budget <= 0:
            raise InvalidRequestError(
                "token_budget", f"must be > 0 (leave it unset to keep the agent's), got {request.token_budget}"
            )
        if request.max_steps is not None and request.max_steps <= 0:
            raise InvalidRequestError(
                "max_steps", f"must be > 0 (leave it unset to keep the agent's), got {request.max_steps}"
            )
        task_id = check_task_id(request.task_id) if request.task_id else f"t-{uuid.uuid4().hex}"
        now = now_ms()
        fields = fields_of(
            status=TaskStatus.PENDING,
            step=0,
            usage=Usage(),
            update_ms=now,
            task_id=task_id,
            agent_id=agent.id,
            goal=goal,
            session_id=task_id,
            request_id=request_id,
            traceparent=traceparent,
            token_budget=agent.token_budget if request.token_budget is None else request.token_budget,
            max_steps=agent.max_steps if request.max_steps is None else request.max_steps,
            create_ms=now,
            runs=0,
        )
        created = TaskEvent(
            task_id=task_id,
            sequence=0,
            kind=EventKind.STATUS,
            time_ms=now,
            status=TaskStatus.PENDING,
            message=f"status PENDING: task created for agent {agent.id}",
            attributes={"agent_id": agent.id, "request_id": request_id},
        )
        if not await self.tasks.create(task_id, fields, created, self.queue):
            return await self._start_existing(task_id, agent.id, goal)
        return Task(
            task_id=task_id,
            agent_id=agent.id,
            goal=goal,
            status=TaskStatus.PENDING,
            session_id=task_id,
            request_id=request_id,
            last_sequence=1,
            create_time_ms=now,
            update_time_ms=now,
        )

    async def _start_existing(self, task_id: str, agent_id: str, goal: str) -> Task:
        record = await self.tasks.load(task_id)
        if record.agent_id != agent_id or record.goal != goal:
            raise FailedPreconditionError(
                f"task_id: task {task_id} exists with another agent or goal",
                violations=[Violation(path="task_id", rule="unique", actual=repr(task_id))],
                metadata={"field": "task_id"},
            )
        if record.status == TaskStatus.FAILED:
            # A FAILED task is terminal until resumed: StartTask with its id resumes it.
            event = TaskEvent(
                task_id=task_id,
                sequence=0,
                kind=EventKind.STATUS,
                time_ms=now_ms(),
                status=TaskStatus.PENDING,
                step=record.cursor.step,
                message="status PENDING: resumed after failure",
            )
            try:
                await self.tasks.commit(
                    task_id,
                    fence=record.fence,
                    expect_status=TaskStatus.FAILED,
                    fields=fields_of(status=TaskStatus.PENDING, error=None, update_ms=now_ms()),
                    events=[event],
                    ttl_s=-1,
                )
            except (StaleOwnerError, WrongStatusError):
                return (await self.tasks.load(task_id)).view()
            await self._enqueue(task_id)
        elif record.status == TaskStatus.PENDING:
            # Maybe a retry of a StartTask whose queue entry was lost: a duplicate entry is harmless.
            await self._enqueue(task_id)
        return (await self.tasks.load(task_id)).view()

    async def _enqueue(self, task_id: str) -> None:
        await self.queue.enqueue(task_id)

    # -- reads ---------------------------------------------------------------------------------

    async def get_task(self, task_id: str) -> Task:
        check_task_id(task_id)
        return (await self.tasks.load(task_id)).view()

    def watch(self, task_id: str, after: int = 0) -> AsyncIterator[TaskEvent]:
        check_task_id(task_id)
        if after < 0:
            raise InvalidRequestError("after_sequence", f"must be >= 0, got {after}")
        return self.events.watch(task_id, after)

    def list_agents(self) -> Sequence[AgentConfig]:
        return self.agents.list()

    # -- CancelTask ----------------------------------------------------------------------------

    async def cancel(self, task_id: str, reason: str = "") -> Task:
        """Cancels a task that has not ended: its owner's next write is refused and it stops."""
        check_task_id(task_id)
        for _ in range(8):
            record = await self.tasks.load(task_id)
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
                await self.tasks.commit(
                    task_id,
                    fence=record.fence,
                    expect_status=record.status,
                    bump_fence=True,  # the owner, if any, is now stale
                    fields=fields_of(
                        status=TaskStatus.CANCELLED, error=err, pending=None, update_ms=now_ms(), lease_until=0
                    ),
                    events=[event],
                    ttl_s=self.settings.dispatcher.task_ttl_s,
                )
            except (StaleOwnerError, WrongStatusError):
                continue  # it moved on meanwhile; look again
            return (await self.tasks.load(task_id)).view()
        raise FailedPreconditionError(f"task {task_id} changed too often to cancel; try again")

    # -- ResolveApproval -----------------------------------------------------------------------

    async def resolve_approval(
        self, task_id: str, approval_id: str, *, approve: bool, reason: str, arguments_sha256: str, resolver: str
    ) -> tuple[ApprovalRecord, Task]:
        """Forwards the decision to tool_svc (with the caller's own identity) and resumes the task."""
        check_task_id(task_id)
        if not approval_id:
            raise InvalidRequestError("approval_id", "required")
        record = await self.tasks.load(task_id)
        pending = record.pending
        if record.status != TaskStatus.WAITING_APPROVAL or pending is None:
            raise FailedPreconditionError(
                f"task {task_id} is {record.status.name}, not waiting for an approval",
                metadata={"status": record.status.name},
            )
        if pending.approval_id != approval_id:
            raise FailedPreconditionError(
                f"approval_id: task {task_id} waits for approval {pending.approval_id}, not {approval_id}",
                violations=[
                    Violation(path="approval_id", rule="matches", expected=pending.approval_id, actual=approval_id)
                ],
            )
        outcome: ToolOutcome | None
        try:
            approval, outcome = await self.ports.tools.resolve_approval(
                approval_id, approve, reason, arguments_sha256, _RESOLVE_TIMEOUT_S
            )
        except AgentmeshError as err:
            if err.code == ErrorCode.APPROVAL_EXPIRED:
                approval = ApprovalRecord(request=pending, state="EXPIRED", reason=err.message)
                outcome = None
            elif err.code == ErrorCode.FAILED_PRECONDITION:
                # Already resolved (e.g. our previous attempt died after tool_svc answered): read it.
                approval = await self.ports.tools.get_approval(approval_id, _RESOLVE_TIMEOUT_S)
                if approval.state == "PENDING":
                    raise
                outcome = None
            else:
                raise
        plan = pending.plan
        if outcome is None and approval.state in ("DENIED", "EXPIRED"):
            code = ErrorCode.APPROVAL_DENIED if approval.state == "DENIED" else ErrorCode.APPROVAL_EXPIRED
            outcome = ToolOutcome(
                plan.id,
                plan.name,
                error=AgentmeshError(
                    code, f"approval {approval_id} {approval.state.lower()}: {approval.reason}".strip()
                ),
            )
        # outcome None and APPROVED: the loop re-sends the call with its idempotency key; tool_svc replays.
        cursor = record.cursor
        waiting = [cs for cs in cursor.calls if cs.state == "waiting"]
        for cs in waiting:
            cs.state = "running"
            cs.resolved = outcome
        verdict = "approved" if approval.state == "APPROVED" else approval.state.lower()
        who = approval.resolved_by or resolver
        events = [
            TaskEvent(
                task_id=task_id,
                sequence=0,
                kind=EventKind.APPROVAL_RESOLVED,
                time_ms=now_ms(),
                status=TaskStatus.PENDING,
                step=cursor.step,
                message=f"approval {approval_id} {verdict} by {who}" + (f": {reason}" if reason else ""),
                tool_call=plan,
                pending_approval=pending,
                attributes={"state": approval.state, "resolved_by": who},
            ),
            TaskEvent(
                task_id=task_id,
                sequence=0,
                kind=EventKind.STATUS,
                time_ms=now_ms(),
                status=TaskStatus.PENDING,
                step=cursor.step,
                message="status PENDING: resuming after the approval",
            ),
        ]
        try:
            await self.tasks.commit(
                task_id,
                fence=record.fence,
                expect_status=TaskStatus.WAITING_APPROVAL,
                fields=fields_of(status=TaskStatus.PENDING, pending=None, cursor=cursor, update_ms=now_ms()),
                events=events,
            )
        except (StaleOwnerError, WrongStatusError) as exc:
            raise FailedPreconditionError(f"task {task_id} changed while the approval was resolved: {exc}") from exc
        await self._enqueue(task_id)
        return approval, (await self.tasks.load(task_id)).view()
