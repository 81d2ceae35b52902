"""Advancing a workflow run: one fenced step of the run at a time, on whichever replica holds it.

`Executor.advance(run_id)` acquires the run (a lease and a new fence), reads its state, collects the
results of the steps it started, fails the ones past their timeout, plans, starts what is ready
(agent and tool steps through the injected `StepPort`; conditions, joins and the expansion of a
parallel node at once, here), and writes the new state with the fence. Crash safety comes from two
rules. A step's id is derived from (run, node, item, attempt) and `StepPort.start` is idempotent by
it, so a replica that dies between starting a step and writing RUNNING starts the same step again,
which is the same task, not a second one. And a finished node is in the written state, which the
next owner reads, so nothing finished runs again.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]

from agentmesh.errors import ErrorCode, InvalidRequestError
from agentmesh.workflow_config import AgentStep, ConditionNode, JoinNode, ParallelNode, ToolStep, WorkflowsSettings
from dispatcher_svc.workflows import scheduler as sched
from dispatcher_svc.workflows.catalog import definition_from_data
from dispatcher_svc.workflows.conditions import ConditionError
from dispatcher_svc.workflows.runs import RunStore
from dispatcher_svc.workflows.state import NodeStatus, RunState, RunStatus
from dispatcher_svc.workflows.templates import render
from dispatcher_svc.workflows.validate import Names, Workflow, compile_workflow

__all__ = ["Executor", "StepPort", "StepRequest", "StepResult", "step_id"]


@dataclass(frozen=True)
class StepRequest:
    """One agent task or tool call of a run."""

    step_id: str
    run_id: str
    node: str
    item: int | None
    attempt: int
    kind: Literal["agent", "tool"]
    target: str
    """The agent id or the tool name."""
    goal: str = ""
    output_schema: dict[str, Any] | None = None
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True)
class StepResult:
    output: Any = None
    error: ErrorCode | None = None
    """None: the step succeeded with `output`."""


class StepPort(Protocol):
    """How steps run: agent nodes as ordinary tasks, tool nodes as governed tool calls."""

    async def start(self, request: StepRequest) -> None:
        """Starts the step; a second start with the same step id starts nothing new."""

    async def result(self, step_id: str) -> StepResult | None:
        """The step's result, or None while it runs."""

    async def cancel(self, step_id: str) -> None:
        """Stops the step if it still runs."""


def step_id(run_id: str, node: str, item: int | None, attempt: int) -> str:
    return f"{run_id}.{node}.{'-' if item is None else item}.{attempt}"


def _pinned_names(workflow_data: dict[str, Any]) -> Names:
    """A run's own definition names what it names: agents or tools removed from the configuration since
    it started fail its steps at run time rather than make the stored run unreadable."""
    agents: set[str] = set()
    tools: set[str] = set()
    for node in workflow_data.get("nodes", []):
        for step in (node, node.get("do") or {}):
            if "agent" in step:
                agents.add(str(step["agent"]))
            if "tool" in step:
                tools.add(str(step["tool"]))
    return Names(frozenset(agents), frozenset(tools))


