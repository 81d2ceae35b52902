"""Properties of the workflow scheduler on random DAGs and random step outcomes (hypothesis): every run
ends, the caps hold at every moment, a node starts only after its inputs succeeded, and a finished node
never starts again."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentmesh.errors import ErrorCode
from agentmesh.workflow_config import ParallelNode, WorkflowsSettings
from dispatcher_svc.workflows import scheduler as sched
from dispatcher_svc.workflows.catalog import definition_from_data
from dispatcher_svc.workflows.state import TERMINAL, NodeStatus, RunState, RunStatus
from dispatcher_svc.workflows.validate import Names, Workflow, compile_workflow

NAMES = Names(frozenset({"bot"}), frozenset({"t"}))
OUTCOMES = [None, None, None, ErrorCode.UPSTREAM_TIMEOUT, ErrorCode.SCHEMA_INVALID, ErrorCode.DANGEROUS_OPERATION]


@st.composite
def workflows(draw: Any) -> Workflow:
    count = draw(st.integers(2, 8))
    nodes: list[dict[str, Any]] = []
    for index in range(count):
        after = sorted(draw(st.sets(st.sampled_from([f"n{i}" for i in range(index)]), max_size=2))) if index else []
        kind = (
            draw(st.sampled_from(["agent", "agent", "parallel", "join"]))
            if after
            else draw(st.sampled_from(["agent", "parallel"]))
        )
        node: dict[str, Any] = {"id": f"n{index}", "after": after, "retry": {"max_attempts": draw(st.integers(1, 3))}}
        if kind == "agent":
            node |= {"type": "agent", "agent": "bot", "goal": "g"}
        elif kind == "parallel":
            node |= {
                "type": "parallel",
                "over": "{{ input.xs }}",
                "max_concurrency": draw(st.integers(1, 3)),
                "do": {"type": "tool", "tool": "t"},
            }
        else:
            node |= {"type": "join", "mode": draw(st.sampled_from(["all", "any"]))}
        nodes.append(node)
    cap = draw(st.integers(1, 4))
    return compile_workflow(
        definition_from_data({"name": "p", "max_concurrency": cap, "nodes": nodes}), NAMES, WorkflowsSettings()
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workflows(), st.data())
def test_random_runs_end_within_their_caps_and_never_rerun_a_finished_node(
    workflow: Workflow, data: st.DataObject
) -> None:
    state = RunState.new(workflow.order)
    now = 0.0
    finished: set[tuple[str, int | None]] = set()
    for _ in range(500):
        if sched.outcome(workflow, state) != RunStatus.RUNNING:
            break
        planned = sched.plan(workflow, state, now)
        for start in planned.start:
            assert (start.node, start.item) not in finished
            if start.item is None and workflow.nodes[start.node].type not in ("join",):
                assert all(
                    sched.effective(workflow, state, d).status == NodeStatus.SUCCEEDED
                    for d in workflow.deps[start.node]
                )
        state = sched.apply(state, planned, now)
        # Instant nodes finish at once; a parallel node expands.
        for start in planned.start:
            spec = workflow.nodes[start.node]
            if spec.type == "join":
                state = sched.succeeded(state, start.node, {})
            elif isinstance(spec, ParallelNode) and start.item is None:
                state = sched.expanded(state, start.node, data.draw(st.integers(0, 4)))
        running = sched.running_steps(workflow, state)
        assert len(running) <= workflow.definition.max_concurrency
        for node, spec in workflow.nodes.items():
            if isinstance(spec, ParallelNode) and state[node].items is not None:
                assert sum(i.status == NodeStatus.RUNNING for i in state[node].items or ()) <= spec.max_concurrency
        # One running step ends, well or badly.
        if running:
            node, item = data.draw(st.sampled_from(running))
            code = data.draw(st.sampled_from(OUTCOMES))
            if code is None:
                state = sched.succeeded(state, node, "ok", item)
                finished.add((node, item))
                if state[node].status == NodeStatus.SUCCEEDED:
                    finished.add((node, None))
            else:
                state, decision = sched.failed(workflow, state, node, code, now, data.draw(st.floats(0, 0.99)), item)
                assert decision.action in ("retry", "fallback", "fail", "abort")
        now += 5.0  # past every backoff of the default policy's first retries
    status = sched.outcome(workflow, state)
    assert status != RunStatus.RUNNING, "the run must end"
    assert all(current.status in TERMINAL for current in state.nodes.values())
    if status == RunStatus.ABORTED:
        assert not sched.running_steps(workflow, state)
