"""The dispatcher's operations (what the RPCs do), in plain Python.

`Dispatcher` validates requests, authorizes the caller (dispatcher_svc/access.py: who may start,
read, cancel, resume and resolve), creates and queues tasks with their creator (starting.py), serves their state
and events, cancels them, and resolves approvals (forwarded to tool_svc, which is authoritative)
before re-queueing the parked task (settling.py, which also holds the approval-expiry sweeper the
worker runs). Starts, resumes, cancels and resolutions, and their refusals, go to the audit stream.
The work itself is done by `Worker` + `AgentLoop`.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import weakref
from collections.abc import AsyncIterator, Sequence

from opentelemetry import trace

from agentmesh.audit import AuditLog
from agentmesh.authenticator import Authenticator
from agentmesh.chat import MAX_GOAL_CHARS
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
from agentmesh.identity_value import Identity
from agentmesh.metrics import Metrics
from agentmesh.store import Store
from agentmesh.telemetry import current_request_id
from dispatcher_svc import handoff_answers
from dispatcher_svc.access import (
    Auditor,
    Creator,
    check_resolver,
    check_task,
    is_operator,
    may_run,
    task_denied,
)
from dispatcher_svc.agent_load import AgentLoad
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.cancelling import cancel_one, cancel_tree
from dispatcher_svc.continuation import Conversations
from dispatcher_svc.events import EventLog
from dispatcher_svc.listing import Listing
from dispatcher_svc.model import ApprovalRecord, Task, TaskEvent, TaskStatus, ToolOutcome
from dispatcher_svc.ports import CallOptions, Ports
from dispatcher_svc.prompts import PromptStore, StepPrompt, prompt_denied
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.routing import Router
from dispatcher_svc.run.loop import AgentLoop, Hook
from dispatcher_svc.settling import ApprovalSettler, approval_expired, settlement_expired
from dispatcher_svc.starting import Starter, StartRequest, check_task_id, creator_of
from dispatcher_svc.task_index import TaskIndex
from dispatcher_svc.tasks import (
    TaskRecord,
    TaskStore,
)
from dispatcher_svc.traces import TaskTrace, TraceReader
from dispatcher_svc.worker import Worker
from dispatcher_svc.workflows.catalog import load_catalog_or_config_error

__all__ = ["MAX_GOAL_CHARS", "Dispatcher", "StartRequest", "approval_expired", "check_task_id", "settlement_expired"]

_RESOLVE_TIMEOUT_S = 30.0

log = logging.getLogger("dispatcher_svc.service")


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
        # Checked at start: a bad definition is a configuration error (exit 2); nothing runs them yet.
        self.workflows = load_catalog_or_config_error(settings)
        self.load = AgentLoad(store, ds.routing)  # agents' depth and FAILED share (agent_load.py)
        self.tasks = TaskStore(store, ds, metrics=self.metrics, agent_load=self.load)
        token = functools.partial(authenticator.mint, subject="dispatcher", roles=("agent",), ttl_s=300)
        self.router = Router(self.agents.list(), self.load, ports.models, ds.routing, tracer=tracer, identity=token)
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
            queue=self.queue,
            router=self.router,
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
            # The sweeper: expired approvals, waiting parents; it also prunes the task index and repairs
            # the agents' depths.
            sweep=self.load.repairing(self.agents.ids, self.listing.sweeping(self.sweep_parked)),
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
        self.starter = Starter(
            settings=settings,
            agents=self.agents,
            tasks=self.tasks,
            queue=self.queue,
            worker=self.worker,
            conversations=self.conversations,
            auditor=self.auditor,
            router=self.router,
        )
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

    async def sweep_parked(self) -> int:
        """One pass of the sweepers of parked tasks: expired approvals, then answers of ended delegates."""
        resumed = await self.settler.sweep()
        return resumed + await handoff_answers.sweep_waiting(self.tasks, self.queue)

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
        FAILED task of that id (starting.py)."""
        return await self.starter.start(request, caller=caller, request_id=request_id, traceparent=traceparent)

    async def run_task(
        self, request: StartRequest, *, caller: Identity, request_id: str, traceparent: str = ""
    ) -> tuple[Task, AsyncIterator[TaskEvent]]:
        """StartTask, then every event of the task from the first (RunTask)."""
        started = await self.starter.start_logged(
            request, caller=caller, request_id=request_id, traceparent=traceparent, watch=True
        )
        task = started.task
        # start admitted the caller to this task, and read or wrote its status: the watch need not; nor
        # read back the events start wrote, when they are all there is (a task it created: issue 45),
        # subscribed to this process's commits of it since before it was created.
        events = self.events.watch(
            task.task_id,
            0,
            opened=(task.status, task.last_sequence),
            written=started.written,
            subscription=started.subscription,
        )
        if started.subscription is not None:  # a watch never iterated ends no subscription itself
            weakref.finalize(events, self.tasks.feed.close, task.task_id, started.subscription)
        return task, events

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
        check_task(caller, task_id, creator_of(record), verb)
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
        ttl = self.settings.dispatcher.task_ttl_s
        cancelled = await cancel_one(self.tasks, record, reason, task_ttl_s=ttl, unindex=self.settler.unindex)
        if cancelled is None:
            raise FailedPreconditionError(f"task {task_id} changed too often to cancel; try again")
        await self.auditor.record(caller, "task.cancel", task_id, detail=reason)
        # Its handoff tree goes with a root; a delegated task's waiting parent gets HANDOFF_FAILED.
        await cancel_tree(self.tasks, self.queue, cancelled, task_ttl_s=ttl, unindex=self.settler.unindex)
        return (await self.tasks.load(task_id)).view()

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
                check_resolver(caller, task_id, creator_of(record), record.agent_id)
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
