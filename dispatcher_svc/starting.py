"""StartTask: validates the request, authorizes the caller (access.py), attaches a continuing task to
its session (continuation.py), creates and queues the task with its creator, or answers (and resumes)
an existing one. `Dispatcher.start_task` (service.py) is its entry point.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from agentmesh.answers import SchemaProblem, canonical, narrow, parse_schema
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
)
from agentmesh.identity_value import Identity
from agentmesh.telemetry import current_request_id
from dispatcher_svc.access import Auditor, Creator, check_run, check_task, is_creator, is_operator, may_run
from dispatcher_svc.agents import AgentConfig, AgentRegistry
from dispatcher_svc.continuation import Conversations, session_busy
from dispatcher_svc.events import now_ms
from dispatcher_svc.feed import Subscription
from dispatcher_svc.model import EventKind, Task, TaskEvent, TaskStatus
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.routing import Choice, Router
from dispatcher_svc.tasks import StaleOwnerError, TaskRecord, TaskStore, WrongStatusError, fields_of
from dispatcher_svc.worker import Worker

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


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
    output_schema_json: str = ""
    """A JSON Schema the final answer must follow; it may only narrow the agent's (agentmesh.answers.narrow)."""
    capability: str = ""
    """Instead of `agent_id`: the agent is chosen among those carrying it (routing.py)."""


def output_schema_of(agent: AgentConfig, task_schema_json: str) -> str:
    """The schema a task's answer follows, as stored with the task ("" for free text); INVALID_ARGUMENT
    naming `output_schema_json` when the task's is no schema or widens the agent's."""
    try:
        task = parse_schema(task_schema_json, trusted=False) if task_schema_json else None
        schema = narrow(agent.output_schema, task)
    except SchemaProblem as exc:
        raise InvalidRequestError("output_schema_json", str(exc)) from None
    return canonical(schema) if schema is not None else ""


def check_task_id(task_id: str, field: str = "task_id") -> str:
    if not task_id:
        raise InvalidRequestError(field, "required")
    if not _TASK_ID.match(task_id):
        raise InvalidRequestError(field, "must match [A-Za-z0-9][A-Za-z0-9._:-]{0,127}", metadata={"field": field})
    return task_id


def exists_otherwise(task_id: str) -> FailedPreconditionError:
    return FailedPreconditionError(
        f"task_id: task {task_id} exists with another agent, goal or session",
        violations=[Violation(path="task_id", rule="unique", actual=repr(task_id))],
        metadata={"field": "task_id"},
    )


def creator_of(record: TaskRecord) -> Creator:
    return Creator(subject=record.creator, agent_id=record.creator_agent)


@dataclass(frozen=True)
class Started:
    """What `Starter.start_logged` did."""

    task: Task
    written: list[TaskEvent] = field(default_factory=list)
    """The events it wrote up to the task's last sequence: a task it created, its created event."""
    subscription: Subscription | None = None
    """The feed's subscription to a task it created, opened before the create (the caller closes it)."""


