"""What an operator sees of a task, end to end: the four services as processes (demo overlay, real Redis,
the fake ops API), scraped on their HTTP listeners' /metrics, and exporting spans and metrics over
OTLP/HTTP to a local receiver (tests/otlp_http.py); `agentmesh run` as a process of its own."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import grpc.aio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentmesh.cli.demo import ALERT_GOAL
from agentmesh.cli.demo_ops import OPS_URL_ENV, OpsApi, write_service_log
from agentmesh.dev.localredis import LocalRedis
from agentmesh.semconv import ATTR_REQUEST_ID
from agentmesh.v1 import common_pb2, dispatcher_pb2, dispatcher_pb2_grpc
from tests.e2e.conftest import AUTH_KEY, REPO, WITH_DEMO, free_ports, service_json
from tests.e2e.dispatcher.conftest import SERVICE_ORDER, Mesh
from tests.e2e.dispatcher.test_demo_scenario import run_task
from tests.otlp_http import OtlpHttpReceiver, ReceivedSpan
from tests.unit.deploy.manifests import dashboard_queries, promql_metric_names

pytestmark = pytest.mark.e2e
D = dispatcher_pb2
TOOL_SERVICE_NAME = "tools-eu-west"
"""OTEL_SERVICE_NAME given to tool_svc only: it must win over tool_svc's own name."""

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mesh, OtlpHttpReceiver]]:
    """The four services exporting over OTLP/HTTP, with their HTTP listeners on free ports."""
    tmp = tmp_path_factory.mktemp("observed")
    every = free_ports([*SERVICE_ORDER, *(f"{name}-http" for name in SERVICE_ORDER)])
    ports = {name: every[name] for name in SERVICE_ORDER}
    http_ports = {name: every[f"{name}-http"] for name in SERVICE_ORDER}
    logs_dir = tmp / "logs"
    write_service_log(logs_dir)
    with LocalRedis() as redis, OpsApi() as ops, OtlpHttpReceiver() as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
        env |= {
            # The checkout's agentmesh_client too (`agentmesh run` streams with it), as pytest's pythonpath.
            "PYTHONPATH": os.pathsep.join((str(REPO), str(REPO / "clients" / "python"))),
            "AGENTMESH_CONFIG": WITH_DEMO,
            "AGENTMESH_AUTH_KEY": AUTH_KEY,
            "AGENTMESH_REDIS_URL": redis.url,
            "AGENTMESH_SERVICES": service_json(ports, http_ports),
            "AGENTMESH_TOOLS_LOGS_DIR": str(logs_dir),
            "AGENTMESH_SERVER_DRAIN_DELAY_S": "0",
            "AGENTMESH_SERVER_GRACE_PERIOD_S": "2",
            "AGENTMESH_DISPATCHER_QUEUE_METRICS_INTERVAL_S": "0.2",
            # A budget for the demo's agent: the dashboard's spend-against-budget panel has a series.
            "AGENTMESH_GATEWAY": '{"agents": {"ops": {"budget_usd_day": 100}}}',
            OPS_URL_ENV: ops.url,
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_METRICS_EXPORTER": "prometheus,otlp",
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        mesh = Mesh(env=env, ports=ports, tmp=tmp, http_ports=http_ports)
        try:
            for name in SERVICE_ORDER:
                if name == "tool":
                    mesh.start(name, OTEL_SERVICE_NAME=TOOL_SERVICE_NAME)
                else:
                    mesh.start(name)
            yield mesh, receiver
        finally:
            for process in mesh.processes.values():  # all at once: each drains on its own
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            mesh.stop_all()


async def scrape(mesh: Mesh) -> dict[str, Series]:
    """Every service's /metrics, by service."""
    found: dict[str, Series] = {}
    async with httpx.AsyncClient(timeout=10) as client:
        for name, port in mesh.http_ports.items():
            response = await client.get(f"http://127.0.0.1:{port}/metrics")
            assert response.status_code == 200, response.text
            series: Series = {}
            for family in text_string_to_metric_families(response.text):
                for sample in family.samples:
                    series[(sample.name, frozenset(sample.labels.items()))] = sample.value
            found[name] = series
    return found


def total(series: Series, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(value for (n, found), value in series.items() if n == name and wanted <= found)


def tool_outcomes(series: Series) -> Counter[tuple[str, str]]:
    """(tool, error code or outcome) -> calls, from agentmesh_tool_calls_total."""
    counts: Counter[tuple[str, str]] = Counter()
    for (name, labels), value in series.items():
        if name == "agentmesh_tool_calls_total":
            found = dict(labels)
            counts[(found["tool"], found.get("error_code") or found["outcome"])] += int(value)
    return counts


async def test_metrics_after_a_task_match_the_task(observed: tuple[Mesh, OtlpHttpReceiver]) -> None:
    mesh, receiver = observed
    before = await scrape(mesh)
    approvals: list[D.TaskEvent] = []
    outcome = await run_task(mesh, ALERT_GOAL, approvals)
    assert outcome.status == D.TASK_STATUS_SUCCEEDED, [e.message for e in outcome.events]
    async with grpc.aio.insecure_channel(mesh.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        task = (await stub.GetTask(D.GetTaskRequest(task_id=outcome.task_id), metadata=mesh.operator_metadata())).task
    await asyncio.sleep(0.6)  # the queue sampler's next look (every 0.2 s)
    after = await scrape(mesh)

    # tasks_total{status="SUCCEEDED"} rose by exactly one, for the task's agent.
    succeeded = {"status": "SUCCEEDED", "agent": "ops"}
    dispatcher_before, dispatcher_after = before["dispatcher"], after["dispatcher"]
    assert (
        total(dispatcher_after, "agentmesh_tasks_total", **succeeded)
        - total(dispatcher_before, "agentmesh_tasks_total", **succeeded)
        == 1
    )
    assert total(dispatcher_after, "agentmesh_task_steps_total", agent="ops") - total(
        dispatcher_before, "agentmesh_task_steps_total", agent="ops"
    ) == len([e for e in outcome.events if e.kind == D.TASK_EVENT_KIND_STEP_STARTED])

    # The token counter equals the task's usage (provider_svc bills every Generate of the task to its agent).
    for kind, used in (("input", task.usage.input_tokens), ("output", task.usage.output_tokens)):
        grew = total(after["provider"], "agentmesh_gen_ai_tokens_total", agent="ops", type=kind) - total(
            before["provider"], "agentmesh_gen_ai_tokens_total", agent="ops", type=kind
        )
        assert used > 0 and grew == used, f"{kind}: metrics {grew}, task {used}"

    # Tool outcomes by code match the task's events: every result, and the approval the restart waited for.
    expected: Counter[tuple[str, str]] = Counter()
    for event in outcome.events:
        if event.kind == D.TASK_EVENT_KIND_TOOL_RESULT:
            result = event.tool_result
            code = common_pb2.ErrorCode.Name(result.error.code).removeprefix("ERROR_CODE_")
            expected[(result.tool_name, code if result.HasField("error") else "output")] += 1
        elif event.kind == D.TASK_EVENT_KIND_APPROVAL_REQUIRED:
            expected[(event.pending_approval.plan.name, "pending_approval")] += 1
    measured = tool_outcomes(after["tool"]) - tool_outcomes(before["tool"])
    assert measured == expected, [e.message for e in outcome.events]
    assert any(code not in ("output", "pending_approval") for _, code in expected), "the run had tool errors"

    # RPCs per method, queue and Redis: there, from the services that own them.
    execute = {"rpc_method": "ExecuteTool", "rpc_grpc_status_code": "0"}
    calls = len([e for e in outcome.events if e.kind == D.TASK_EVENT_KIND_TOOL_CALL])
    executed = total(after["tool"], "rpc_server_call_duration_seconds_count", **execute) - total(
        before["tool"], "rpc_server_call_duration_seconds_count", **execute
    )
    assert executed == calls  # the approved restart ran inside ResolveApproval, not another ExecuteTool
    assert total(after["dispatcher"], "rpc_client_call_duration_seconds_count", rpc_method="Generate") > 0
    assert total(after["dispatcher"], "agentmesh_queue_depth", state="waiting") == 0
    assert total(after["context"], "db_client_operation_duration_seconds_count", db_system_name="redis") > 0

    # Every metric name in the dashboard's queries is in the scrape.
    scraped = {name for series in after.values() for name, _ in series}
    for query in dashboard_queries():
        missing = promql_metric_names(query) - scraped
        assert not missing, f"{query}: {sorted(missing)} not served"

    # No label carries a task, request, session, approval or call id.
    ids = {task.task_id, task.session_id, task.request_id, outcome.request_id}
    ids |= {a.pending_approval.approval_id for a in approvals}
    ids |= {e.tool_call.id for e in outcome.events if e.tool_call.id}
    ids.discard("")
    values = {value for series in after.values() for _, labels in series for _, value in labels}
    assert not ids & values, sorted(ids & values)
    assert not [v for v in values if any(i in v for i in ids)]

    # The same metrics go over OTLP (OTEL_METRICS_EXPORTER=prometheus,otlp), from every service.
    receiver.wait_for(
        lambda: (
            {s for s, name, _, _ in receiver.metric_points() if name == "rpc.server.call.duration"}
            >= {"dispatcher_svc", "context_svc", TOOL_SERVICE_NAME, "provider_svc"}
        )
    )


async def test_one_agentmesh_run_is_one_trace_and_one_request(observed: tuple[Mesh, OtlpHttpReceiver]) -> None:
    mesh, receiver = observed
    env = dict(mesh.env)
    env.pop("OTEL_METRICS_EXPORTER")  # the CLI records no metrics
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "agentmesh.cli", "run", "assistant", "What is 6 times 7?"],
        env=env,
        cwd=mesh.tmp,  # not the repository: the CLI must not need its files
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"^trace:\s+agentmesh trace (\S+)$", result.stdout, re.M)
    assert found, result.stdout
    request_id = found.group(1)
    assert not (mesh.tmp / "var").exists(), "no span file of its own: the CLI's spans went over OTLP"

    def of_request() -> list[ReceivedSpan]:
        return [s for s in receiver.spans() if s.attributes.get(ATTR_REQUEST_ID) == request_id]

    receiver.wait_for(lambda: any(s.name.endswith("/GetTask") and s.kind == "SERVER" for s in of_request()))
    spans = receiver.spans()
    mine = [s for s in spans if s.attributes.get(ATTR_REQUEST_ID) == request_id]
    # One trace id for the whole command, RunTask to the closing GetTask, and one request id in it.
    assert len({s.trace_id for s in mine}) == 1, sorted({(s.trace_id, s.name) for s in mine})
    trace_id = mine[0].trace_id
    in_trace = [s for s in spans if s.trace_id == trace_id]
    assert {s.attributes.get(ATTR_REQUEST_ID) for s in in_trace} == {request_id}
    (root,) = [s for s in in_trace if not s.parent_span_id]
    assert (root.name, root.service) == ("agentmesh run", "agentmesh-cli")
    dispatcher = "agentmesh.v1.DispatcherService"
    for method in ("RunTask", "GetTask"):
        (server,) = [s for s in in_trace if s.name == f"{dispatcher}/{method}" and s.kind == "SERVER"]
        (client,) = [s for s in in_trace if s.name == f"{dispatcher}/{method}" and s.kind == "CLIENT"]
        assert client.service == "agentmesh-cli" and server.service == "dispatcher_svc"
        assert server.parent_span_id == client.span_id and client.parent_span_id == root.span_id
        assert client.attributes["server.address"] == "127.0.0.1"
        assert client.attributes["server.port"] == mesh.ports["dispatcher"]
    # The rest of the task is in the same trace, across the services, by the conventions.
    services = {s.service for s in in_trace}
    assert {"dispatcher_svc", "context_svc", "provider_svc"} <= services
    assert "tool_svc" not in services  # OTEL_SERVICE_NAME won for tool_svc
    if any(s.name.startswith("agentmesh.v1.ToolService/") for s in in_trace):
        assert TOOL_SERVICE_NAME in services
    for span in in_trace:
        assert not span.name.startswith("/"), span.name
        if span.kind == "SERVER":
            assert type(span.attributes["network.peer.port"]) is int, span
            assert type(span.attributes["rpc.grpc.status_code"]) is int, span
        if span.kind == "CLIENT" and span.attributes.get("rpc.system") == "grpc":
            assert span.attributes["server.address"] == "127.0.0.1", span
            assert type(span.attributes["server.port"]) is int, span
    # The task records the same request id as the command (its GetTask answer is what the CLI printed).
    task_id = re.search(r"^task (\S+): SUCCEEDED$", result.stdout, re.M)
    assert task_id, result.stdout
    async with grpc.aio.insecure_channel(mesh.target("dispatcher")) as channel:
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        request = D.GetTaskRequest(task_id=task_id.group(1))
        task = (await stub.GetTask(request, metadata=mesh.operator_metadata())).task
    assert task.request_id == request_id
