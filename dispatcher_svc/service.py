"""The dispatcher's operations (what the RPCs do), in plain Python.

`Dispatcher` validates requests, creates and queues tasks, serves their state and events,
cancels them, and resolves approvals (forwarded to tool_svc, which is authoritative) before
re-queueing the parked task. Its expiry sweeper (run by the worker) resumes a parked task whose
approval expired with nobody resolving it: the call fails with APPROVAL_EXPIRED, an ENGINEERING
error the model is told about (docs/architecture.md §3). The work itself is done by `Worker` + `AgentLoop`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from opentelemetry import trace

from agentmesh.chat import Usage
from agentmesh.config import Settings
from agentmesh.errors import (
    AgentmeshError,
    ErrorCode,
    FailedPreconditionError,
    InvalidRequestError,
    NotFoundError,
    Violation,
    echo,
)
from agentmesh.identity import Authenticator
from agentmesh.store import Store
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.events import EventLog, now_ms
from dispatcher_svc.loop import AgentLoop, Hook
from dispatcher_svc.model import (
    ApprovalRecord,
    CallStage,
    EventKind,
    PendingApproval,
    Task,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
)
from dispatcher_svc.ports import CallOptions, Ports
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.tasks import (
    StaleOwnerError,
    TaskRecord,
    TaskStore,
    WrongStatusError,
    fields_of,
)
from dispatcher_svc.worker import Worker

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
MAX_GOAL_CHARS = 32_000
_RESOLVE_TIMEOUT_S = 30.0
_SWEEP_BATCH = 32
"""Due approvals one sweep takes at most; the rest come due on the next pass."""
_SWEEP_HOLD_MS = 30_000
"""How long an entry a sweep took is hidden from other sweeps; it comes due again if not settled."""
_SWEEP_CALL_TIMEOUT_S = 10.0
_RECHECK_MS = 5_000
"""When tool_svc does not see a due approval expired yet, it is looked at again this much later."""

log = logging.getLogger("dispatcher_svc.service")


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
        self.events = EventLog(store, self.tasks, ds.heartbeat_interval_s, ds.foreign_event_poll_s)
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
        self.worker = Worker(
            tasks=self.tasks, queue=self.queue, loop=self.loop, settings=ds, sweep=self.sweep_approvals
        )

    async def start(self) -> None:
        await self.tasks.load_scripts()
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
        with self.worker.slot() as take:
            outcome = await self.tasks.create(task_id, fields, created, self.queue, take=take)
            # Spawned inside the block: the slot passes to the run without a gap.
            self.worker.take(outcome.taken)
        if not outcome.created:
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
            if record.status == TaskStatus.WAITING_APPROVAL and record.pending is not None:
                await self._unindex(task_id, record.pending.approval_id)
            return (await self.tasks.load(task_id)).view()
        raise FailedPreconditionError(f"task {task_id} changed too often to cancel; try again")

    # -- ResolveApproval -----------------------------------------------------------------------

    async def resolve_approval(
        self,
        task_id: str,
        approval_id: str,
        *,
        approve: bool,
        reason: str,
        arguments_sha256: str,
        resolver: str,
        settlement: str = "",
    ) -> tuple[ApprovalRecord, Task]:
        """Forwards the decision to tool_svc (with the caller's own identity) and resumes the task.

        An approval that expired is decided by nobody: the task resumes with the call failed as
        APPROVAL_EXPIRED, as the expiry sweeper would have done, and the caller gets that error.
        A settlement (`settlement` "ran" / "not_ran") resumes the task with the call recorded as ran, or
        with the outcome of sending it once more; one that expired fails the task OUTCOME_UNKNOWN.
        """
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
                f"approval_id: task {task_id} waits for approval {pending.approval_id}, not {echo(approval_id)}",
                violations=[
                    Violation(
                        path="approval_id", rule="matches", expected=pending.approval_id, actual=echo(approval_id)
                    )
                ],
            )
        if pending.is_settlement != bool(settlement):
            raise InvalidRequestError(
                "settlement",
                f"task {task_id} waits for settlement {approval_id}: say RAN or NOT_RAN"
                if pending.is_settlement
                else f"approval {approval_id} is not a settlement: approve or deny it",
            )
        outcome: ToolOutcome | None
        try:
            approval, outcome = await self.ports.tools.resolve_approval(
                approval_id, approve, reason, arguments_sha256, _RESOLVE_TIMEOUT_S, settlement=settlement
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
        settled = await self._settle(record, approval, outcome, resolver=resolver, reason=reason)
        if approval.state == "EXPIRED":
            # Whoever moved the task (we, or the sweeper racing us), the decision came too late.
            raise settlement_expired(task_id, pending) if pending.is_settlement else approval_expired(task_id, pending)
        if not settled:
            raise FailedPreconditionError(f"task {task_id} changed while the approval was resolved")
        return approval, (await self.tasks.load(task_id)).view()

    async def _settle(
        self, record: TaskRecord, approval: ApprovalRecord, outcome: ToolOutcome | None, *, resolver: str, reason: str
    ) -> bool:
        """Resumes a task parked on `approval` with its decision, once: a compare-and-set on the parked
        status and the fence, so of a ResolveApproval and the sweepers of every replica racing for the
        same approval exactly one moves the task and writes its events. False when another one did.

        APPROVED without an outcome: the loop re-sends the call with its idempotency key and tool_svc
        replays the outcome; DENIED / EXPIRED fail the call (ENGINEERING: the model is told).
        """
        task_id, pending = record.task_id, record.pending
        assert pending is not None
        plan, approval_id = pending.plan, pending.approval_id
        expired = approval.state == "EXPIRED"
        if expired and pending.is_settlement:
            return await self._fail_unsettled(record, pending)
        if outcome is None and approval.state in ("DENIED", "EXPIRED"):
            err = (
                approval_expired(task_id, pending)
                if expired
                else AgentmeshError(
                    ErrorCode.APPROVAL_DENIED, f"approval {approval_id} denied: {approval.reason}".strip()
                )
            )
            outcome = ToolOutcome(plan.id, plan.name, error=err)
        cursor = record.cursor
        for cs in cursor.calls:
            if cs.state is CallStage.WAITING:
                cs.state = CallStage.RUNNING
                cs.resolved = outcome
        who = approval.resolved_by or resolver
        if expired:
            message = f"approval {approval_id} expired before anyone decided; {plan.name} did not run"
            attributes = {"state": approval.state}
        elif pending.is_settlement:
            found = {"ran": "RAN (recorded as ran; not re-sent)", "not_ran": "NOT_RAN (sent once more)"}
            verdict = found.get(approval.settlement, approval.state.lower())
            message = f"settlement {approval_id} of {plan.name}: {verdict} by {who}" + (f": {reason}" if reason else "")
            attributes = {"state": approval.state, "resolved_by": who, "settlement": approval.settlement}
        else:
            verdict = "approved" if approval.state == "APPROVED" else approval.state.lower()
            message = f"approval {approval_id} {verdict} by {who}" + (f": {reason}" if reason else "")
            attributes = {"state": approval.state, "resolved_by": who}
        events = [
            TaskEvent(
                task_id=task_id,
                sequence=0,
                kind=EventKind.APPROVAL_RESOLVED,
                time_ms=now_ms(),
                status=TaskStatus.PENDING,
                step=cursor.step,
                message=message,
                tool_call=plan,
                error=outcome.error if expired and outcome is not None else None,
                pending_approval=pending,
                attributes=attributes,
            ),
            TaskEvent(
                task_id=task_id,
                sequence=0,
                kind=EventKind.STATUS,
                time_ms=now_ms(),
                status=TaskStatus.PENDING,
                step=cursor.step,
                message="status PENDING: resuming after the approval" + (" expired" if expired else ""),
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
        except (StaleOwnerError, WrongStatusError):
            return False
        await self._enqueue(task_id)
        await self._unindex(task_id, approval_id)
        return True

    async def _fail_unsettled(self, record: TaskRecord, pending: PendingApproval) -> bool:
        """A settlement nobody decided in time: the task fails OUTCOME_UNKNOWN and nothing is re-sent."""
        task_id, cursor = record.task_id, record.cursor
        err = settlement_expired(task_id, pending)
        events = [
            TaskEvent(
                task_id=task_id,
                sequence=0,
                kind=EventKind.APPROVAL_RESOLVED,
                time_ms=now_ms(),
                status=TaskStatus.FAILED,
                step=cursor.step,
                message=f"settlement {pending.approval_id} expired unsettled; {pending.plan.name} was not re-sent",
                tool_call=pending.plan,
                error=err,
                pending_approval=pending,
                attributes={"state": "EXPIRED"},
            ),
            TaskEvent(
                task_id=task_id,
                sequence=0,
                kind=EventKind.STATUS,
                time_ms=now_ms(),
                status=TaskStatus.FAILED,
                step=cursor.step,
                message=f"status FAILED: {err}",
                error=err,
            ),
        ]
        try:
            await self.tasks.commit(
                task_id,
                fence=record.fence,
                expect_status=TaskStatus.WAITING_APPROVAL,
                fields=fields_of(status=TaskStatus.FAILED, pending=None, error=err, update_ms=now_ms()),
                events=events,
                ttl_s=self.settings.dispatcher.task_ttl_s,
            )
        except (StaleOwnerError, WrongStatusError):
            return False
        await self._unindex(task_id, pending.approval_id)
        return True

    async def _unindex(self, task_id: str, approval_id: str) -> None:
        """Best effort: a member left behind is dropped by the sweeper."""
        try:
            await self.tasks.unindex_approval(task_id, approval_id)
        except AgentmeshError as exc:
            log.warning("task %s: approval %s left in the expiry index: %s", task_id, approval_id, exc)

    # -- the approval-expiry sweeper -----------------------------------------------------------

    async def sweep_approvals(self) -> int:
        """One pass of the expiry sweeper (Worker runs it every `approval_sweep_interval_s`): every
        parked task whose approval is due is settled by `expire_approval`. Returns how many tasks this
        replica resumed. An entry that fails here comes due again after `_SWEEP_HOLD_MS`."""
        due = await self.tasks.due_approvals(_SWEEP_BATCH, _SWEEP_HOLD_MS)
        results = await asyncio.gather(*(self.expire_approval(t, a) for t, a in due), return_exceptions=True)
        resumed = 0
        for (task_id, approval_id), result in zip(due, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                log.warning("task %s: approval %s not settled yet: %r", task_id, approval_id, result)
            elif result:
                resumed += 1
        return resumed

    async def expire_approval(self, task_id: str, approval_id: str) -> bool:
        """Settles a task parked on `approval_id` once the approval's expiry has passed; True when this
        call moved the task (False: not due yet, already moved, or another replica won the race).

        tool_svc holds the approval and is authoritative, so it is asked first: a decision that reached
        it in time (its ResolveApproval answered, ours died before resuming the task) is applied as made;
        otherwise the approval expired and the call fails with APPROVAL_EXPIRED.
        """
        try:
            record = await self.tasks.load(task_id)
        except NotFoundError:
            await self._unindex(task_id, approval_id)
            return False
        pending = record.pending
        if record.status != TaskStatus.WAITING_APPROVAL or pending is None or pending.approval_id != approval_id:
            if record.status == TaskStatus.PENDING:
                # A settle may have died between its commit and its enqueue: a duplicate entry is harmless.
                await self._enqueue(task_id)
            await self._unindex(task_id, approval_id)
            return False
        now = await self.tasks.redis_time_ms()
        if pending.expire_time_ms > now:
            await self.tasks.reindex_approval(task_id, approval_id, pending.expire_time_ms)
            return False
        approval = await self._approval_as_requester(record, pending)
        if approval.state not in ("APPROVED", "DENIED", "EXPIRED"):
            # tool_svc does not see it expired yet (another clock, or no known expiry): look again later.
            await self.tasks.reindex_approval(task_id, approval_id, now + _RECHECK_MS)
            return False
        return await self._settle(record, approval, None, resolver="", reason=approval.reason)

    async def _approval_as_requester(self, record: TaskRecord, pending: PendingApproval) -> ApprovalRecord:
        """tool_svc's record of the approval, read with the task's own identity (the agent that asked
        may read it; a sweep has no caller whose identity could be forwarded)."""
        try:
            agent: AgentConfig | None = self.agents.get(record.agent_id)
        except NotFoundError:
            agent = None  # removed from the configuration: the resumed run fails the task anyway
        if agent is None:
            return ApprovalRecord(request=pending, state="EXPIRED")
        opts = CallOptions(
            identity_token=self.mint_task_token(record, agent),
            request_id=record.request_id,
            timeout_s=_SWEEP_CALL_TIMEOUT_S,
        )
        try:
            return await self.ports.tools.get_approval(pending.approval_id, _SWEEP_CALL_TIMEOUT_S, opts)
        except NotFoundError:
            # Gone past its retention (a day after its expiry): it can no longer be decided.
            return ApprovalRecord(request=pending, state="EXPIRED")


def settlement_expired(task_id: str, pending: PendingApproval) -> AgentmeshError:
    """A settlement nobody decided in time: the outcome stays unknown and the task fails (FAILED is resumable:
    a resumed task re-sends the key and gets a new settlement, never a second side effect)."""
    return AgentmeshError(
        ErrorCode.OUTCOME_UNKNOWN,
        f"settlement {pending.approval_id} for {pending.plan.name} expired before anyone settled it; "
        "nothing was re-sent and the outcome stays unknown",
        metadata={"settlement_id": pending.approval_id, "task_id": task_id},
    )


def approval_expired(task_id: str, pending: PendingApproval) -> AgentmeshError:
    """The typed outcome of an approval nobody decided in time (ENGINEERING: the model is told)."""
    return AgentmeshError(
        ErrorCode.APPROVAL_EXPIRED,
        f"approval {pending.approval_id} for {pending.plan.name} expired before anyone decided; the call did not run",
        metadata={"approval_id": pending.approval_id, "task_id": task_id},
    )
