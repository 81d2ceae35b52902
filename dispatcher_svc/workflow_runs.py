"""Workflow runs in a dispatcher replica: what the WorkflowService RPCs do, and the loop that advances runs.

`WorkflowRuns` puts the pure package (`dispatcher_svc.workflows`) together with the dispatcher: a
`RunStore`, an `Executor` whose steps are tasks and tool calls (`workflow_steps.DispatcherSteps`), and a
`Driver`, which every replica's background loop calls (`Driver.tick`, `Driver.fire_schedules`) every
`workflows.poll_interval_s`, like the worker's approval sweeper. Access: a run is read, watched and
cancelled by its creator (the subject, and agent id, that started it) and operators; an id the caller
may not see is PERMISSION_DENIED whether or not it exists, as for tasks (access.py).

ListWorkflowRuns pages the driver's `<prefix>:wfruns:all` (run id -> start ms).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentmesh.authenticator import Authenticator
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, NotFoundError, UnavailableError
from agentmesh.identity_value import Identity
from agentmesh.pagetoken import PageCursor, PageTokens, filter_hash
from agentmesh.store import Store
from dispatcher_svc.access import Creator, is_creator, is_operator, task_denied
from dispatcher_svc.listing import page_size_of
from dispatcher_svc.service import Dispatcher
from dispatcher_svc.workflow_steps import DispatcherSteps, RunIdentity, run_of_task, task_id_of
from dispatcher_svc.workflows.driver import ORPHAN_S, Driver
from dispatcher_svc.workflows.executor import Executor, step_id
from dispatcher_svc.workflows.runs import RunExistsError, RunRecord, RunStore
from dispatcher_svc.workflows.state import RunStatus
from dispatcher_svc.workflows.validate import Workflow
from dispatcher_svc.workflows.wakes import Wakes

__all__ = ["MAX_EXAMINED", "RunEvent", "WorkflowRuns", "task_ids"]

log = logging.getLogger("dispatcher_svc.workflow_runs")

MAX_EXAMINED = 1000
"""Runs examined per ListWorkflowRuns call, at most."""
_WATCH_BLOCK_S = 1.0
"""A watch looks at its run's record at least this often (its events wake it at once)."""


@dataclass(frozen=True)
class RunEvent:
    sequence: int
    data: dict[str, Any]


def _denied(caller: Identity, run_id: str, verb: str) -> AgentmeshError:
    # The wording of tasks' refusal, about a run: the same answer whether or not it exists.
    denied = task_denied(caller, run_id, verb)
    denied.message = denied.message.replace("no task", "no workflow run").replace("a task's", "a run's")
    return denied


