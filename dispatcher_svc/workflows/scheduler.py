"""The decisions of a workflow run, as pure functions of (workflow, state, now): no clock, no
randomness of its own (the caller passes `draw` for the jitter), no I/O.

- `plan`: which nodes (and parallel items) start now, which are skipped, when to look again. A node
  waits for its inputs; a branch not taken, a failed or skipped input skips it (a join counts only the
  inputs it needs: all | any | n). Agent and tool steps start while fewer than the workflow's
  `max_concurrency` run, and a parallel node's items while fewer than its own cap run.
- `failed`: what an attempt's failure leads to, by error class. ENGINEERING (and CONTRACT, which
  reaches a workflow only once the task's own retries are exhausted): retry up to the node's
  `retry.max_attempts` with exponential backoff and jitter (agentmesh/backoff.py), then its fallback
  node, else the node fails. FATAL: the whole run is aborted at once, every running node cancelled.
- `timed_out`: running steps past their timeout (they fail with DEADLINE_EXCEEDED, an ENGINEERING error).
- `outcome`: the run's status once nothing can move.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from agentmesh.backoff import Backoff
from agentmesh.errors import ErrorClass, ErrorCode, error_class
from agentmesh.workflow_config import AgentStep, JoinNode, ParallelNode, ToolStep
from dispatcher_svc.workflows.state import TERMINAL, ItemState, NodeState, NodeStatus, RunState, RunStatus
from dispatcher_svc.workflows.validate import Workflow

__all__ = [
    "Decision",
    "Plan",
    "Start",
    "abort",
    "apply",
    "effective",
    "expanded",
    "failed",
    "outcome",
    "plan",
    "running_steps",
    "scope",
    "started",
    "succeeded",
    "timed_out",
]

_FAILED = frozenset({NodeStatus.FAILED, NodeStatus.CANCELLED})


@dataclass(frozen=True)
class Start:
    """Start `node` (its `item` for a parallel node's step), attempt number `attempt`."""

    node: str
    item: int | None
    attempt: int


@dataclass(frozen=True)
class Plan:
    start: tuple[Start, ...] = ()
    skip: Mapping[str, str] = field(default_factory=dict)
    """Node -> why it will not run."""
    wake_at: float | None = None
    """The earliest retry still waiting for its time, to plan again then."""


@dataclass(frozen=True)
class Decision:
    """What a failed attempt leads to; `cancel` lists the running steps to stop (node, item)."""

    action: Literal["retry", "fallback", "fail", "abort"]
    delay_s: float = 0.0
    cancel: Steps = ()


def _is_step(workflow: Workflow, node: str) -> bool:
    return isinstance(workflow.nodes[node], AgentStep | ToolStep)


def effective(workflow: Workflow, state: RunState, node: str) -> NodeState:
    """What `node` means to the nodes after it: when it fell back, its fallback's state."""
    current = state[node]
    seen = {node}
    while current.status == NodeStatus.FELL_BACK:
        node = workflow.nodes[node].fallback
        if node in seen:  # validated acyclic; guards a corrupt state
            break
        seen.add(node)
        current = state[node]
    return current


def _readiness(workflow: Workflow, state: RunState, node: str) -> str:
    """ "ready", "wait", or the reason to skip the node."""
    protected = workflow.fallback_of.get(node)
    if protected is not None:
        status = state[protected].status
        if status == NodeStatus.FELL_BACK:
            pass
        elif status in TERMINAL:
            return "fallback unused"
        else:
            return "wait"
    for condition, value in workflow.branches.get(node, ()):
        cond = state[condition]
        taken = isinstance(cond.output, Mapping) and cond.output.get("value") is value
        if cond.status == NodeStatus.SUCCEEDED and not taken:
            return "branch not taken"
    deps = [d for d in workflow.deps[node] if d != protected]
    statuses = [effective(workflow, state, d).status for d in deps]
    spec = workflow.nodes[node]
    if isinstance(spec, JoinNode):
        active = [s for s in statuses if s != NodeStatus.SKIPPED]
        pending = sum(s not in TERMINAL for s in active)
        done = sum(s == NodeStatus.SUCCEEDED for s in active)
        if not active:
            return "upstream skipped"
        need = len(active) if spec.mode == "all" else 1 if spec.mode == "any" else spec.n or 1
        if done >= need and (spec.mode != "all" or pending == 0):
            return "ready"
        if done + pending < need:
            return "upstream failed"
        return "wait"
    if any(s in _FAILED for s in statuses):
        return "upstream failed"
    if any(s == NodeStatus.SKIPPED for s in statuses):
        return "upstream skipped"
    return "ready" if all(s == NodeStatus.SUCCEEDED for s in statuses) else "wait"


def _running_steps(workflow: Workflow, state: RunState) -> int:
    count = 0
    for node, current in state.nodes.items():
        if current.items is not None:
            count += sum(item.status == NodeStatus.RUNNING for item in current.items)
        elif current.status == NodeStatus.RUNNING and _is_step(workflow, node):
            count += 1
    return count


def plan(workflow: Workflow, state: RunState, now: float) -> Plan:
    """What to do now: the steps to start (within the caps), the nodes to skip, when to look again."""
    if state.aborted is not None:
        return Plan()
    budget = workflow.definition.max_concurrency - _running_steps(workflow, state)
    starts: list[Start] = []
    skips: dict[str, str] = {}
    wake: list[float] = []
    view = state
    for node in workflow.order:
        current = view[node]
        spec = workflow.nodes[node]
        if current.status == NodeStatus.PENDING:
            verdict = _readiness(workflow, view, node)
            if verdict == "wait":
                continue
            if verdict != "ready":
                skips[node] = verdict
                view = view.with_node(node, status=NodeStatus.SKIPPED, reason=verdict)
                continue
            if current.not_before > now:
                wake.append(current.not_before)
            elif not _is_step(workflow, node):
                starts.append(Start(node, None, current.attempts + 1))  # condition, join, parallel: no task
            elif budget > 0:
                starts.append(Start(node, None, current.attempts + 1))
                budget -= 1
        elif current.status == NodeStatus.RUNNING and current.items is not None and isinstance(spec, ParallelNode):
            free = spec.max_concurrency - sum(item.status == NodeStatus.RUNNING for item in current.items)
            for index, item in enumerate(current.items):
                if item.status != NodeStatus.PENDING:
                    continue
                if item.not_before > now:
                    wake.append(item.not_before)
                elif free > 0 and budget > 0:
                    starts.append(Start(node, index, item.attempts + 1))
                    free -= 1
                    budget -= 1
    return Plan(tuple(starts), skips, min(wake) if wake else None)


def started(state: RunState, start: Start, now: float) -> RunState:
    """The step (or instant node) of `start` is running from `now`."""
    if start.item is None:
        return state.with_node(start.node, status=NodeStatus.RUNNING, attempts=start.attempt, started_at=now)
    return state.with_item(start.node, start.item, status=NodeStatus.RUNNING, attempts=start.attempt, started_at=now)


def apply(state: RunState, planned: Plan, now: float) -> RunState:
    """`planned`'s skips and starts written into the state."""
    for node, reason in planned.skip.items():
        state = state.with_node(node, status=NodeStatus.SKIPPED, reason=reason)
    for start in planned.start:
        state = started(state, start, now)
    return state


def expanded(state: RunState, node: str, count: int) -> RunState:
    """A started parallel node has `count` items to run (its `over` list); none: it succeeded with []."""
    if count == 0:
        return state.with_node(node, status=NodeStatus.SUCCEEDED, output=[], items=())
    return state.with_node(node, items=tuple(ItemState() for _ in range(count)))


def succeeded(state: RunState, node: str, output: Any, item: int | None = None) -> RunState:
    """A node (or a parallel item) succeeded; the parallel node succeeds with its last item."""
    if item is None:
        return state.with_node(node, status=NodeStatus.SUCCEEDED, output=output, error=None)
    state = state.with_item(node, item, status=NodeStatus.SUCCEEDED, output=output, error=None)
    items = state[node].items or ()
    if all(one.status == NodeStatus.SUCCEEDED for one in items):
        state = state.with_node(node, status=NodeStatus.SUCCEEDED, output=[one.output for one in items])
    return state


def _running(state: RunState) -> list[tuple[str, int | None]]:
    found: list[tuple[str, int | None]] = []
    for node, current in state.nodes.items():
        if current.items is not None:
            found += [(node, i) for i, item in enumerate(current.items) if item.status == NodeStatus.RUNNING]
        elif current.status == NodeStatus.RUNNING:
            found.append((node, None))
    return found


Steps = tuple[tuple[str, int | None], ...]
"""Running steps: (node, item), item None for a node that is not parallel."""


def running_steps(workflow: Workflow, state: RunState) -> list[tuple[str, int | None]]:
    """The agent and tool steps (and parallel items) running now: what has a task or call to look at."""
    return [(node, item) for node, item in _running(state) if item is not None or _is_step(workflow, node)]


def abort(state: RunState, code: ErrorCode, reason: str = "aborted") -> tuple[RunState, Steps]:
    """The run ends now: every unfinished node (and item) is cancelled; returns what was running."""
    cancel = tuple(_running(state))
    nodes = dict(state.nodes)
    for node, current in nodes.items():
        if current.status not in TERMINAL:
            items = current.items
            if items is not None:
                items = tuple(
                    one if one.status in TERMINAL else replace(one, status=NodeStatus.CANCELLED) for one in items
                )
            nodes[node] = replace(current, status=NodeStatus.CANCELLED, not_before=0.0, items=items, reason=reason)
    return RunState(nodes, aborted=code), cancel


def failed(
    workflow: Workflow, state: RunState, node: str, code: ErrorCode, now: float, draw: float, item: int | None = None
) -> tuple[RunState, Decision]:
    """What the failure of `node`'s attempt (or its `item`'s) with `code` leads to, and the new state."""
    if error_class(code) == ErrorClass.FATAL:
        marked = state.with_node(node, error=code) if item is None else state.with_item(node, item, error=code)
        if item is None:
            marked = marked.with_node(node, status=NodeStatus.FAILED)
        new, running = abort(marked, code, reason=f"{node} failed with {code.name}")
        return new, Decision("abort", cancel=tuple(c for c in running if c != (node, item)))
    # ENGINEERING, and CONTRACT: a task retries contract errors itself; one that reaches here is exhausted.
    policy = workflow.retry(node)
    attempts = state[node].attempts if item is None else (state[node].items or ())[item].attempts
    if attempts < policy.max_attempts:
        backoff = Backoff(policy.initial_backoff_s, policy.max_backoff_s, policy.multiplier, policy.jitter_s)
        delay = backoff.delay(attempts, draw)
        changes = {"status": NodeStatus.PENDING, "error": code, "not_before": now + delay, "started_at": None}
        new = state.with_node(node, **changes) if item is None else state.with_item(node, item, **changes)
        return new, Decision("retry", delay_s=delay)
    cancel: Steps = ()
    if item is not None:
        # One item out of retries fails its parallel node; the node's other running items stop.
        state = state.with_item(node, item, status=NodeStatus.FAILED, error=code)
        cancel = tuple((node, i) for i, one in enumerate(state[node].items or ()) if one.status == NodeStatus.RUNNING)
        for _, index in cancel:
            state = state.with_item(node, index or 0, status=NodeStatus.CANCELLED)
    if workflow.nodes[node].fallback:
        return state.with_node(node, status=NodeStatus.FELL_BACK, error=code), Decision("fallback", cancel=cancel)
    return state.with_node(node, status=NodeStatus.FAILED, error=code), Decision("fail", cancel=cancel)


def timed_out(workflow: Workflow, state: RunState, now: float) -> list[tuple[str, int | None]]:
    """Running steps whose attempt has outlived the node's timeout (to cancel and fail with DEADLINE_EXCEEDED)."""
    late: list[tuple[str, int | None]] = []
    for node, index in _running(state):
        current = state[node]
        started_at = current.started_at if index is None else (current.items or ())[index].started_at
        if index is None and current.items is not None:
            continue
        if started_at is not None and now - started_at >= workflow.timeout_s(node):
            late.append((node, index))
    return late


def _tolerated(workflow: Workflow, state: RunState, node: str) -> bool:
    """A failure the run survives: every node after it is a join that succeeded without it."""
    origin = node
    while origin in workflow.fallback_of:
        origin = workflow.fallback_of[origin]
    after = workflow.dependents[origin]
    if origin != node:
        after = tuple(a for a in after if a != node)
    return bool(after) and all(
        isinstance(workflow.nodes[a], JoinNode) and state[a].status == NodeStatus.SUCCEEDED for a in after
    )


def outcome(workflow: Workflow, state: RunState) -> RunStatus:
    """RUNNING while a node can still move; then SUCCEEDED, or FAILED if a failure was not tolerated."""
    if state.aborted is not None:
        return RunStatus.ABORTED
    if any(current.status not in TERMINAL for current in state.nodes.values()):
        return RunStatus.RUNNING
    failures = [node for node, current in state.nodes.items() if current.status == NodeStatus.FAILED]
    return RunStatus.FAILED if any(not _tolerated(workflow, state, node) for node in failures) else RunStatus.SUCCEEDED


def scope(workflow: Workflow, state: RunState, run_input: Any) -> dict[str, Any]:
    """What templates and conditions see: the run's input and the output of every node that has one
    (a node that fell back shows its fallback's)."""
    nodes: dict[str, Any] = {}
    for node in workflow.order:
        current = effective(workflow, state, node)
        if current.status == NodeStatus.SUCCEEDED:
            nodes[node] = current.output
    return {"input": run_input, "nodes": nodes}
