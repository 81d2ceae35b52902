"""Workflow runs in Redis (issue 46, phase 2): fenced run state and the executor, with a fake step port
on the real test Redis. The executor starts agent and tool steps through the port only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import load_settings
from agentmesh.errors import ErrorCode, InvalidRequestError, NotFoundError
from agentmesh.store import Store
from agentmesh.workflow_config import WorkflowsSettings
from dispatcher_svc.workflows.catalog import definition_from_data, load_catalog
from dispatcher_svc.workflows.executor import Executor, StepRequest, StepResult
from dispatcher_svc.workflows.runs import RunExistsError, RunStore, StaleRunOwnerError
from dispatcher_svc.workflows.state import NodeStatus, RunState, RunStatus
from dispatcher_svc.workflows.validate import Names, Workflow, compile_workflow

LIMITS = WorkflowsSettings()
NAMES = Names(frozenset({"bot"}), frozenset({"logs", "metrics"}))


class FakePort:
    """Steps as a test drives them: started ids (a repeat start is counted, not run twice), results set by hand."""

    def __init__(self) -> None:
        self.started: dict[str, StepRequest] = {}
        self.start_calls: list[str] = []
        self.results: dict[str, StepResult] = {}
        self.cancelled: list[str] = []
        self.auto: dict[str, StepResult] = {}
        """node -> the result each of its steps gets as soon as it starts."""

    async def start(self, request: StepRequest) -> None:
        self.start_calls.append(request.step_id)
        self.started.setdefault(request.step_id, request)
        if request.node in self.auto:
            self.results.setdefault(request.step_id, self.auto[request.node])

    async def result(self, step_id: str) -> StepResult | None:
        return self.results.get(step_id)

    async def cancel(self, step_id: str) -> None:
        self.cancelled.append(step_id)

    def running(self) -> list[str]:
        return [s for s in self.started if s not in self.results and s not in self.cancelled]


def workflow(nodes: list[dict[str, Any]], **extra: Any) -> Workflow:
    data = {
        "name": "w",
        "defaults": {"retry": {"max_attempts": 2, "initial_backoff_s": 0, "jitter_s": 0}},
        "nodes": nodes,
    }
    return compile_workflow(definition_from_data({**data, **extra}), NAMES, LIMITS)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def executor(
    store: Store, port: FakePort, owner: str = "replica-a", clock: Clock | None = None, lease_ms: int = 30_000
) -> Executor:
    return Executor(
        RunStore(store, ttl_s=3600),
        port,
        owner=owner,
        limits=LIMITS,
        clock=clock or Clock(),
        draw=lambda: 0.0,
        lease_ms=lease_ms,
    )


async def test_a_run_goes_through_a_fan_out_a_condition_and_a_join(store: Store) -> None:
    flow = workflow(
        [
            {
                "id": "logs",
                "type": "parallel",
                "over": "{{ input.services }}",
                "max_concurrency": 2,
                "do": {"type": "tool", "tool": "logs", "arguments": {"service": "{{ item }}"}},
            },
            {
                "id": "hot",
                "type": "condition",
                "after": ["logs"],
                "when": "size(nodes.logs.output) == 3",
                "then": ["fix"],
                "else": ["report"],
            },
            {
                "id": "fix",
                "type": "agent",
                "agent": "bot",
                "goal": "fix {{ input.services[0] }} given {{ nodes.logs.output }}",
            },
            {"id": "report", "type": "agent", "agent": "bot", "goal": "report"},
            {"id": "end", "type": "join", "mode": "any", "after": ["fix", "report"]},
        ]
    )
    port = FakePort()
    ex = executor(store, port)
    await ex.start("run-1", flow, {"services": ["a", "b", "c"]})
    assert await ex.advance("run-1") == RunStatus.RUNNING
    assert sorted(port.started) == ["run-1.logs.0.1", "run-1.logs.1.1"]  # the cap: 2 of 3
    assert port.started["run-1.logs.1.1"].arguments == {"service": "b"}
    for sid in list(port.started):
        port.results[sid] = StepResult({"lines": sid})
    await ex.advance("run-1")
    assert "run-1.logs.2.1" in port.started
    port.results["run-1.logs.2.1"] = StepResult({"lines": "c"})
    await ex.advance("run-1")
    fix = port.started["run-1.fix.-.1"]
    assert fix.kind == "agent" and fix.target == "bot" and fix.goal.startswith("fix a given [")
    assert not any(s.startswith("run-1.report") for s in port.started)  # the branch not taken
    port.results["run-1.fix.-.1"] = StepResult({"done": True})
    assert await ex.advance("run-1") == RunStatus.SUCCEEDED
    record = await ex.runs.load("run-1")
    assert record.state["report"].status == NodeStatus.SKIPPED and record.state["end"].output == {"fix": {"done": True}}
    events = await ex.runs.events("run-1")
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))  # contiguous
    assert events[-1][1] == {"kind": "run", "status": "succeeded", "error": None}
    assert await ex.advance("run-1") is None  # finished: nothing to do
    later = await ex.runs.events("run-1", after=events[-3][0])
    assert later == events[-2:]


async def test_an_engineering_failure_retries_then_takes_its_fallback(store: Store) -> None:
    flow = workflow(
        [
            {"id": "metrics", "type": "tool", "tool": "metrics", "fallback": "guess"},
            {"id": "guess", "type": "agent", "agent": "bot", "goal": "estimate"},
            {
                "id": "diagnose",
                "type": "agent",
                "agent": "bot",
                "after": ["metrics"],
                "goal": "{{ nodes.metrics.output.p99 }}",
            },
        ]
    )
    port = FakePort()
    port.auto["metrics"] = StepResult(error=ErrorCode.UPSTREAM_UNAVAILABLE)
    port.auto["guess"] = StepResult({"p99": 950})
    port.auto["diagnose"] = StepResult("ok")
    ex = executor(store, port)
    await ex.start("run-2", flow, {})
    for _ in range(6):
        if await ex.advance("run-2") != RunStatus.RUNNING:
            break
    assert [s for s in port.start_calls if ".metrics." in s] == ["run-2.metrics.-.1", "run-2.metrics.-.2"]
    assert port.started["run-2.diagnose.-.1"].goal == "950"  # the fallback's output stands in
    record = await ex.runs.load("run-2")
    assert record.status == RunStatus.SUCCEEDED and record.state["metrics"].status == NodeStatus.FELL_BACK


async def test_fatal_in_one_branch_aborts_and_cancels_the_others(store: Store) -> None:
    flow = workflow(
        [
            {"id": "a", "type": "agent", "agent": "bot", "goal": "a"},
            {"id": "b", "type": "agent", "agent": "bot", "goal": "b"},
            {"id": "c", "type": "agent", "agent": "bot", "goal": "c", "after": ["a"]},
        ]
    )
    port = FakePort()
    ex = executor(store, port)
    await ex.start("run-3", flow, {})
    await ex.advance("run-3")
    port.results["run-3.a.-.1"] = StepResult(error=ErrorCode.DANGEROUS_OPERATION)
    assert await ex.advance("run-3") == RunStatus.ABORTED
    assert port.cancelled == ["run-3.b.-.1"]
    record = await ex.runs.load("run-3")
    assert record.state.aborted == ErrorCode.DANGEROUS_OPERATION and record.state["c"].status == NodeStatus.CANCELLED


async def test_a_replica_that_died_is_replaced_without_rerunning_finished_nodes(store: Store) -> None:
    flow = workflow(
        [
            {"id": "a", "type": "agent", "agent": "bot", "goal": "a"},
            {"id": "b", "type": "agent", "agent": "bot", "goal": "b", "after": ["a"]},
        ]
    )
    clock = Clock()
    port = FakePort()
    first = executor(store, port, "replica-a", clock, lease_ms=5000)
    await first.start("run-4", flow, {})
    await first.advance("run-4")
    port.results["run-4.a.-.1"] = StepResult("A")
    await first.advance("run-4")  # a finished, b started
    second = executor(store, port, "replica-b", clock, lease_ms=5000)
    assert await second.advance("run-4") is None  # the first one's lease is live
    # replica-a "dies"; its lease runs out (the Redis clock: wait past it)
    await store.redis.hset(second.runs.key("run-4"), "lease_until", "0")
    port.results["run-4.b.-.1"] = StepResult("B")
    assert await second.advance("run-4") == RunStatus.SUCCEEDED
    assert port.start_calls.count("run-4.a.-.1") == 1  # finished: never started again
    with pytest.raises(StaleRunOwnerError):  # the old owner wakes up: its write is refused
        record = await first.runs.load("run-4")
        await first.runs.commit("run-4", record.fence - 1, record.state, RunStatus.RUNNING, [])


async def test_a_crash_between_starting_a_step_and_writing_it_starts_the_same_step(store: Store) -> None:
    flow = workflow([{"id": "a", "type": "agent", "agent": "bot", "goal": "a"}])
    port = FakePort()
    ex = executor(store, port)
    await ex.start("run-5", flow, {})

    async def crash(*_: Any, **__: Any) -> int:
        raise RuntimeError("killed before the commit")

    original = ex.runs.commit
    ex.runs.commit = crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await ex.advance("run-5")
    ex.runs.commit = original  # type: ignore[method-assign]
    await ex.advance("run-5")
    assert port.start_calls == ["run-5.a.-.1", "run-5.a.-.1"] and len(port.started) == 1  # one task


async def test_timeouts_fail_a_step_with_deadline_exceeded(store: Store) -> None:
    flow = workflow(
        [{"id": "a", "type": "agent", "agent": "bot", "goal": "a", "timeout_s": 10, "retry": {"max_attempts": 1}}]
    )
    clock = Clock()
    port = FakePort()
    ex = executor(store, port, clock=clock)
    await ex.start("run-6", flow, {})
    await ex.advance("run-6")
    clock.now += 11
    assert await ex.advance("run-6") == RunStatus.FAILED
    assert port.cancelled == ["run-6.a.-.1"]
    assert (await ex.runs.load("run-6")).state["a"].error == ErrorCode.DEADLINE_EXCEEDED


async def test_runs_are_created_once_and_input_is_checked(store: Store) -> None:
    flow = workflow(
        [{"id": "a", "type": "agent", "agent": "bot", "goal": "{{ input.x }}"}],
        input_schema={"type": "object", "required": ["x"]},
    )
    ex = executor(store, FakePort())
    with pytest.raises(InvalidRequestError, match="'x' is a required property"):
        await ex.start("run-7", flow, {})
    await ex.start("run-7", flow, {"x": 1})
    with pytest.raises(RunExistsError):  # a schedule tick's run id starts one run only
        await ex.start("run-7", flow, {"x": 1})
    with pytest.raises(NotFoundError):
        await ex.advance("no-such-run")
    with pytest.raises(InvalidRequestError):
        ex.runs.key("bad {id}")


async def test_a_run_keeps_the_definition_it_started_with(store: Store) -> None:
    flow = workflow([{"id": "a", "type": "agent", "agent": "bot", "goal": "version one"}])
    port = FakePort()
    ex = executor(store, port)
    await ex.start("run-8", flow, {})
    record = await ex.runs.load("run-8")
    assert record.definition["nodes"][0]["goal"] == "version one"
    assert record.state == RunState.new(("a",))
    await ex.advance("run-8")
    assert port.started["run-8.a.-.1"].goal == "version one"


def example_catalog() -> dict[str, Workflow]:
    root = Path(__file__).resolve().parents[2]
    loaded = load_settings(
        [root / "agentmesh.yaml", root / "agentmesh.demo.yaml", root / "examples" / "workflows.agentmesh.yaml"]
    )
    folder = loaded.workflows.model_copy(update={"folder": root / "examples" / "workflows"})
    return load_catalog(loaded.model_copy(update={"workflows": folder}))


async def test_the_incident_example_fans_out_falls_back_and_waits_for_the_approval(store: Store) -> None:
    flow = example_catalog()["incident"]
    port = FakePort()
    port.auto["metrics"] = StepResult(error=ErrorCode.UPSTREAM_UNAVAILABLE)  # the metrics backend is down
    port.auto["metrics_from_logs"] = StepResult({"p99_ms": 2400})
    port.auto["diagnose"] = StepResult(
        {"root_cause": "connection pool exhausted", "restart": True, "service": "payment-svc"}
    )
    clock = Clock()
    ex = executor(store, port, clock=clock)
    await ex.start("inc-1", flow, {"services": ["payment-svc", "checkout-svc", "inventory-svc"], "alert": "p99 high"})
    remediate = "inc-1.remediate.-.1"
    for _ in range(30):
        await ex.advance("inc-1")
        for sid in port.running():
            if ".logs." in sid:
                port.results[sid] = StepResult({"errors": 3})
        clock.now += 40  # past the metrics retries' backoff
        if remediate in port.started:
            break
    assert [s for s in port.start_calls if ".metrics." in s] == [
        "inc-1.metrics.-.1",
        "inc-1.metrics.-.2",
        "inc-1.metrics.-.3",
    ]
    assert sorted(s for s in port.started if ".logs." in s) == [f"inc-1.logs.{i}.1" for i in range(3)]
    assert port.started["inc-1.diagnose.-.1"].goal.count("errors") == 3
    assert port.started[remediate].arguments == {"service": "payment-svc", "reason": "connection pool exhausted"}
    # The restart waits for a second operator's approval: the step has no result until then.
    assert await ex.advance("inc-1") == RunStatus.RUNNING
    port.results[remediate] = StepResult({"restarted": True})
    assert await ex.advance("inc-1") == RunStatus.SUCCEEDED


async def test_the_support_example_takes_the_branch_its_condition_picks(store: Store) -> None:
    flow = example_catalog()["support"]
    for run_id, total, taken, skipped in [("sup-1", 950, "escalate", "reply"), ("sup-2", 20, "reply", "escalate")]:
        port = FakePort()
        port.auto["intent"] = StepResult({"intent": "refund", "order_id": "A-1234"})
        port.auto["lookup"] = StepResult({"total": total, "status": "delivered"})
        port.auto["reply"] = port.auto["escalate"] = StepResult("written")
        ex = executor(store, port)
        await ex.start(run_id, flow, {"message": "I want my money back", "customer": "Ada"})
        statuses = [await ex.advance(run_id) for _ in range(6)]
        assert RunStatus.SUCCEEDED in statuses
        assert port.started[f"{run_id}.lookup.-.1"].arguments == {"order_id": "A-1234"}
        assert f"{run_id}.{taken}.-.1" in port.started and not any(f".{skipped}." in s for s in port.started)
