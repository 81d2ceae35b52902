"""The workflow executor's `StepPort` over the dispatcher: agent steps are ordinary tasks, tool steps one
governed ExecuteTool each (docs/design.md §18).

- **Agent step** -> a task created through the dispatcher's own StartTask path (`Starter.start`: the
  caller's right to run the agent, the output schema, the audit entry) with a task id derived from the
  step id, so a replica that starts the step again after a crash finds the same task. The step ends when
  the task does: SUCCEEDED gives its output (`output_json` parsed, else the answer text), FAILED its
  error's code (whose class decides the node's policy), CANCELLED the code CANCELLED.
- **Tool step** -> one ExecuteTool through the dispatcher's tool port, with the step id as idempotency
  key and the run id as session, under a token minted for the run's identity. The call runs in the
  background on the replica that started it; its result is kept in `<prefix>:wfstep:{<run id>}` (one
  hash per run). A call whose replica died (its heartbeat in that hash is older than the lease) is sent
  again by whichever replica next asks for its result: the same idempotency key, so tool_svc answers
  the first call's outcome instead of running it twice.

The identity a run acts under (`RunIdentity`) is recorded on the run when it starts: whoever started it,
as their verified token said (subject, agent id, roles, grants), so a run can do no more than its starter
could have done by hand, and its tasks list under that starter (ListTasks, access rules of tasks). A
scheduled run has no starter: it acts under its workflow's `schedule.run_as`, a service identity
configured per workflow (default `workflow:<name>` with the role `agent` and only the run grants of the
workflow's own agents), never the dispatcher's own: least privilege, and the audit stream names the
workflow that acted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentmesh.answers import canonical
from agentmesh.authenticator import Authenticator
from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError, NotFoundError
from agentmesh.grants import agent_run_permission
from agentmesh.identity_value import Identity
from agentmesh.redacted import traceback_text
from agentmesh.store import Store
from dispatcher_svc.model import Task, TaskStatus
from dispatcher_svc.ports import CallOptions, ToolPort
from dispatcher_svc.starting import Starter, StartRequest
from dispatcher_svc.tasks import TaskStore
from dispatcher_svc.workflows.executor import StepRequest, StepResult
from dispatcher_svc.workflows.runs import RunStore
from dispatcher_svc.workflows.validate import Workflow
from dispatcher_svc.workflows.wakes import Wakes

__all__ = ["DispatcherSteps", "RunIdentity", "run_of_step", "run_of_task", "task_id_of"]

log = logging.getLogger("dispatcher_svc.workflow_steps")

_MAX_HANDOFFS = 64
"""Tasks followed along a chain of transfer handoffs, at most."""


def task_id_of(step_id: str) -> str:
    """The task of an agent step: `wf.<step id>`, or a digest of it when that would be over 128 characters."""
    task_id = f"wf.{step_id}"
    return task_id if len(task_id) <= 128 else f"wf.{hashlib.sha256(step_id.encode()).hexdigest()}"


def run_of_step(step_id: str) -> str:
    """A step id is `<run>.<node>.<item or ->.<attempt>` (executor.step_id); node ids have no dots."""
    return step_id.rsplit(".", 3)[0]


def run_of_task(task_id: str) -> str:
    """The run whose agent step `task_id` is, or "" (another task, or a step id too long, kept as a digest)."""
    step = task_id[3:] if task_id.startswith("wf.") else ""
    return run_of_step(step) if step.count(".") >= 3 else ""


@dataclass(frozen=True)
class RunIdentity:
    """Who a run acts as (see the module doc), stored with the run as its `meta`."""

    subject: str
    agent_id: str = ""
    roles: tuple[str, ...] = ("agent",)
    permissions: tuple[str, ...] = ()
    request_id: str = ""

    @classmethod
    def of(cls, caller: Identity, request_id: str = "") -> RunIdentity:
        return cls(caller.subject, caller.agent_id, tuple(sorted(caller.roles)), caller.permissions, request_id)

    @classmethod
    def scheduled(cls, workflow: Workflow, environment: str) -> RunIdentity:
        schedule = workflow.definition.schedule
        assert schedule is not None
        run_as = schedule.run_as
        agents = sorted({n.agent for n in workflow.nodes.values() if hasattr(n, "agent")} | _parallel_agents(workflow))
        grants = tuple(run_as.permissions) + tuple(agent_run_permission(environment, a) for a in agents)
        return cls(run_as.subject or f"workflow:{workflow.name}", "", tuple(run_as.roles), grants)

    def meta(self) -> dict[str, str]:
        return {
            "subject": self.subject,
            "agent": self.agent_id,
            "roles": ",".join(self.roles),
            "permissions": json.dumps(list(self.permissions)),
            "request_id": self.request_id,
        }

    @classmethod
    def from_meta(cls, meta: Mapping[str, str]) -> RunIdentity:
        roles = tuple(r for r in meta.get("roles", "").split(",") if r) or ("agent",)
        permissions = tuple(json.loads(meta.get("permissions") or "[]"))
        return cls(meta.get("subject", ""), meta.get("agent", ""), roles, permissions, meta.get("request_id", ""))

    def identity(self, environment: str) -> Identity:
        return Identity(
            subject=self.subject,
            agent_id=self.agent_id,
            instance="",
            environment=environment,
            roles=frozenset(self.roles),
            permissions=self.permissions,
            task_id="",
            issued_at=0,
            expires_at=0,
            token_id="",
        )


def _parallel_agents(workflow: Workflow) -> set[str]:
    return {str(n.do.agent) for n in workflow.nodes.values() if hasattr(n, "do") and hasattr(n.do, "agent")}


def _output_of(text: str) -> Any:
    """A tool's inline result: its JSON when it is JSON, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class DispatcherSteps:
    """`StepPort` for `workflows.executor.Executor` (see the module doc)."""

    def __init__(
        self,
        *,
        store: Store,
        runs: RunStore,
        starter: Starter,
        tasks: TaskStore,
        tools: ToolPort,
        authenticator: Authenticator,
        environment: str,
        call_timeout_s: float,
        lease_s: float,
        ttl_s: int,
        cancel_task: Callable[[str, Identity], Awaitable[object]],
        wake: bool = True,
    ) -> None:
        self.store = store
        self.runs = runs
        self.starter = starter
        self.tasks = tasks
        self.tools = tools
        self.authenticator = authenticator
        self.environment = environment
        self.call_timeout_s = call_timeout_s
        self.lease_s = lease_s
        self.ttl_s = ttl_s
        self.cancel_task = cancel_task
        """The dispatcher's CancelTask (as the run's identity: the task's creator)."""
        self.wakes = Wakes(store) if wake else None
        self._calls: dict[str, asyncio.Task[None]] = {}

    async def stop(self) -> None:
        """Stops this replica's tool calls: their heartbeats lapse and another replica sends them again
        (the same idempotency key)."""
        calls = list(self._calls.values())
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)

    def _key(self, step_id: str) -> str:
        return f"{self.store.keys.prefix}:wfstep:{{{run_of_step(step_id)}}}"

    async def _identity(self, run_id: str) -> RunIdentity:
        return RunIdentity.from_meta((await self.runs.load(run_id)).meta)

    async def _put(self, step_id: str, fields: Mapping[str, str]) -> None:
        key = self._key(step_id)
        async with self.store.guard("write workflow step"):
            pipe = self.store.redis.pipeline(transaction=False)
            mapping: Any = dict(fields)  # redis-py's stubs want a Mapping of its wider key type
            pipe.hset(key, mapping=mapping)
            pipe.expire(key, self.ttl_s)
            await pipe.execute()

    async def _finish(self, step_id: str, result: StepResult) -> None:
        body = {"o": result.output} if result.error is None else {"e": result.error.value}
        await self._put(step_id, {step_id: json.dumps(body, ensure_ascii=False)})
        if self.wakes is not None:
            await self.wakes.wake(run_of_step(step_id))  # its owner advances the run now, not at its next poll

    async def start(self, request: StepRequest) -> None:
        who = await self._identity(request.run_id)
        if request.kind == "agent":
            await self._start_task(request, who)
            return
        await self._put(
            request.step_id,
            {
                f"{request.step_id}.req": json.dumps({"tool": request.target, "args": request.arguments or {}}),
                f"{request.step_id}.hb": str(int(time.time() * 1000)),
            },
        )
        self._spawn(request.step_id, request.target, request.arguments or {}, who)

    async def _start_task(self, request: StepRequest, who: RunIdentity) -> None:
        task_id = task_id_of(request.step_id)
        if await self.tasks.exists(task_id):
            return  # started before a crash: the same task (never resumed here: its end is the step's)
        start = StartRequest(
            agent_id=request.target,
            goal=request.goal,
            task_id=task_id,
            output_schema_json=canonical(request.output_schema) if request.output_schema is not None else "",
        )
        try:
            await self.starter.start(start, caller=who.identity(self.environment), request_id=who.request_id)
        except AgentmeshError as err:
            if err.code in (ErrorCode.UNAVAILABLE, ErrorCode.OVERLOADED):
                raise  # the advance fails; the run is looked at again and starts the same step
            # Refused (no right to run the agent, a goal too long...): the step fails with that code.
            await self._finish(request.step_id, StepResult(error=err.code))

    def _spawn(self, step_id: str, tool: str, arguments: dict[str, Any], who: RunIdentity) -> None:
        if step_id in self._calls and not self._calls[step_id].done():
            return
        call = asyncio.create_task(self._call(step_id, tool, arguments, who), name=f"workflow-step-{step_id}")
        self._calls[step_id] = call
        call.add_done_callback(lambda _: self._calls.pop(step_id, None))

    async def _call(self, step_id: str, tool: str, arguments: dict[str, Any], who: RunIdentity) -> None:
        beat = asyncio.create_task(self._heartbeat(step_id))
        try:
            token = self.authenticator.mint(
                subject=who.subject,
                roles=who.roles,
                agent_id=who.agent_id,
                permissions=who.permissions,
                instance=f"workflow/{run_of_step(step_id)}",
            )
            opts = CallOptions(token, who.request_id, self.call_timeout_s)
            call = ToolCall(id=step_id[-64:], name=tool, arguments_json=json.dumps(arguments, ensure_ascii=False))
            try:
                outcome = await self.tools.execute(
                    call, session_id=run_of_step(step_id), idempotency_key=step_id, goal="", opts=opts
                )
            except AgentmeshError as err:
                if err.code in (ErrorCode.UNAVAILABLE, ErrorCode.OVERLOADED):
                    return  # no result: the heartbeat lapses and the call is sent again (same key)
                await self._finish(step_id, StepResult(error=err.code))
                return
            if outcome.error is not None:
                result = StepResult(error=outcome.error.code)
            elif outcome.output is not None:
                result = StepResult(output=_output_of(outcome.output.inline or ""))
            else:
                # Approval-gated tools are for agent nodes (a task parks and resumes); not yet for tool nodes.
                result = StepResult(error=ErrorCode.FAILED_PRECONDITION)
            await self._finish(step_id, result)
        except Exception as exc:
            log.error("workflow step %s: the tool call failed unexpectedly\n%s", step_id, traceback_text(exc))
            await self._finish(step_id, StepResult(error=ErrorCode.INTERNAL))
        finally:
            beat.cancel()

    async def _heartbeat(self, step_id: str) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self._put(step_id, {f"{step_id}.hb": str(int(time.time() * 1000))})
            except AgentmeshError as err:
                log.warning("workflow step %s: heartbeat not written: %s", step_id, err)

    async def result(self, step_id: str) -> StepResult | None:
        key = self._key(step_id)
        async with self.store.guard("read workflow step"):
            done, request, beat = await self.store.redis.hmget(key, [step_id, f"{step_id}.req", f"{step_id}.hb"])
        if done is not None:
            body = json.loads(done)
            return StepResult(error=ErrorCode(body["e"])) if "e" in body else StepResult(output=body.get("o"))
        if request is not None:
            # A tool step: running here, or on a replica that may have died (its heartbeat lapsed).
            if step_id not in self._calls and int(beat or 0) < (time.time() - self.lease_s) * 1000:
                sent = json.loads(request)
                log.info("workflow step %s: its replica stopped mid-call; sending it again", step_id)
                await self._put(step_id, {f"{step_id}.hb": str(int(time.time() * 1000))})
                self._spawn(step_id, sent["tool"], sent["args"], await self._identity(run_of_step(step_id)))
            return None
        return await self._task_result(step_id)

    async def _chain_end(self, task_id: str) -> Task | None:
        """The task at the end of `task_id`'s chain of transfer handoffs (HANDED_OFF is terminal for the
        parent only: the work goes on in its child); None when a task of it does not exist."""
        for _ in range(_MAX_HANDOFFS):
            try:
                task = (await self.tasks.load(task_id)).view()
            except NotFoundError:
                return None
            if task.status != TaskStatus.HANDED_OFF or not task.child_task_id:
                return task
            task_id = task.child_task_id
        return None  # longer than any chain a task may build

    async def _task_result(self, step_id: str) -> StepResult | None:
        task = await self._chain_end(task_id_of(step_id))
        if task is None:
            return StepResult(error=ErrorCode.INTERNAL)  # never created (expired?): a failed attempt
        if task.status == TaskStatus.SUCCEEDED:
            return StepResult(output=json.loads(task.output_json) if task.output_json else task.answer)
        if task.status in (TaskStatus.FAILED, TaskStatus.ABORTED):
            # ABORTED: a FATAL error stopped the task, and its code says so: the node's policy aborts the run.
            return StepResult(error=task.error.code if task.error is not None else ErrorCode.INTERNAL)
        if task.status == TaskStatus.CANCELLED:
            return StepResult(error=ErrorCode.CANCELLED)
        if task.status == TaskStatus.HANDED_OFF:
            return StepResult(error=ErrorCode.INTERNAL)  # handed off to no task: nothing would end the step
        return None

    async def cancel(self, step_id: str) -> None:
        call = self._calls.get(step_id)
        if call is not None:
            call.cancel()  # a tool call already sent may still run to its end in tool_svc
            return
        task = await self._chain_end(task_id_of(step_id))  # a handed-off step: the task doing its work
        if task is None or task.status.terminal:
            return
        who = await self._identity(run_of_step(step_id))
        with contextlib.suppress(FailedPreconditionError):  # it ended meanwhile
            await self.cancel_task(task.task_id, who.identity(self.environment))
