"""The demo scenario end to end: four services as separate processes, real Redis, the scripted model,
the fake ops API as the HTTP tools' upstream, and spans received over OTLP/gRPC."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from typing import Any

import grpc.aio
import pytest

from agentmesh.cli.demo import ALERT_GOAL, DISK_GOAL
from agentmesh.cli.demo_ops import OpsApi
from agentmesh.cli.run_view import RunOutcome, stream_task
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc, dispatcher_pb2
from tests.e2e.dispatcher.conftest import SERVICE_ORDER, Collector, Mesh

pytestmark = pytest.mark.e2e
D = dispatcher_pb2


async def run_task(mesh: Mesh, goal: str, approvals: list[D.TaskEvent]) -> RunOutcome:
    async with grpc.aio.insecure_channel(mesh.target("dispatcher")) as channel:

        def approve(event: D.TaskEvent) -> tuple[bool, str]:
            approvals.append(event)
            return True, "maintenance window"

        return await stream_task(
            channel,
            D.StartTaskRequest(agent_id="ops", goal=goal),
            mesh.operator_metadata(),
            decide=approve,
            on_event=lambda event: None,
            timeout_s=60,
            approver=mesh.operator_metadata("bob"),  # the creator (alice) may not approve its task's writes
        )


def of_kind(outcome: RunOutcome, kind: int) -> list[D.TaskEvent]:
    return [e for e in outcome.events if e.kind == kind]


async def test_the_demo_scenario_across_four_processes(
    mesh_env: Mesh, ops_api: OpsApi, collector: tuple[Collector, int]
) -> None:
    for name in SERVICE_ORDER:
        await asyncio.to_thread(mesh_env.start, name)
    approvals: list[D.TaskEvent] = []
    first = await run_task(mesh_env, ALERT_GOAL, approvals)

    # Final status, and every event exactly once, in order.
    assert first.status == D.TASK_STATUS_SUCCEEDED, [e.message for e in first.events]
    assert [e.sequence for e in first.events] == list(range(1, len(first.events) + 1))
    calls = [
        (e.tool_call.name, json.loads(e.tool_call.arguments_json)) for e in of_kind(first, D.TASK_EVENT_KIND_TOOL_CALL)
    ]
    assert [name for name, _ in calls] == [
        "query_logs", "query_metrics", "query_metrics", "get_deployment", "list_pods", "restart_service",
    ]  # fmt: skip

    # The 200 KB log was offloaded: the result carries a ref + digest, the context stays small.
    logs_result = of_kind(first, D.TASK_EVENT_KIND_TOOL_RESULT)[0].tool_result
    assert logs_result.output.WhichOneof("content") == "ref"
    assert logs_result.output.ref.size_bytes > 150_000
    assert "ERROR" in logs_result.output.digest
    contexts = [int(e.attributes["context_tokens"]) for e in of_kind(first, D.TASK_EVENT_KIND_CONTEXT)]
    raws = [int(e.attributes["raw_tokens"]) for e in of_kind(first, D.TASK_EVENT_KIND_CONTEXT)]
    assert max(contexts) < 4000
    assert raws[-1] > 40_000

    # CONTRACT: one correction, and the corrected call carries the hint's fix.
    [correction] = of_kind(first, D.TASK_EVENT_KIND_CORRECTION)
    assert correction.error.error_class == common_pb2.ERROR_CLASS_CONTRACT
    assert any("15m" in v.hint for v in correction.error.violations)
    assert calls[1][1]["window"] == "15 minutes" and calls[2][1]["window"] == "15m"

    # ENGINEERING: the 404 names the fallback, which the model takes; the failing call is not retried.
    [fallback] = of_kind(first, D.TASK_EVENT_KIND_FALLBACK)
    assert fallback.error.code == common_pb2.ERROR_CODE_UPSTREAM_NOT_FOUND
    assert fallback.error.fallback_tool == "list_pods"
    assert ops_api.state.counts["/ops/deployment"] == 1

    # Approval: the plan and the impact were shown; the restart ran once, after it.
    [asked] = approvals
    assert asked.pending_approval.plan.name == "restart_service"
    assert "Rolling restart" in asked.pending_approval.impact
    assert asked.status == D.TASK_STATUS_WAITING_APPROVAL
    assert len(of_kind(first, D.TASK_EVENT_KIND_APPROVAL_RESOLVED)) == 1
    assert ops_api.state.counts["/ops/restart"] == 1
    assert "connection pool" in first.answer and "pl_" in first.answer

    # Run 2: rm -rf is FATAL: ABORTED with an incident, nothing reached the host.
    second = await run_task(mesh_env, DISK_GOAL, approvals)
    assert second.status == D.TASK_STATUS_ABORTED
    [incident] = of_kind(second, D.TASK_EVENT_KIND_INCIDENT)
    assert incident.error.code == common_pb2.ERROR_CODE_DANGEROUS_OPERATION
    assert incident.error.error_class == common_pb2.ERROR_CLASS_FATAL
    assert ops_api.state.counts["/ops/shell"] == 0
    assert of_kind(second, D.TASK_EVENT_KIND_TOOL_CALL)[-1].sequence < incident.sequence
    assert len(approvals) == 1

    # The session kept the ref and the digest, not the raw log.
    async with grpc.aio.insecure_channel(mesh_env.target("context")) as channel:
        stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
        # The task's own token (its task id is the session's attached task) may read its session.
        metadata = mesh_env.agent_metadata("ops", ["*:ops.*:write"], task_id=first.task_id)
        session = (
            await stub.GetSession(context_pb2.GetSessionRequest(session_id=first.task_id), metadata=metadata)
        ).session
    assert session.total_tokens < 10_000

    # One trace, one request id, all four services — read from spans received over OTLP/gRPC.
    await asyncio.to_thread(mesh_env.stop_all)  # services flush their spans as they stop
    spans = collector[0].spans()
    mine = [s for s in spans if s["request_id"] == first.request_id]
    by_trace: dict[str, set[str]] = defaultdict(set)
    for span in mine:
        by_trace[span["trace_id"]].add(span["service"])
    full = [trace for trace, services in by_trace.items() if services == {f"{n}_svc" for n in SERVICE_ORDER}]
    assert full, dict(by_trace)
    trace_id = full[0]
    in_trace = [s for s in spans if s["trace_id"] == trace_id]
    assert {s["request_id"] for s in in_trace} == {first.request_id}
    names: Any = {s["name"] for s in in_trace}
    assert {"agentmesh.v1.ToolService/ExecuteTool", "agentmesh.v1.ProviderService/Generate"} <= names
    assert "invoke_agent ops" in names
