"""The pure workflow scheduler (issue 46): readiness and caps, failure by error class (retry with
backoff, fallback, fail, abort), timeouts, branches, joins and the run's outcome. No Redis, no grpc."""

from __future__ import annotations

from typing import Any

from agentmesh.errors import ErrorCode
from agentmesh.workflow_config import WorkflowsSettings
from dispatcher_svc.workflows.catalog import definition_from_data
from dispatcher_svc.workflows.scheduler import (
    Start,
    abort,
    apply,
    expanded,
    failed,
    outcome,
    plan,
    scope,
    started,
    succeeded,
    timed_out,
)
from dispatcher_svc.workflows.state import NodeStatus, RunState, RunStatus
from dispatcher_svc.workflows.validate import Names, Workflow, compile_workflow

NAMES = Names(frozenset({"bot"}), frozenset({"t"}))
RETRY = {"max_attempts": 3, "initial_backoff_s": 1.0, "max_backoff_s": 10.0, "multiplier": 2.0, "jitter_s": 0.5}


def flow(nodes: list[dict[str, Any]], **extra: Any) -> Workflow:
    data = {"name": "w", "defaults": {"retry": RETRY, "timeout_s": 60}, "nodes": nodes, **extra}
    return compile_workflow(definition_from_data(data), NAMES, WorkflowsSettings())


def agent(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "agent", "agent": "bot", "goal": "g", **extra}


def step(workflow: Workflow, state: RunState, now: float = 0.0) -> tuple[RunState, list[Start]]:
    planned = plan(workflow, state, now)
    return apply(state, planned, now), list(planned.start)


def test_a_fan_out_of_8_with_a_cap_of_3_never_runs_more_than_3() -> None:
    workflow = flow(
        [
            {
                "id": "p",
                "type": "parallel",
                "over": "{{ input.xs }}",
                "max_concurrency": 3,
                "do": {"type": "tool", "tool": "t"},
            }
        ]
    )
    state, starts = step(workflow, RunState.new(workflow.order))
    assert starts == [Start("p", None, 1)]
    state = expanded(state, "p", 8)
    peak, finished = 0, 0
    while outcome(workflow, state) == RunStatus.RUNNING:
        state, starts = step(workflow, state)
        running = [i for i, item in enumerate(state["p"].items or ()) if item.status == NodeStatus.RUNNING]
        peak = max(peak, len(running))
        assert len(running) <= 3
        state = succeeded(state, "p", f"out{running[0]}", item=running[0])  # one finishes per round
        finished += 1
    assert peak == 3 and finished == 8
    assert state["p"].output == [f"out{i}" for i in range(8)]
    assert outcome(workflow, state) == RunStatus.SUCCEEDED


def test_the_workflow_cap_bounds_steps_across_nodes() -> None:
    workflow = flow([agent("a"), agent("b"), agent("c")], max_concurrency=2)
    state, starts = step(workflow, RunState.new(workflow.order))
    assert [s.node for s in starts] == ["a", "b"]
    assert plan(workflow, state, 0).start == ()
    state = succeeded(state, "a", 1)
    assert [s.node for s in plan(workflow, state, 0).start] == ["c"]


def test_an_engineering_failure_retries_with_backoff_then_takes_its_fallback() -> None:
    workflow = flow([agent("a", fallback="f"), agent("f"), agent("b", after=["a"], goal="{{ nodes.a.output }}")])
    state, starts = step(workflow, RunState.new(workflow.order))
    assert starts == [Start("a", None, 1)]
    state, decision = failed(workflow, state, "a", ErrorCode.UPSTREAM_TIMEOUT, now=100.0, draw=0.5)
    assert decision.action == "retry" and decision.delay_s == 1.0 + 0.25  # initial + jitter * draw
    assert state["a"].status == NodeStatus.PENDING and state["a"].not_before == 101.25
    early = plan(workflow, state, 101.0)
    assert early.start == () and early.wake_at == 101.25
    state, starts = step(workflow, state, 101.25)
    assert starts == [Start("a", None, 2)]
    state, decision = failed(workflow, state, "a", ErrorCode.UPSTREAM_UNAVAILABLE, now=102.0, draw=0.0)
    assert decision.action == "retry" and decision.delay_s == 2.0  # doubled
    state, starts = step(workflow, state, 104.0)
    state, decision = failed(workflow, state, "a", ErrorCode.INTERNAL, now=105.0, draw=0.0)
    assert decision.action == "fallback" and state["a"].status == NodeStatus.FELL_BACK
    state, starts = step(workflow, state, 105.0)
    assert starts == [Start("f", None, 1)]  # b waits for the fallback
    state = succeeded(state, "f", {"from": "fallback"})
    assert scope(workflow, state, {})["nodes"]["a"] == {"from": "fallback"}
    state, starts = step(workflow, state, 106.0)
    assert starts == [Start("b", None, 1)]
    state = succeeded(state, "b", "done")
    assert outcome(workflow, state) == RunStatus.SUCCEEDED