class Executor:
    """Starts and advances workflow runs (see the module doc)."""

    def __init__(
        self,
        runs: RunStore,
        port: StepPort,
        *,
        owner: str,
        limits: WorkflowsSettings,
        lease_ms: int = 30_000,
        clock: Callable[[], float] = time.time,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.runs = runs
        self.port = port
        self.owner = owner
        self.limits = limits
        self.lease_ms = lease_ms
        self.clock = clock
        self.draw = draw
        self._compiled: dict[str, Workflow] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: Counter[str] = Counter()

    async def start(
        self, run_id: str, workflow: Workflow, run_input: Any, meta: Mapping[str, str] | None = None
    ) -> None:
        """A new run of `workflow` (pinned to this definition); INVALID_REQUEST for input its schema refuses."""
        schema = workflow.definition.input_schema
        if schema is not None:
            error = next(iter(Draft202012Validator(schema).iter_errors(run_input)), None)
            if error is not None:
                path = "input" + "".join(f"[{part!r}]" for part in error.absolute_path)
                raise InvalidRequestError(path, error.message)
        await self.runs.create(run_id, workflow, run_input, now_ms=int(self.clock() * 1000), meta=meta)

    def _workflow(self, definition: dict[str, Any]) -> Workflow:
        key = json.dumps(definition, sort_keys=True)
        if key not in self._compiled:
            self._compiled[key] = compile_workflow(
                definition_from_data(definition), _pinned_names(definition), self.limits
            )
        return self._compiled[key]

    async def advance(self, run_id: str) -> RunStatus | None:
        """One step of the run; its status after it, or None when another replica holds it or it is finished."""
        # One advance of a run at a time in this replica (the loop's pass, a wake, a start, a cancel): two
        # would both acquire (same owner) and the later commit would find its fence stale.
        lock = self._locks.setdefault(run_id, asyncio.Lock())
        self._users[run_id] += 1
        try:
            async with lock:
                return await self._advance(run_id)
        finally:
            self._users[run_id] -= 1
            if not self._users[run_id]:  # nobody holds or waits for it
                del self._users[run_id], self._locks[run_id]

    async def _advance(self, run_id: str) -> RunStatus | None:
        fence = await self.runs.acquire(run_id, self.owner, self.lease_ms)
        if fence is None:
            return None
        record = await self.runs.load(run_id)
        workflow = self._workflow(record.definition)
        before = state = record.state
        now = self.clock()
        if record.cancel and state.aborted is None:
            state, running = sched.abort(state, ErrorCode.CANCELLED, record.cancel)
            await self._cancel(run_id, state, running)
        state = await self._collect(workflow, run_id, state, now)
        state = await self._start_ready(workflow, run_id, record.input, state, now)
        status = sched.outcome(workflow, state)
        await self.runs.commit(run_id, fence, state, status, _events(before, state, status))
        return status

    async def _cancel(self, run_id: str, state: RunState, steps: Iterable[tuple[str, int | None]]) -> None:
        for node, item in steps:
            current = state[node]
            attempts = current.attempts if item is None else (current.items or ())[item].attempts
            await self.port.cancel(step_id(run_id, node, item, attempts))

    async def _fail(
        self, workflow: Workflow, run_id: str, state: RunState, node: str, item: int | None, code: ErrorCode, now: float
    ) -> RunState:
        state, decision = sched.failed(workflow, state, node, code, now, self.draw(), item)
        await self._cancel(run_id, state, decision.cancel)
        return state

    async def _collect(self, workflow: Workflow, run_id: str, state: RunState, now: float) -> RunState:
        """Results of the running steps, then the ones past their timeout."""
        for node, item in sched.running_steps(workflow, state):
            if state.aborted is not None:
                break
            current = state[node]
            attempts = current.attempts if item is None else (current.items or ())[item].attempts
            result = await self.port.result(step_id(run_id, node, item, attempts))
            if result is None:
                continue
            if result.error is None:
                state = sched.succeeded(state, node, result.output, item)
            else:
                state = await self._fail(workflow, run_id, state, node, item, result.error, now)
        for node, item in sched.timed_out(workflow, state, now):
            if state.aborted is not None:
                break
            await self._cancel(run_id, state, [(node, item)])
            state = await self._fail(workflow, run_id, state, node, item, ErrorCode.DEADLINE_EXCEEDED, now)
        return state

    async def _start_ready(
        self, workflow: Workflow, run_id: str, run_input: Any, state: RunState, now: float
    ) -> RunState:
        # Conditions, joins and expansions finish at once and may make more nodes ready: plan again.
        for _ in range(4 * len(workflow.nodes) + 4):
            if state.aborted is not None:
                break
            planned = sched.plan(workflow, state, now)
            if not planned.start and not planned.skip:
                break
            state = sched.apply(state, planned, now)
            for start in planned.start:
                if state.aborted is None:
                    state = await self._run(workflow, run_id, run_input, state, start, now)
        return state

    async def _run(
        self, workflow: Workflow, run_id: str, run_input: Any, state: RunState, start: sched.Start, now: float
    ) -> RunState:
        node = workflow.nodes[start.node]
        scope = sched.scope(workflow, state, run_input)
        try:
            if isinstance(node, ConditionNode):
                value = workflow.conditions[node.id].evaluate(scope, self.limits.condition_max_cost)
                return sched.succeeded(state, node.id, {"value": value})
            if isinstance(node, JoinNode):
                return sched.succeeded(
                    state, node.id, {d: scope["nodes"][d] for d in node.after if d in scope["nodes"]}
                )
            if isinstance(node, ParallelNode) and start.item is None:
                items = render(node.over, scope)
                if not isinstance(items, list) or len(items) > node.max_items:
                    raise ValueError(f"over: not a list of at most {node.max_items} items")
                return sched.expanded(state, node.id, len(items))
            step = node.do if isinstance(node, ParallelNode) else node
            if isinstance(node, ParallelNode):
                scope = {**scope, "item": render(node.over, scope)[start.item or 0]}
            await self.port.start(self._request(run_id, start, step, scope))
            return state
        except (LookupError, TypeError, ValueError, ConditionError):
            # A template or condition that does not fit this run's data: an ENGINEERING failure of the node.
            return await self._fail(workflow, run_id, state, start.node, start.item, ErrorCode.FAILED_PRECONDITION, now)

    @staticmethod
    def _request(run_id: str, start: sched.Start, step: Any, scope: dict[str, Any]) -> StepRequest:
        sid = step_id(run_id, start.node, start.item, start.attempt)
        if isinstance(step, AgentStep):
            rendered = render(step.goal, scope)
            goal = rendered if isinstance(rendered, str) else json.dumps(rendered, ensure_ascii=False)
            return StepRequest(
                sid, run_id, start.node, start.item, start.attempt, "agent", step.agent, goal, step.output_schema
            )
        assert isinstance(step, ToolStep)
        arguments = render(step.arguments, scope)
        return StepRequest(sid, run_id, start.node, start.item, start.attempt, "tool", step.tool, arguments=arguments)


def _events(before: RunState, after: RunState, status: RunStatus) -> list[dict[str, Any]]:
    """One event per node (or item) whose status or attempt changed, then the run's end if it ended."""
    events: list[dict[str, Any]] = []
    for node, new in after.nodes.items():
        old = before.nodes[node]
        if (old.status, old.attempts) != (new.status, new.attempts):
            events.append(_event(node, None, new.status, new.attempts, new.error, new.reason))
        for index, item in enumerate(new.items or ()):
            prior = (old.items or ())[index] if old.items is not None and index < len(old.items) else None
            if prior is None or (prior.status, prior.attempts) != (item.status, item.attempts):
                events.append(_event(node, index, item.status, item.attempts, item.error, ""))
    if status != RunStatus.RUNNING:
        events.append({"kind": "run", "status": status.value, "error": after.aborted.name if after.aborted else None})
    return events


def _event(
    node: str, item: int | None, status: NodeStatus, attempt: int, error: ErrorCode | None, reason: str
) -> dict[str, Any]:
    return {
        "kind": "node",
        "node": node,
        "item": item,
        "status": status.value,
        "attempt": attempt,
        "error": error.name if error is not None else None,
        "reason": reason,
    }