class Starter:
    """StartTask for one replica's dispatcher (its parts are the Dispatcher's own)."""

    def __init__(
        self,
        *,
        settings: Settings,
        agents: AgentRegistry,
        tasks: TaskStore,
        queue: TaskQueue,
        worker: Worker,
        conversations: Conversations,
        auditor: Auditor,
        router: Router,
    ) -> None:
        self.router = router
        self.settings = settings
        self.agents = agents
        self.tasks = tasks
        self.queue = queue
        self.worker = worker
        self.conversations = conversations
        self.auditor = auditor

    async def start(self, request: StartRequest, *, caller: Identity, request_id: str, traceparent: str = "") -> Task:
        """Creates and queues a task recording `caller` as its creator; idempotent on `task_id`; resumes a
        FAILED task of that id. The caller must be allowed to run the agent, and an existing task is
        answered (or resumed) for its creator and operators only (access.py)."""
        started = await self.start_logged(request, caller=caller, request_id=request_id, traceparent=traceparent)
        return started.task

    async def start_logged(
        self, request: StartRequest, *, caller: Identity, request_id: str, traceparent: str = "", watch: bool = False
    ) -> Started:
        """`start`, and what RunTask's watch needs to send a task it created without reading back
        what it wrote (issue 45): see `Started`; `watch` asks for the subscription."""
        if request.agent_id and request.capability:
            raise InvalidRequestError("capability", "set agent_id or capability, not both")
        if not request.agent_id and not request.capability:
            raise InvalidRequestError("agent_id", "required: the id of a configured agent (or set capability instead)")
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
        agent_id, choice = request.agent_id, None
        if request.capability:
            agent_id, choice = await self._route(request.capability, request.task_id, caller)
        try:  # before the lookup: an unknown agent's NOT_FOUND lists the agents
            check_run(caller, self.settings.environment, agent_id)
        except PermissionDeniedError as err:
            await self.auditor.refused(caller, "task.start", request.task_id or "(new)", err)
            raise
        agent = self.agents.get(agent_id)
        output_schema = output_schema_of(agent, request.output_schema_json)
        if session_id != task_id:
            if request.task_id and await self.tasks.exists(task_id):
                # A retry of this StartTask (or a resume): the task has its session already.
                return Started(await self._start_existing(task_id, agent.id, goal, caller, session_id=session_id))
            try:
                # The caller's own token: context_svc admits the session's owner and operators only.
                await self.conversations.claim(session_id, task_id, agent.id, request_id=request_id)
            except AgentmeshError as err:
                if err.code == ErrorCode.PERMISSION_DENIED:  # context_svc's refusal, as its status carried it
                    await self.auditor.refused(caller, "task.start", task_id, err)
                elif err.code == ErrorCode.NOT_FOUND:
                    await self._not_opened_yet(session_id, caller)
                raise
        elif request.task_id and not await self.tasks.exists(task_id):
            await self._refuse_squatted(task_id, caller, request_id)
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
                output_schema=output_schema,
            ),
        }
        created = TaskEvent(
            task_id=task_id,
            sequence=0,
            kind=EventKind.STATUS,
            time_ms=now,
            status=TaskStatus.PENDING,
            message=f"status PENDING: task created for agent {agent.id}" + (f" ({choice.summary()})" if choice else ""),
            attributes={"agent_id": agent.id, "request_id": request_id, **(choice.attributes() if choice else {})},
        )
        # Before the create: a run here commits at once (its RUNNING event, while the audit is written).
        subscription = self.tasks.feed.open(task_id) if watch else None
        try:
            with self.worker.slot() as take:
                first_run = self.worker.first_run(task_id) if take else None  # taken in the create's step
                outcome = await self.tasks.create(task_id, fields, created, self.queue, take=take, first_run=first_run)
                # Spawned inside the block: the slot passes to the run without a gap.
                acquired = (outcome.acquired, outcome.sent_at) if outcome.acquired is not None else None
                self.worker.take(outcome.taken, acquired)
            if outcome.created:
                continued = f", session {session_id}" if session_id != task_id else ""
                continued += f", capability {choice.capability}" if choice else ""
                await self.auditor.record(caller, "task.start", task_id, detail=f"agent {agent.id}{continued}")
        except BaseException:
            if subscription is not None:
                self.tasks.feed.close(task_id, subscription)
            raise
        if not outcome.created:
            if subscription is not None:
                self.tasks.feed.close(task_id, subscription)
            return Started(await self._start_existing(task_id, agent.id, goal, caller, session_id=request.session_id))
        task = Task(
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
        return Started(task, [created.with_sequence(1)], subscription)

    async def _route(self, capability: str, task_id: str, caller: Identity) -> tuple[str, Choice | None]:
        """The agent for a start naming `capability` (routing.py), among the carriers `caller` may run
        (none: the first carrier, whose check refuses it); a retry or resume of an existing task keeps
        that task's agent when it carries the capability."""
        carriers = self.router.carriers(capability)
        if task_id:
            try:
                record = await self.tasks.load(check_task_id(task_id))
            except NotFoundError:
                pass
            else:
                if record.agent_id not in {a.id for a in carriers}:
                    raise exists_otherwise(task_id)
                return record.agent_id, None
        runnable = [a for a in carriers if may_run(caller, self.settings.environment, a.id)]
        if not runnable:
            return carriers[0].id, None
        choice = await self.router.route(capability, runnable)
        return choice.agent_id, choice

    async def _refuse_squatted(self, task_id: str, caller: Identity, request_id: str) -> None:
        """A new task naming its id opens the session of that id: FAILED_PRECONDITION (field task_id)
        when a session of that id exists already, made by another caller or task (issue 39: any agent
        token could CreateSession(X) and so make a later StartTask(task_id=X) fail). Checked again
        after: a retry of this StartTask racing the first may find the session its run created."""
        if not await self.conversations.taken(task_id, request_id=request_id) or await self.tasks.exists(task_id):
            return
        err = FailedPreconditionError(
            f"task_id: a session named {task_id} exists already (not this task's): choose another task id",
            violations=[Violation(path="task_id", rule="unique", actual=repr(task_id))],
            metadata={"field": "task_id", "session_id": task_id},
        )
        await self.auditor.refused(caller, "task.start", task_id, err)
        raise err

    async def _not_opened_yet(self, session_id: str, caller: Identity) -> None:
        """No such session, but maybe its task has not run yet: FAILED_PRECONDITION for a caller who may see
        that task (its creator, the session's owner to be, or an operator); the NOT_FOUND stands otherwise."""
        try:
            record = await self.tasks.load(session_id)
        except NotFoundError:
            return
        if not record.status.terminal and (is_operator(caller) or is_creator(caller, creator_of(record))):
            raise session_busy(session_id, session_id, record.status.name)

    async def _start_existing(
        self, task_id: str, agent_id: str, goal: str, caller: Identity, *, session_id: str = ""
    ) -> Task:
        record = await self.tasks.load(task_id)
        failed = record.status == TaskStatus.FAILED
        try:
            check_task(caller, task_id, creator_of(record), "resume" if failed else "start")
        except PermissionDeniedError as err:
            await self.auditor.refused(caller, "task.resume" if failed else "task.start", task_id, err)
            raise
        # An empty session_id repeats nobody's choice: only another session is a conflict.
        if record.agent_id != agent_id or record.goal != goal or session_id not in ("", record.session_id):
            raise exists_otherwise(task_id)
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