def test_an_exhausted_contract_error_is_handled_as_engineering() -> None:
    workflow = flow([agent("a", retry={"max_attempts": 2, "initial_backoff_s": 0, "jitter_s": 0})])
    state, _ = step(workflow, RunState.new(workflow.order))
    state, decision = failed(workflow, state, "a", ErrorCode.SCHEMA_INVALID, now=0, draw=0)
    assert decision.action == "retry"
    state, _ = step(workflow, state)
    state, decision = failed(workflow, state, "a", ErrorCode.SCHEMA_INVALID, now=0, draw=0)
    assert decision.action == "fail" and state["a"].status == NodeStatus.FAILED
    assert outcome(workflow, state) == RunStatus.FAILED


def test_a_failure_without_fallback_fails_the_node_and_skips_what_follows() -> None:
    workflow = flow([agent("a", retry={"max_attempts": 1}), agent("b", after=["a"]), agent("c")])
    state, _ = step(workflow, RunState.new(workflow.order))
    state, decision = failed(workflow, state, "a", ErrorCode.UPSTREAM_REJECTED, now=0, draw=0)
    assert decision.action == "fail"
    planned = plan(workflow, state, 0)
    assert planned.skip == {"b": "upstream failed"}
    state = apply(state, planned, 0)
    assert outcome(workflow, state) == RunStatus.RUNNING  # c still runs: only FATAL stops siblings
    state = succeeded(state, "c", 1)
    assert outcome(workflow, state) == RunStatus.FAILED


def test_fatal_in_one_branch_aborts_the_run_and_cancels_the_siblings() -> None:
    workflow = flow(
        [
            agent("a"),
            agent("b"),
            agent("c", after=["a"]),
            {"id": "p", "type": "parallel", "over": "{{ input.xs }}", "do": {"type": "tool", "tool": "t"}},
        ]
    )
    state, _ = step(workflow, RunState.new(workflow.order))
    state = expanded(state, "p", 2)
    state, _ = step(workflow, state)
    state, decision = failed(workflow, state, "a", ErrorCode.DANGEROUS_OPERATION, now=0, draw=0)
    assert decision.action == "abort"
    assert set(decision.cancel) == {("b", None), ("p", 0), ("p", 1)}  # steps: the parallel node has no task
    assert state.aborted == ErrorCode.DANGEROUS_OPERATION
    assert state["a"].status == NodeStatus.FAILED
    assert {state[n].status for n in ("b", "c", "p")} == {NodeStatus.CANCELLED}
    assert {item.status for item in state["p"].items or ()} == {NodeStatus.CANCELLED}
    assert plan(workflow, state, 0).start == ()
    assert outcome(workflow, state) == RunStatus.ABORTED


def test_a_fatal_item_aborts_too() -> None:
    workflow = flow([{"id": "p", "type": "parallel", "over": "{{ input.xs }}", "do": {"type": "tool", "tool": "t"}}])
    state, _ = step(workflow, RunState.new(workflow.order))
    state, _ = step(workflow, expanded(state, "p", 2))
    state, decision = failed(workflow, state, "p", ErrorCode.BUDGET_EXHAUSTED, now=0, draw=0, item=0)
    assert decision.action == "abort" and decision.cancel == (("p", 1),)


