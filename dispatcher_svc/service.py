"""The dispatcher's operations (what the RPCs do), in plain Python.

`Dispatcher` validates requests, authorizes the caller (dispatcher_svc/access.py: who may start,
read, cancel, resume and resolve), creates and queues tasks with their creator, serves their state
and events, cancels them, and resolves approvals (forwarded to tool_svc, which is authoritative)
before re-queueing the parked task (settling.py, which also holds the approval-expiry sweeper the
worker runs). Starts, resumes, cancels and resolutions, and their refusals, go to the audit stream.
The work itself is done by `Worker` + `AgentLoop`.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from opentelemetry import trace

from agentmesh.audit import AuditLog
from agentmesh.chat import MAX_GOAL_CHARS, Usage
from agentmesh.config import Settings
from agentmesh.errors import (
    AgentmeshError,
    ErrorCode,
    FailedPreconditionError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    Violation,
    echo,
)
from agentmesh.identity import Authenticator, Identity
from agentmesh.metrics import Metrics
from agentmesh.store import Store
from agentmesh.telemetry import current_request_id
from dispatcher_svc.access import (
    Auditor,
    Creator,
    check_resolver,
    check_run,
    check_task,
    is_creator,
    is_operator,
    may_run,
    task_denied,
)
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.continuation import Conversations, session_busy
from dispatcher_svc.events import EventLog, now_ms
from dispatcher_svc.listing import Listing
from dispatcher_svc.loop import AgentLoop, Hook
from dispatcher_svc.model import ApprovalRecord, EventKind, Task, TaskEvent, TaskStatus, ToolOutcome
from dispatcher_svc.ports import CallOptions, Ports
from dispatcher_svc.prompts import PromptStore, StepPrompt, prompt_denied
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.settling import ApprovalSettler, approval_expired, settlement_expired
from dispatcher_svc.task_index import TaskIndex
from dispatcher_svc.tasks import (
    StaleOwnerError,
    TaskRecord,
    TaskStore,
    WrongStatusError,
    fields_of,
)
from dispatcher_svc.traces import TaskTrace, TraceReader
from dispatcher_svc.worker import Worker

__all__ = ["MAX_GOAL_CHARS", "Dispatcher", "StartRequest", "approval_expired", "check_task_id", "settlement_expired"]

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_RESOLVE_TIMEOUT_S = 30.0

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
    session_id: str = ""
    """An existing session to continue (continuation.py); "" opens a new one whose id is the task id."""


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
        metrics: Metrics | None = None,
        traces: TraceReader | None = None,
    ) -> None:
        ds = settings.dispatcher
        self.traces = traces or TraceReader(None, "no span file was given to this dispatcher")
        self.metrics = metrics or Metrics()
        self.settings = settings
        self.authenticator = authenticator
        self.ports = ports
        self.agents = AgentRegistry(settings.agents)
        self.tasks = TaskStore(store, ds, metrics=self.metrics)
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
        self.settler = ApprovalSettler(
            tasks=self.tasks,
            queue=self.queue,
            agents=self.agents,
            ports=ports,
            task_ttl_s=ds.task_ttl_s,
            mint_token=self.mint_task_token,
        )
        key = settings.auth.key.get_secret_value() if settings.auth.key is not None else None
        self.listing = Listing(self.tasks, TaskIndex(store), key)  # ListTasks, ListApprovals
        self.worker = Worker(
            tasks=self.tasks,
            queue=self.queue,
            loop=self.loop,
            settings=ds,
            sweep=self.listing.sweeping(self.settler.sweep),  # which also prunes the task index
            metrics=self.metrics,
        )
        self.conversations = Conversations(
            self.tasks,
            ports.context,
            call_timeout_s=ds.call_timeout_s,
            starting_grace_s=ds.call_timeout_s,
            task_ttl_s=ds.task_ttl_s,
        )
        self.prompts = PromptStore(store)
        self.auditor = Auditor(AuditLog(store, settings.audit))
        # With auth disabled every caller may be the one dev identity: no duties to separate (access.py).
        self.separate_duties = settings.auth.separation_of_duties and authenticator.enabled

    async def start(self) -> None:
        await self.tasks.load_scripts()
        await self.listing.backfill()
        await self.worker.start()

    async def stop(self) -> None:
        await self.worker.stop()

    def mint_task_token(self, record: TaskRecord, agent: AgentConfig) -> str:
        """The task's identity: agent, instance, environment, roles, permissions, task id, expiry, and
        the task's creator (context_svc makes it the owner of the session the task opens)."""
        return self.authenticator.mint(
            subject=agent.id,
            roles=("agent",),
            agent_id=agent.id,
            instance=f"{agent.id}/{record.task_id}",
            environment=self.settings.environment,
            permissions=agent.permissions,
            task_id=record.task_id,
            creator=record.creator,
        )

    async def sweep_approvals(self) -> int:
        """One pass of the approval-expiry sweeper (`ApprovalSettler.sweep`)."""
        return await self.settler.sweep()

    async def expire_approval(self, task_id: str, approval_id: str) -> bool:
        """Settles a task parked on an approval whose expiry has passed (`ApprovalSettler.expire`)."""
        return await self.settler.expire(task_id, approval_id)

    # -- StartTask -----------------------------------------------------------------------------

    async def start_task(
        self, request: StartRequest, *, caller: Identity, request_id: str, traceparent: str = ""
    ) -> Task:
        """Creates and queues a task recording `caller` as its creator; idempotent on `task_id`; resumes a
        FAILED task of that id. The caller must be allowed to run the agent, and an existing task is
        answered (or resumed) for its creator and operators only (access.py)."""
        if not request.agent_id:
            raise InvalidRequestError("agent_id", "required: the id of a configured agent")
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
        # Naming the task's own id is the default: a new session (Task.session_id, echoed back).
        session_id = check_task_id(request.session_id, "session_id") if request.session_id else task_id
        try:  # before the lookup: an unknown agent's NOT_FOUND lists the agents
            check_run(caller, self.settings.environment, request.agent_id)
        except PermissionDeniedError as err:
            await self.auditor.refused(caller, "task.start", request.task_id or "(new)", err)
            raise
        agent = self.agents.get(request.agent_id)
        if session_id != task_id:
            if request.task_id and await self.tasks.exists(task_id):
                # A retry of this StartTask (or a resume): the task has its session already.
                return await self._start_existing(task_id, agent.id, goal, caller, session_id=session_id)
            try:
                # The caller's own token: context_svc admits the session's owner and operators only.
                await self.conversations.claim(session_id, task_id, agent.id, request_id=request_id)
            except AgentmeshError as err:
                if err.code == ErrorCode.PERMISSION_DENIED:  # context_svc's refusal, as its status carried it
                    await self.auditor.refused(caller, "task.start", task_id, err)
                elif err.code == ErrorCode.NOT_FOUND:
                    await self._not_opened_yet(session_id, caller)
                raise
        creator = Creator.of(caller)
        now = now_ms()
        fields = {
            **creator.fields(),
            **fields_of(
                status=TaskStatus.PENDING,
                step=0,
                usage=Usage(),
                update_ms=now,
                task_id=task_id,
                agent_id=agent.id,
                goal=goal,
                session_id=session_id,
                request_id=request_id,
                traceparent=traceparent,
                token_budget=agent.token_budget if request.token_budget is None else request.token_budget,
                max_steps=agent.max_steps if request.max_steps is None else request.max_steps,
                create_ms=now,
                runs=0,
            ),
        }
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
            return await self._start_existing(task_id, agent.id, goal, caller, session_id=request.session_id)
        continued = f", session {session_id}" if session_id != task_id else ""
        await self.auditor.record(caller, "task.start", task_id, detail=f"agent {agent.id}{continued}")
        return Task(
            task_id=task_id,
            agent_id=agent.id,
            goal=goal,
            status=TaskStatus.PENDING,
            session_id=session_id,
            request_id=request_id,
            last_sequence=1,
            create_time_ms=now,
            update_time_ms=now,
            created_by=creator.subject,
        )

    async def _not_opened_yet(self, session_id: str, caller: Identity) -> None:
        """No such session, but maybe its task has not run yet: FAILED_PRECONDITION for a caller who may see
        that task (its creator, the session's owner to be, or an operator); the NOT_FOUND stands otherwise."""
        try:
            record = await self.tasks.load(session_id)
        except NotFoundError:
            return
        if not record.status.terminal and (is_operator(caller) or is_creator(caller, _creator(record))):
            raise session_busy(session_id, session_id, record.status.name)

    async def _start_existing(
        self, task_id: str, agent_id: str, goal: str, caller: Identity, *, session_id: str = ""
    ) -> Task:
        record = await self.tasks.load(task_id)
        failed = record.status == TaskStatus.FAILED
        try:
            check_task(caller, task_id, _creator(record), "resume" if failed else "start")
        except PermissionDeniedError as err:
            await self.auditor.refused(caller, "task.resume" if failed else "task.start", task_id, err)
            raise
        # An empty session_id repeats nobody's choice: only another session is a conflict.
        if record.agent_id != agent_id or record.goal != goal or session_id not in ("", record.session_id):
            raise FailedPreconditionError(
                f"task_id: task {task_id} exists with another agent, goal or session",
                violations=[Violation(path="task_id", rule="unique", actual=repr(task_id))],
                metadata={"field": "task_id"},
            )
        request_id = current_request_id() or record.request_id
        if failed:
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
                    agent=record.agent_id,
                )
            except (StaleOwnerError, WrongStatusError):
                return (await self.tasks.load(task_id)).view()
            # Queued only once still its session's newest task (continuation.py): else undone.
            await self._confirm_newest(record, request_id, undo=True)
            await self.queue.enqueue(task_id)
            await self.auditor.record(caller, "task.resume", task_id, detail=f"agent {agent_id}")
        elif record.status == TaskStatus.PENDING:
            # Maybe a retry of a StartTask whose queue entry was lost: a duplicate entry is harmless.
            await self._confirm_newest(record, request_id, undo=False)
            await self.queue.enqueue(task_id)
        return (await self.tasks.load(task_id)).view()

    async def _confirm_newest(self, record: TaskRecord, request_id: str, *, undo: bool) -> None:
        """FAILED_PRECONDITION, the task failed again, when a newer task continued its session; with
        `undo` (a resume just committed) any error fails it again too, so it never runs unconfirmed."""
        try:
            newer = await self.conversations.confirm(
                record.session_id, record.task_id, record.agent_id, request_id=request_id
            )
        except AgentmeshError as err:
            if undo:
                await self.conversations.fail_again(record, err)
            raise
        if newer:
            moved_on = FailedPreconditionError(
                f"task {record.task_id} cannot run again: its session {record.session_id} continued with task {newer}",
                metadata={"session_id": record.session_id, "task_id": newer},
            )
            await self.conversations.fail_again(record, moved_on)
            raise moved_on

    async def run_task(
        self, request: StartRequest, *, caller: Identity, request_id: str, traceparent: str = ""
    ) -> tuple[Task, AsyncIterator[TaskEvent]]:
        """StartTask, then every event of the task from the first (RunTask)."""
        task = await self.start_task(request, caller=caller, request_id=request_id, traceparent=traceparent)
        return task, self.events.watch(task.task_id, 0)  # start_task admitted the caller to this task

    # -- reads ---------------------------------------------------------------------------------

    async def _visible(self, task_id: str, caller: Identity, verb: str) -> TaskRecord:
        """The task, if `caller` may `verb` it; PERMISSION_DENIED otherwise, also for an unknown id
        unless the caller is an operator (NOT_FOUND then): task ids cannot be probed."""
        try:
            record = await self.tasks.load(task_id)
        except NotFoundError:
            if is_operator(caller):
                raise
            raise task_denied(caller, task_id, verb) from None
        check_task(caller, task_id, _creator(record), verb)
        return record

    async def get_task(self, task_id: str, *, caller: Identity) -> Task:
        check_task_id(task_id)
        return (await self._visible(task_id, caller, "read")).view()

    def watch(self, task_id: str, after: int = 0, *, caller: Identity) -> AsyncIterator[TaskEvent]:
        check_task_id(task_id)
        if after < 0:
            raise InvalidRequestError("after_sequence", f"must be >= 0, got {after}")

        async def admit() -> None:
            try:
                subject, agent = await self.tasks.creator(task_id)
            except NotFoundError:
                raise task_denied(caller, task_id, "watch") from None
            check_task(caller, task_id, Creator(subject, agent), "watch")

        # Operators may watch every task (an unknown one is NOT_FOUND): no read before the watch's own.
        return self.events.watch(task_id, after, admit=None if is_operator(caller) else admit)

    async def get_step_prompt(self, task_id: str, step: int, *, caller: Identity) -> StepPrompt:
        """The provider request of one step of a task, for the readers of its session (prompts.py)."""
        check_task_id(task_id)
        try:
            record = await self.tasks.load(task_id)
        except NotFoundError:
            if is_operator(caller):
                raise
            raise prompt_denied(caller, task_id) from None
        if not is_operator(caller):
            # context_svc decides who reads a session: asked with the caller's own token.
            opts = CallOptions("", current_request_id() or "", self.settings.dispatcher.call_timeout_s)
            try:
                await self.ports.context.get_session(record.session_id, opts)
            except AgentmeshError as err:
                if err.code in (ErrorCode.PERMISSION_DENIED, ErrorCode.NOT_FOUND):
                    raise prompt_denied(caller, task_id) from None
                raise
        return await self.prompts.get(task_id, record.session_id, step, record.step)

    async def get_task_trace(self, task_id: str, *, caller: Identity) -> TaskTrace:
        """The spans of a task's traces (traces.py), for whoever may read the task."""
        task = await self.get_task(task_id, caller=caller)
        return await self.traces.read(task.request_id, task.task_id)

    def list_agents(self, *, caller: Identity) -> Sequence[AgentConfig]:
        """The agents `caller` may start tasks as."""
        return [a for a in self.agents.list() if may_run(caller, self.settings.environment, a.id)]

    # -- CancelTask ----------------------------------------------------------------------------

    async def cancel(self, task_id: str, reason: str = "", *, caller: Identity) -> Task:
        """Cancels a task that has not ended: its owner's next write is refused and it stops."""
        check_task_id(task_id)
        try:
            record = await self._visible(task_id, caller, "cancel")
        except PermissionDeniedError as denied:
            await self.auditor.refused(caller, "task.cancel", task_id, denied)
            raise
        for attempt in range(8):
            if attempt:
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
                    agent=record.agent_id,
                )
            except (StaleOwnerError, WrongStatusError):
                continue  # it moved on meanwhile; look again
            if record.status == TaskStatus.WAITING_APPROVAL and record.pending is not None:
                await self.settler.unindex(task_id, record.pending.approval_id)
            await self.auditor.record(caller, "task.cancel", task_id, detail=reason)
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
        caller: Identity,
        settlement: str = "",
    ) -> tuple[ApprovalRecord, Task]:
        """Forwards the decision to tool_svc (with the caller's own identity) and resumes the task.

        With separation of duties, the task's creator and its agent are refused (access.py).
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
        is_settlement = pending.is_settlement if pending is not None else bool(settlement)
        action = "settlement.resolve" if is_settlement else "approval.resolve"
        if self.separate_duties:
            try:
                check_resolver(caller, task_id, _creator(record), record.agent_id)
            except PermissionDeniedError as err:
                await self.auditor.refused(caller, action, approval_id, err)
                raise
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
        # The decision is audited once, by tool_svc, which stores it (with the tool's name): the caller's
        # own token is forwarded, so the entry names the caller. Only refusals decided here are audited here.
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
        settled = await self.settler.settle(record, approval, outcome, resolver=caller.subject, reason=reason)
        if approval.state == "EXPIRED":
            # Whoever moved the task (we, or the sweeper racing us), the decision came too late.
            raise settlement_expired(task_id, pending) if pending.is_settlement else approval_expired(task_id, pending)
        if not settled:
            raise FailedPreconditionError(f"task {task_id} changed while the approval was resolved")
        return approval, (await self.tasks.load(task_id)).view()


def _creator(record: TaskRecord) -> Creator:
    return Creator(subject=record.creator, agent_id=record.creator_agent)