class WorkflowRuns:
    """The workflow operations and loop of one dispatcher replica (see the module doc)."""

    def __init__(self, dispatcher: Dispatcher, store: Store, authenticator: Authenticator) -> None:
        settings = dispatcher.settings
        self.settings = settings
        self.limits = settings.workflows
        self.catalog: dict[str, Workflow] = dispatcher.workflows
        self.store = store
        self.runs = RunStore(store, ttl_s=self.limits.run_ttl_s)
        self.steps = DispatcherSteps(
            store=store,
            runs=self.runs,
            starter=dispatcher.starter,
            tasks=dispatcher.tasks,
            tools=dispatcher.ports.tools,
            authenticator=authenticator,
            environment=settings.environment,
            call_timeout_s=settings.dispatcher.call_timeout_s,
            lease_s=self.limits.lease_s,
            ttl_s=self.limits.run_ttl_s,
            wake=self.limits.wake,
            cancel_task=lambda task_id, who: dispatcher.cancel(task_id, "workflow run ended", caller=who),
        )
        self.executor = Executor(
            self.runs,
            self.steps,
            owner=dispatcher.queue.consumer,
            limits=self.limits,
            lease_ms=int(self.limits.lease_s * 1000),
        )
        self.driver = Driver(store, self.executor, poll_s=self.limits.poll_interval_s)
        self.wakes = Wakes(store)
        if self.limits.wake:
            dispatcher.tasks.on_end = self._task_ended
        self.index_key = self.driver.list_key
        key = settings.auth.key.get_secret_value() if settings.auth.key is not None else None
        self.tokens = PageTokens(key, "workflow_runs")
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False

    # -- the loop ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        self._loop = asyncio.create_task(self._run_loop(), name="dispatcher-workflows")

    async def stop(self) -> None:
        self._stopping = True
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        await self.steps.stop()

    async def _run_loop(self) -> None:
        # Also checks the flag: the Redis client sometimes swallows a cancellation mid-command.
        after = await self._wake_start()
        while not self._stopping:
            await self.pass_once()
            # Between passes, the runs whose steps ended are advanced at once (wakes.py).
            next_pass = time.monotonic() + self.limits.poll_interval_s
            while not self._stopping and (left := next_pass - time.monotonic()) > 0:
                if not self.limits.wake:
                    await asyncio.sleep(left)
                    break
                after = await self._woken(after, left)

    async def _wake_start(self) -> str:
        while not self._stopping and self.limits.wake:
            try:
                return await self.wakes.last_id()
            except AgentmeshError as exc:
                log.warning("cannot read workflow wakes: %s", exc)
                await asyncio.sleep(self.limits.poll_interval_s)
        return "0-0"

    async def _woken(self, after: str, timeout_s: float) -> str:
        """Advances the runs woken after `after` (waiting up to `timeout_s` for one); the next `after`."""
        try:
            runs, after = await self.wakes.wait(after, timeout_s)
        except AgentmeshError as exc:
            log.warning("cannot read workflow wakes: %s", exc)
            await asyncio.sleep(timeout_s)
            return after
        for run_id in runs:
            await self._advance_now(run_id)
        return after

    async def _task_ended(self, task_id: str) -> None:
        """TaskStore.on_end: an agent step's task ended; wake its run (never raises: the commit is done)."""
        run_id = run_of_task(task_id)
        if not run_id:
            return
        try:
            await self.wakes.wake(run_id)
        except AgentmeshError as exc:
            log.warning("workflow run %s: not woken (its next poll advances it): %s", run_id, exc)

    async def pass_once(self) -> None:
        """One pass: fire due schedule ticks, then advance due runs. Never raises (the loop must not die)."""
        try:
            await self.driver.fire_schedules(self.catalog, self._scheduled_meta)
            await self.driver.tick()
        except UnavailableError as exc:
            log.warning("cannot advance workflow runs: %s", exc)
        except Exception:
            log.exception("advancing workflow runs failed; retrying")

    def _scheduled_meta(self, workflow: Workflow) -> dict[str, str]:
        return RunIdentity.scheduled(workflow, self.settings.environment).meta()

    # -- the operations ------------------------------------------------------------------------

    def workflow(self, name: str) -> Workflow:
        if not name:
            raise InvalidRequestError("workflow", "required: the name of a configured workflow")
        found = self.catalog.get(name)
        if found is None:
            known = ", ".join(sorted(self.catalog)) or "none"
            raise NotFoundError(f"no workflow {name!r} (configured: {known})")
        return found

    def list_workflows(self) -> Sequence[Workflow]:
        return [self.catalog[name] for name in sorted(self.catalog)]

    async def start_run(
        self, name: str, input_json: str, run_id: str, *, caller: Identity, request_id: str
    ) -> RunRecord:
        """A new run acting as `caller`; the id of an existing run answers it (its creator and operators)."""
        workflow = self.workflow(name)
        try:
            run_input = json.loads(input_json) if input_json.strip() else {}
        except ValueError as exc:
            raise InvalidRequestError("input_json", f"not JSON: {exc}") from None
        run_id = run_id or f"r-{uuid.uuid4().hex}"
        self.runs.key(run_id)  # INVALID_REQUEST for a malformed id, before anything is written
        try:
            await self.driver.submit(run_id, workflow, run_input, RunIdentity.of(caller, request_id).meta())
        except InvalidRequestError as err:
            # The input against the workflow's schema: named as the request's field.
            raise InvalidRequestError(
                "input_json", f"{err.message} (the input schema of workflow {name})", metadata={"field": "input_json"}
            ) from None
        except RunExistsError:
            record = await self.get_run(run_id, caller=caller)
            if record.workflow != name:
                raise AgentmeshError(
                    ErrorCode.FAILED_PRECONDITION, f"run_id: run {run_id} exists for workflow {record.workflow}"
                ) from None
            return record
        await self._advance_now(run_id)  # its first nodes start now, not at the next pass
        return await self.runs.load(run_id)

    async def _advance_now(self, run_id: str) -> None:
        """An advance outside the loop; a failure leaves the run to the loop's next pass (it is indexed)."""
        try:
            await self.executor.advance(run_id)
        except NotFoundError:
            pass  # expired, or a wake of a run whose creation is still under way
        except AgentmeshError as err:
            log.warning("workflow run %s: advance failed, the next pass retries: %s", run_id, err)

    async def get_run(self, run_id: str, *, caller: Identity, verb: str = "read") -> RunRecord:
        if not run_id:
            raise InvalidRequestError("run_id", "required")
        self.runs.key(run_id)
        try:
            record = await self.runs.load(run_id)
        except NotFoundError:
            if is_operator(caller):
                raise
            raise _denied(caller, run_id, verb) from None
        if not self._visible(caller, record):
            raise _denied(caller, run_id, verb)
        return record

    @staticmethod
    def _visible(caller: Identity, record: RunRecord) -> bool:
        who = RunIdentity.from_meta(record.meta)
        return is_operator(caller) or is_creator(caller, Creator(who.subject, who.agent_id))

    async def watch(self, run_id: str, after: int, *, caller: Identity) -> AsyncIterator[RunEvent]:
        """The run's events after `after`, in order and without gaps, until the run has ended."""
        if after < 0:
            raise InvalidRequestError("after_sequence", f"must be >= 0, got {after}")
        await self.get_run(run_id, caller=caller, verb="watch")
        return self._follow(run_id, after)

    async def _follow(self, run_id: str, after: int) -> AsyncIterator[RunEvent]:
        while True:
            record = await self.runs.load(run_id)  # before the read: an end seen here has its events in it
            for sequence, data in await self.runs.events(run_id, after):
                if sequence != after + 1:
                    raise AgentmeshError(
                        ErrorCode.FAILED_PRECONDITION,
                        f"events of run {run_id} after {after} are no longer kept (next is {sequence})",
                    )
                after = sequence
                yield RunEvent(sequence, data)
            if record.status != RunStatus.RUNNING and after >= record.last_sequence:
                return
            await self.runs.wait_events(run_id, after, _WATCH_BLOCK_S)  # returns on the next event

    async def cancel(self, run_id: str, reason: str, *, caller: Identity) -> RunRecord:
        """Aborts the run with CANCELLED: now if no other replica holds it, else at its owner's next pass."""
        record = await self.get_run(run_id, caller=caller, verb="cancel")
        if record.status != RunStatus.RUNNING:
            raise AgentmeshError(
                ErrorCode.FAILED_PRECONDITION, f"workflow run {run_id} has already ended ({record.status.name})"
            )
        reason = reason or f"cancelled by {caller.subject}"
        async with self.store.guard("cancel workflow run"):
            await self.store.redis.hset(self.runs.key(run_id), "cancel", reason[:500])
        await self._advance_now(run_id)
        return await self.runs.load(run_id)

    async def list_runs(
        self, workflow: str, page_size: int, page_token: str, *, caller: Identity
    ) -> tuple[list[RunRecord], str]:
        """One page of the runs `caller` may see, newest first, and the next page's token ("" at the end)."""
        size = page_size_of(page_size)
        digest = filter_hash({"workflow": workflow})
        cursor = self.tokens.parse(page_token, digest) if page_token else None
        async with self.store.guard("list workflow runs"):
            raw = await self.store.redis.zrevrangebyscore(
                self.index_key, "+inf" if cursor is None else cursor.ms, "-inf", start=0, num=MAX_EXAMINED + 1,
                withscores=True,
            )  # fmt: skip
        found: list[RunRecord] = []
        last: PageCursor | None = None
        examined = 0
        for member, score in (tuple(pair) for pair in raw):
            run_id = member.decode() if isinstance(member, bytes) else str(member)
            if cursor is not None and (int(score), run_id) >= (cursor.ms, cursor.id):
                continue
            if examined >= MAX_EXAMINED or len(found) >= size:
                return found, self.tokens.issue(last, digest) if last is not None else ""
            examined += 1
            last = PageCursor(int(score), run_id)
            try:
                record = await self.runs.load(run_id)
            except NotFoundError:
                if score < (time.time() - ORPHAN_S) * 1000:  # expired (or never created): not a start under way
                    async with self.store.guard("unindex workflow run"):
                        await self.store.redis.zrem(self.index_key, run_id)
                continue
            if (not workflow or record.workflow == workflow) and self._visible(caller, record):
                found.append(record)
        return found, ""


def task_ids(record: RunRecord) -> dict[str, str]:
    """The task id of each agent node's current attempt (for the run's view)."""
    found: dict[str, str] = {}
    for node, state in record.state.nodes.items():
        definition: dict[str, Any] = next((n for n in record.definition.get("nodes", []) if n.get("id") == node), {})
        if definition.get("type") == "agent" and state.attempts:
            found[node] = task_id_of(step_id(record.run_id, node, None, state.attempts))
    return found