def test_a_condition_picks_its_branch_and_a_join_any_goes_on() -> None:
    workflow = flow(
        [
            {"id": "c", "type": "condition", "when": "input.big", "then": ["yes"], "else": ["no"]},
            agent("yes"),
            agent("no"),
            agent("after_no", after=["no"]),
            {"id": "j", "type": "join", "mode": "any", "after": ["yes", "no"]},
        ]
    )
    state, starts = step(workflow, RunState.new(workflow.order))
    assert starts == [Start("c", None, 1)]
    value = workflow.conditions["c"].evaluate(scope(workflow, state, {"big": True}), 10**6)
    state = succeeded(state, "c", {"value": value})
    planned = plan(workflow, state, 0)
    assert [s.node for s in planned.start] == ["yes"]
    assert planned.skip == {"no": "branch not taken", "after_no": "upstream skipped"}
    state = succeeded(apply(state, planned, 0), "yes", "y")
    state, starts = step(workflow, state)
    assert starts == [Start("j", None, 1)]
    state = succeeded(state, "j", {"yes": "y"})
    assert outcome(workflow, state) == RunStatus.SUCCEEDED


def test_joins_all_any_and_n() -> None:
    nodes = [agent("a", retry={"max_attempts": 1}), agent("b"), agent("c")]
    for mode, extra, fail_a, expect in [
        ("all", {}, False, "wait-then-ready"),
        ("all", {}, True, "upstream failed"),
        ("n", {"n": 2}, False, "ready-after-two"),
        ("n", {"n": 3}, True, "upstream failed"),
        ("any", {}, True, "tolerated"),
    ]:
        workflow = flow([*nodes, {"id": "j", "type": "join", "mode": mode, "after": ["a", "b", "c"], **extra}])
        state, _ = step(workflow, RunState.new(workflow.order))
        if fail_a:
            state, _ = failed(workflow, state, "a", ErrorCode.INTERNAL, now=0, draw=0)
        else:
            state = succeeded(state, "a", 1)
        state = succeeded(state, "b", 2)
        planned = plan(workflow, state, 0)
        if expect == "wait-then-ready":
            assert planned.start == () and planned.skip == {}
            assert [s.node for s in plan(workflow, succeeded(state, "c", 3), 0).start] == ["j"]
        elif expect == "upstream failed":
            assert planned.skip == {"j": "upstream failed"}, mode
        elif expect == "ready-after-two":
            assert [s.node for s in planned.start] == ["j"]
        else:
            assert [s.node for s in planned.start] == ["j"]
            state = succeeded(succeeded(apply(state, planned, 0), "j", {"b": 2}), "c", 3)
            assert outcome(workflow, state) == RunStatus.SUCCEEDED  # a's failure was absorbed by the join


def test_a_join_whose_inputs_were_all_skipped_is_skipped() -> None:
    workflow = flow(
        [
            {"id": "c", "type": "condition", "when": "false", "then": ["x"]},
            agent("x"),
            {"id": "j", "type": "join", "after": ["x"]},
        ]
    )
    state, _ = step(workflow, RunState.new(workflow.order))
    state = succeeded(state, "c", {"value": False})
    assert plan(workflow, state, 0).skip == {"x": "branch not taken", "j": "upstream skipped"}


def test_an_unused_fallback_is_skipped() -> None:
    workflow = flow([agent("a", fallback="f"), agent("f")])
    state, starts = step(workflow, RunState.new(workflow.order))
    assert starts == [Start("a", None, 1)]
    state = succeeded(state, "a", 1)
    planned = plan(workflow, state, 0)
    assert planned.skip == {"f": "fallback unused"}
    assert outcome(workflow, apply(state, planned, 0)) == RunStatus.SUCCEEDED


def test_a_failed_fallback_fails_the_run() -> None:
    workflow = flow([agent("a", fallback="f", retry={"max_attempts": 1}), agent("f", retry={"max_attempts": 1})])
    state, _ = step(workflow, RunState.new(workflow.order))
    state, decision = failed(workflow, state, "a", ErrorCode.INTERNAL, now=0, draw=0)
    assert decision.action == "fallback"
    state, _ = step(workflow, state)
    state, decision = failed(workflow, state, "f", ErrorCode.INTERNAL, now=0, draw=0)
    assert decision.action == "fail" and outcome(workflow, state) == RunStatus.FAILED


