"""WorkflowService through real gRPC, served by a real dispatcher over fake tool/context/provider services
(issue 46): the support example runs to its end as tasks and a governed tool call, a FATAL node aborts the
run, a cancel stops it and its task, bad requests get their typed errors, and a watch resumes without gaps."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc, workflow_pb2, workflow_pb2_grpc
from dispatcher_svc.workflows.wakes import Wakes
from tests.contract.dispatcher.conftest import MakeMesh, Mesh, answer, tool_call

W = workflow_pb2
REPO = Path(__file__).resolve().parents[3]
SUPPORT = yaml.safe_load((REPO / "examples" / "workflows" / "support.yaml").read_text(encoding="utf-8"))

FLOWS: list[dict[str, Any]] = [
    SUPPORT,
    {
        "name": "fatal",
        "nodes": [
            {"id": "check", "type": "tool", "tool": "boom", "arguments": {"x": "{{ input.x }}"}},
            {"id": "after_check", "type": "agent", "agent": "ops", "goal": "never", "after": ["check"]},
        ],
    },
    {
        "name": "waits",
        "nodes": [{"id": "deploy", "type": "agent", "agent": "deployer", "goal": "deploy {{ input.service }}"}],
    },
]


def _agent(agent_id: str, prompt: str) -> dict[str, Any]:
    return {"id": agent_id, "model": "fake/m", "system_prompt": prompt, "permissions": ["dev:test:read"]}


CONFIG = {
    "agents": [
        _agent("ops", "be careful"),
        _agent("support_triage", "triage"),
        _agent("support_reply", "reply"),
        _agent("support_escalate", "escalate"),
        _agent("deployer", "deployer"),
    ],
    "tools": {
        "registry": [
            {"name": "lookup_order", "executor": "builtin", "builtin": "calculator"},
            {"name": "boom", "executor": "builtin", "builtin": "calculator"},
        ]
    },
    "workflows": {"definitions": FLOWS, "poll_interval_s": 0.1, "lease_s": 2},
}


def policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    system = messages[0].content if messages else ""
    if system == "triage":
        return answer(json.dumps({"intent": "refund", "order_id": "A-1001"}))
    if system == "escalate":
        return answer("hand-over: refund of A-1001")
    if system == "reply":
        return answer("your order is on its way")
    if system == "deployer":
        return tool_call("deploy", {"service": "api"}, "c1")  # needs approval: the task parks
    return answer("done")


def handlers() -> dict[str, Any]:
    return {
        "lookup_order": lambda a: json.dumps({"order_id": a["order_id"], "total": 350, "status": "shipped"}),
        "boom": lambda a: AgentmeshError(ErrorCode.DANGEROUS_OPERATION, "refused: dangerous"),
        "deploy": lambda a: "deployed",
    }


async def mesh_of(make_mesh: MakeMesh) -> Mesh:
    return await make_mesh(policy, handlers(), needs_approval={"deploy"}, config=CONFIG)


def stub(mesh: Mesh) -> workflow_pb2_grpc.WorkflowServiceStub:
    return workflow_pb2_grpc.WorkflowServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]


async def watch(mesh: Mesh, run_id: str, after: int = 0) -> list[W.WorkflowEvent]:
    call = stub(mesh).WatchWorkflowRun(
        W.WatchWorkflowRunRequest(run_id=run_id, after_sequence=after), metadata=mesh.md(), timeout=30
    )
    return [r.event async for r in call]


def nodes(run: W.WorkflowRun) -> dict[str, W.WorkflowNode]:
    return {n.node_id: n for n in run.nodes}


async def test_the_support_example_runs_to_its_end_through_start_and_watch(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    started = await stub(mesh).StartWorkflowRun(
        W.StartWorkflowRunRequest(
            workflow="support", input_json=json.dumps({"message": "refund please", "customer": "Ann"}), run_id="s-1"
        ),
        metadata=mesh.md(subject="alice"),
    )
    assert started.run.run_id == "s-1" and started.run.created_by == "alice"
    events = await watch(mesh, "s-1")
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].kind == W.WORKFLOW_EVENT_KIND_RUN
    assert events[-1].run_status == W.WORKFLOW_RUN_STATUS_SUCCEEDED
    run = (await stub(mesh).GetWorkflowRun(W.GetWorkflowRunRequest(run_id="s-1"), metadata=mesh.md())).run
    got = nodes(run)
    assert run.status == W.WORKFLOW_RUN_STATUS_SUCCEEDED
    assert json.loads(got["intent"].output_json) == {"intent": "refund", "order_id": "A-1001"}
    assert json.loads(got["lookup"].output_json)["total"] == 350
    assert got["escalate"].status == W.WORKFLOW_NODE_STATUS_SUCCEEDED
    assert got["reply"].status == W.WORKFLOW_NODE_STATUS_SKIPPED
    # The agent nodes are ordinary tasks, created by the run's starter; the tool node one governed call.
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]
    task = (
        await dispatcher.GetTask(dispatcher_pb2.GetTaskRequest(task_id=got["intent"].task_id), metadata=mesh.md())
    ).task
    assert task.task_id == "wf.s-1.intent.-.1" and task.created_by == "alice"
    assert task.status == dispatcher_pb2.TASK_STATUS_SUCCEEDED
    assert mesh.tools.runs["lookup_order"] == 1
    assert [c.subject for c in mesh.tools.callers if c.instance == "workflow/s-1"] == ["alice"]
    # The same run id again answers the same run.
    again = await stub(mesh).StartWorkflowRun(
        W.StartWorkflowRunRequest(workflow="support", input_json='{"message": "x"}', run_id="s-1"), metadata=mesh.md()
    )
    assert again.run.status == W.WORKFLOW_RUN_STATUS_SUCCEEDED
    listed = await stub(mesh).ListWorkflowRuns(W.ListWorkflowRunsRequest(workflow="support"), metadata=mesh.md())
    assert [r.run_id for r in listed.runs] == ["s-1"]
    flows = await stub(mesh).ListWorkflows(W.ListWorkflowsRequest(), metadata=mesh.md())
    assert [w.name for w in flows.workflows] == ["fatal", "support", "waits"]


async def test_a_fatal_node_aborts_the_run(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    await stub(mesh).StartWorkflowRun(
        W.StartWorkflowRunRequest(workflow="fatal", input_json='{"x": 1}', run_id="f-1"), metadata=mesh.md()
    )
    events = await watch(mesh, "f-1")
    assert events[-1].run_status == W.WORKFLOW_RUN_STATUS_ABORTED
    run = (await stub(mesh).GetWorkflowRun(W.GetWorkflowRunRequest(run_id="f-1"), metadata=mesh.md())).run
    assert run.error_code == "DANGEROUS_OPERATION"
    assert nodes(run)["check"].status == W.WORKFLOW_NODE_STATUS_FAILED
    assert nodes(run)["after_check"].status == W.WORKFLOW_NODE_STATUS_CANCELLED
    assert mesh.tools.runs["boom"] == 1  # FATAL: no retry


async def test_cancel_aborts_the_run_and_cancels_its_task(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    await stub(mesh).StartWorkflowRun(
        W.StartWorkflowRunRequest(workflow="waits", input_json='{"service": "api"}', run_id="c-1"), metadata=mesh.md()
    )
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]
    task_events = dispatcher.WatchTask(
        dispatcher_pb2.WatchTaskRequest(task_id="wf.c-1.deploy.-.1"), metadata=mesh.md(), timeout=20
    )
    async for response in task_events:
        if response.event.status == dispatcher_pb2.TASK_STATUS_WAITING_APPROVAL:
            break
    task_events.cancel()
    cancelled = await stub(mesh).CancelWorkflowRun(
        W.CancelWorkflowRunRequest(run_id="c-1", reason="not today"), metadata=mesh.md()
    )
    assert cancelled.run.status == W.WORKFLOW_RUN_STATUS_ABORTED and cancelled.run.error_code == "CANCELLED"
    assert nodes(cancelled.run)["deploy"].reason == "not today"
    task = await dispatcher.GetTask(dispatcher_pb2.GetTaskRequest(task_id="wf.c-1.deploy.-.1"), metadata=mesh.md())
    assert task.task.status == dispatcher_pb2.TASK_STATUS_CANCELLED
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await stub(mesh).CancelWorkflowRun(W.CancelWorkflowRunRequest(run_id="c-1"), metadata=mesh.md())
    assert ended.value.code() == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize(
    ("request_fields", "code", "words"),
    [
        ({"workflow": "nope"}, grpc.StatusCode.NOT_FOUND, "no workflow 'nope'"),
        ({"workflow": ""}, grpc.StatusCode.INVALID_ARGUMENT, "workflow"),
        ({"workflow": "support", "input_json": "{"}, grpc.StatusCode.INVALID_ARGUMENT, "input_json"),
        ({"workflow": "support", "input_json": '{"customer": "x"}'}, grpc.StatusCode.INVALID_ARGUMENT, "message"),
        ({"workflow": "support", "input_json": "{}", "run_id": "bad id"}, grpc.StatusCode.INVALID_ARGUMENT, "run_id"),
    ],
)  # fmt: skip
async def test_bad_starts_get_typed_errors(
    make_mesh: MakeMesh, request_fields: dict[str, str], code: grpc.StatusCode, words: str
) -> None:
    mesh = await mesh_of(make_mesh)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub(mesh).StartWorkflowRun(W.StartWorkflowRunRequest(**request_fields), metadata=mesh.md())
    assert refused.value.code() == code
    assert words in (refused.value.details() or "")


async def test_another_callers_run_is_denied_and_unknown_ones_too(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    await stub(mesh).StartWorkflowRun(
        W.StartWorkflowRunRequest(workflow="fatal", input_json='{"x": 1}', run_id="p-1"),
        metadata=mesh.md(subject="alice"),
    )
    for run_id in ("p-1", "p-unknown"):
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stub(mesh).GetWorkflowRun(
                W.GetWorkflowRunRequest(run_id=run_id), metadata=mesh.md(roles=("agent",), subject="mallory")
            )
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    mine = await stub(mesh).ListWorkflowRuns(
        W.ListWorkflowRunsRequest(), metadata=mesh.md(roles=("agent",), subject="mallory")
    )
    assert list(mine.runs) == []


async def test_a_watch_resumes_after_a_sequence_without_gaps(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    await stub(mesh).StartWorkflowRun(
        W.StartWorkflowRunRequest(workflow="support", input_json='{"message": "refund"}', run_id="w-1"),
        metadata=mesh.md(),
    )
    everything = await watch(mesh, "w-1")
    assert len(everything) > 4
    for after in (1, 3, len(everything) - 1):
        rest = await watch(mesh, "w-1", after=after)
        assert [e.SerializeToString(deterministic=True) for e in rest] == [
            e.SerializeToString(deterministic=True) for e in everything[after:]
        ]
    with pytest.raises(grpc.aio.AioRpcError) as negative:
        await watch(mesh, "w-1", after=-1)
    assert negative.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_scheduled_run_acts_under_its_workflows_service_identity(make_mesh: MakeMesh) -> None:
    daily = {
        "name": "daily",
        "schedule": {"cron": "* * * * *", "run_as": {"subject": "svc-report", "permissions": ["dev:test:read"]}},
        "nodes": [
            {"id": "report", "type": "agent", "agent": "ops", "goal": "write the report"},
            {"id": "order", "type": "tool", "tool": "lookup_order", "arguments": {"order_id": "D"},
             "after": ["report"]},
        ],
    }  # fmt: skip
    config = {**CONFIG, "workflows": {**CONFIG["workflows"], "definitions": [daily]}}  # type: ignore[dict-item]
    mesh = await make_mesh(policy, handlers(), config=config)
    # A new every-minute schedule fires the current minute's tick at once (schedules.due_tick).
    for _ in range(100):
        listed = await stub(mesh).ListWorkflowRuns(W.ListWorkflowRunsRequest(workflow="daily"), metadata=mesh.md())
        if listed.runs:
            break
        await asyncio.sleep(0.1)
    [run] = listed.runs
    assert run.run_id.startswith("daily.schedule.") and run.created_by == "svc-report"
    events = await watch(mesh, run.run_id)
    assert events[-1].run_status == W.WORKFLOW_RUN_STATUS_SUCCEEDED
    done = (await stub(mesh).GetWorkflowRun(W.GetWorkflowRunRequest(run_id=run.run_id), metadata=mesh.md())).run
    dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(mesh.dispatcher.channel)  # type: ignore[no-untyped-call]
    task = (
        await dispatcher.GetTask(
            dispatcher_pb2.GetTaskRequest(task_id=nodes(done)["report"].task_id), metadata=mesh.md()
        )
    ).task
    assert task.created_by == "svc-report"
    [caller] = [c for c in mesh.tools.callers if c.instance == f"workflow/{run.run_id}"]
    assert caller.subject == "svc-report" and caller.roles == frozenset({"agent"})
    assert set(caller.permissions) == {"dev:test:read", "dev:agent.ops:run"}


async def test_list_workflow_runs_pages_newest_first_and_refuses_a_bad_token(make_mesh: MakeMesh) -> None:
    mesh = await mesh_of(make_mesh)
    for n in range(3):
        await stub(mesh).StartWorkflowRun(
            W.StartWorkflowRunRequest(workflow="fatal", input_json='{"x": 1}', run_id=f"l-{n}"), metadata=mesh.md()
        )
        await asyncio.sleep(0.01)  # distinct create times
    seen: list[str] = []
    token = ""
    for _ in range(5):
        page = await stub(mesh).ListWorkflowRuns(
            W.ListWorkflowRunsRequest(workflow="fatal", page_size=1, page_token=token), metadata=mesh.md()
        )
        seen += [r.run_id for r in page.runs]
        token = page.next_page_token
        if not token:
            break
    assert seen == ["l-2", "l-1", "l-0"]
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await stub(mesh).ListWorkflowRuns(W.ListWorkflowRunsRequest(page_token="garbage"), metadata=mesh.md())
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    first = await stub(mesh).ListWorkflowRuns(W.ListWorkflowRunsRequest(page_size=1), metadata=mesh.md())
    with pytest.raises(grpc.aio.AioRpcError) as other_filter:
        await stub(mesh).ListWorkflowRuns(
            W.ListWorkflowRunsRequest(workflow="support", page_token=first.next_page_token), metadata=mesh.md()
        )
    assert other_filter.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as negative:
        await stub(mesh).ListWorkflowRuns(W.ListWorkflowRunsRequest(page_size=-1), metadata=mesh.md())
    assert negative.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_step_that_ends_wakes_its_run_without_waiting_for_a_poll(make_mesh: MakeMesh, store: Store) -> None:
    """With a poll interval far past the watch's deadline, only wakes move the run: each agent node's task
    ending (TaskStore.on_end) and the tool node's result (DispatcherSteps) wake it (workflows/wakes.py)."""
    slow = {**CONFIG, "workflows": {"definitions": FLOWS, "poll_interval_s": 60, "lease_s": 2}}
    mesh = await make_mesh(policy, handlers(), needs_approval={"deploy"}, config=slow)
    await asyncio.sleep(0.2)  # the loop's first pass (at start) is behind it: the next is 60 s away
    start = W.StartWorkflowRunRequest(workflow="support", input_json=json.dumps({"message": "refund"}), run_id="w-1")
    await stub(mesh).StartWorkflowRun(start, metadata=mesh.md())
    events = await watch(mesh, "w-1")  # its deadline (30 s) is half the poll interval
    assert events[-1].run_status == W.WORKFLOW_RUN_STATUS_SUCCEEDED, events
    run = (await stub(mesh).GetWorkflowRun(W.GetWorkflowRunRequest(run_id="w-1"), metadata=mesh.md())).run
    steps = {n.node_id: n.attempts for n in run.nodes if n.node_id in ("intent", "lookup", "escalate", "reply")}
    assert steps == {"intent": 1, "lookup": 1, "escalate": 1, "reply": 0}
    assert await wakes_of(store, "w-1") == 3  # two tasks ended, one tool call answered


async def wakes_of(store: Store, run_id: str) -> int:
    entries: Any = await store.redis.xrange(Wakes(store).key, "-", "+")
    return sum(1 for _, fields in entries if fields.get(b"r", fields.get("r")) in (run_id, run_id.encode()))


async def test_with_wake_off_runs_move_at_polls_only(make_mesh: MakeMesh, store: Store) -> None:
    polled = {**CONFIG, "workflows": {"definitions": FLOWS, "poll_interval_s": 0.1, "lease_s": 2, "wake": False}}
    mesh = await make_mesh(policy, handlers(), needs_approval={"deploy"}, config=polled)
    start = W.StartWorkflowRunRequest(workflow="support", input_json=json.dumps({"message": "refund"}), run_id="p-1")
    await stub(mesh).StartWorkflowRun(start, metadata=mesh.md())
    events = await watch(mesh, "p-1")
    assert events[-1].run_status == W.WORKFLOW_RUN_STATUS_SUCCEEDED, events
    assert await wakes_of(store, "p-1") == 0