def test_an_item_out_of_retries_fails_its_parallel_node_and_stops_its_other_items() -> None:
    workflow = flow(
        [
            {
                "id": "p",
                "type": "parallel",
                "over": "{{ input.xs }}",
                "fallback": "f",
                "retry": {"max_attempts": 1},
                "do": {"type": "tool", "tool": "t"},
            },
            agent("f"),
        ]
    )
    state, _ = step(workflow, RunState.new(workflow.order))
    state, _ = step(workflow, expanded(state, "p", 3))
    state, decision = failed(workflow, state, "p", ErrorCode.UPSTREAM_TIMEOUT, now=0, draw=0, item=1)
    assert decision.action == "fallback" and decision.cancel == (("p", 0), ("p", 2))
    assert [item.status for item in state["p"].items or ()] == [
        NodeStatus.CANCELLED,
        NodeStatus.FAILED,
        NodeStatus.CANCELLED,
    ]
    assert [s.node for s in plan(workflow, state, 0).start] == ["f"]


def test_an_item_retries_on_its_own() -> None:
    workflow = flow([{"id": "p", "type": "parallel", "over": "{{ input.xs }}", "do": {"type": "tool", "tool": "t"}}])
    state, _ = step(workflow, RunState.new(workflow.order))
    state, _ = step(workflow, expanded(state, "p", 2))
    state, decision = failed(workflow, state, "p", ErrorCode.RATE_LIMITED, now=10, draw=0, item=0)
    assert decision.action == "retry" and (state["p"].items or ())[0].not_before == 11.0
    assert plan(workflow, state, 10.5).wake_at == 11.0
    assert plan(workflow, state, 11.0).start == (Start("p", 0, 2),)


def test_an_empty_fan_out_succeeds_with_an_empty_list() -> None:
    workflow = flow([{"id": "p", "type": "parallel", "over": "{{ input.xs }}", "do": {"type": "tool", "tool": "t"}}])
    state, _ = step(workflow, RunState.new(workflow.order))
    state = expanded(state, "p", 0)
    assert state["p"].status == NodeStatus.SUCCEEDED and state["p"].output == []


def test_timeouts_are_per_node_with_the_workflow_default() -> None:
    workflow = flow(
        [
            agent("a", timeout_s=5),
            agent("b"),
            {
                "id": "p",
                "type": "parallel",
                "over": "{{ input.xs }}",
                "timeout_s": 7,
                "do": {"type": "tool", "tool": "t"},
            },
        ]
    )
    state, _ = step(workflow, RunState.new(workflow.order), now=0)
    state, _ = step(workflow, expanded(state, "p", 1), now=1)
    assert timed_out(workflow, state, 4.9) == []
    assert timed_out(workflow, state, 5.0) == [("a", None)]
    assert timed_out(workflow, state, 8.0) == [("a", None), ("p", 0)]
    assert timed_out(workflow, state, 60.0) == [("a", None), ("b", None), ("p", 0)]
    state, decision = failed(workflow, state, "a", ErrorCode.DEADLINE_EXCEEDED, now=5, draw=0)
    assert decision.action == "retry"


def test_cancelling_a_run_is_an_abort() -> None:
    workflow = flow([agent("a"), agent("b", after=["a"])])
    state, _ = step(workflow, RunState.new(workflow.order))
    state, cancel = abort(state, ErrorCode.CANCELLED, "cancelled by an operator")
    assert cancel == (("a", None),) and state["b"].reason == "cancelled by an operator"
    assert outcome(workflow, state) == RunStatus.ABORTED


def test_started_counts_attempts() -> None:
    workflow = flow([agent("a")])
    state = started(RunState.new(workflow.order), Start("a", None, 1), now=3.0)
    assert (state["a"].status, state["a"].attempts, state["a"].started_at) == (NodeStatus.RUNNING, 1, 3.0)
