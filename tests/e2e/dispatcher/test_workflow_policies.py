"""Workflow policies over the services as processes on a real Redis (issue 46), the side effects counted
at the fake ops API the tools call: a fan-out of 8 with a cap of 3 never has more than 3 calls in flight;
an ENGINEERING failure is retried, then its fallback runs and its dependents read the fallback's output;
a FATAL error in one branch (an agent's task ABORTED by the danger guard) aborts the run and cancels the
other branch's task mid-step; a condition runs the branch it picks and no other; a watch resumed after a
sequence continues without a gap. One set of processes for the module (the tests run one at a time)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc.aio
import pytest
import yaml

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.demo_ops import OPS_URL_ENV, OpsApi, write_service_log
from agentmesh.config import AuthSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc, workflow_pb2, workflow_pb2_grpc
from tests.e2e.conftest import AUTH_KEY, REPO, WITH_DEMO, free_ports, service_json
from tests.e2e.dispatcher.conftest import SERVICE_ORDER, Mesh
from tests.e2e.dispatcher.test_crash_safety import NOTIFIER
from tests.rediscluster import cluster_mode, empty

pytestmark = pytest.mark.e2e
W = workflow_pb2
D = dispatcher_pb2
STALL_S = 0.5
"""How long each stalled upstream call takes: long enough that calls a cap let through overlap."""
NOTIFY_STALL_S = 2.0
"""The other branch's call, stalled: the FATAL branch aborts the run meanwhile."""

SHELL = {
    "id": "shell",
    "model": "scripted/wf-shell",
    "tools": ["run_shell"],
    "permissions": ["*:ops.write:write"],
    "max_steps": 4,
}
FAST = {"initial_backoff_s": 0.05, "max_backoff_s": 0.1, "jitter_s": 0}
WORKFLOWS: list[dict[str, Any]] = [
    {
        "name": "fanout",
        "nodes": [
            {
                "id": "metrics",
                "type": "parallel",
                "over": "{{ input.services }}",
                "max_concurrency": 3,
                "do": {
                    "type": "tool",
                    "tool": "query_metrics",
                    "arguments": {"service": "{{ item }}", "metric": "latency_p99", "window": "15m"},
                },
            }
        ],
    },
    {
        "name": "fallback",
        "nodes": [
            {
                "id": "deployment",
                "type": "tool",
                "tool": "get_deployment",  # /ops/deployment: 404 for any service, UPSTREAM_NOT_FOUND
                "arguments": {"service": "{{ input.service }}"},
                "retry": {"max_attempts": 3, **FAST},
                "fallback": "pods",
            },
            {"id": "pods", "type": "tool", "tool": "list_pods", "arguments": {"service": "{{ input.service }}"}},
            {
                "id": "pod_metrics",  # reads what only the fallback's output has
                "type": "tool",
                "tool": "query_metrics",
                "after": ["deployment"],
                "arguments": {
                    "service": "{{ nodes.deployment.output.pods[0].name }}",
                    "metric": "error_rate",
                    "window": "5m",
                },
            },
        ],
    },
    {
        "name": "fatal",
        "nodes": [
            {"id": "announce", "type": "agent", "agent": "notifier", "goal": "announce the maintenance steps"},
            {
                "id": "after_announce",
                "type": "tool",
                "tool": "list_pods",
                "after": ["announce"],
                "arguments": {"service": "never-svc"},
            },
            {"id": "cleanup", "type": "agent", "agent": "shell", "goal": "free disk space on db-1"},
        ],
    },
    {
        "name": "branch",
        "nodes": [
            {
                "id": "metrics",
                "type": "tool",
                "tool": "query_metrics",  # error_rate 0.124
                "arguments": {"service": "{{ input.service }}", "metric": "error_rate", "window": "15m"},
            },
            {
                "id": "hot",
                "type": "condition",
                "after": ["metrics"],
                "when": "double(nodes.metrics.output.error_rate) > double(input.threshold)",
                "then": ["pods"],
                "else": ["saturation"],
            },
            {"id": "pods", "type": "tool", "tool": "list_pods", "arguments": {"service": "{{ input.service }}"}},
            {
                "id": "saturation",
                "type": "tool",
                "tool": "query_metrics",
                "arguments": {"service": "{{ input.service }}", "metric": "saturation", "window": "15m"},
            },
            {"id": "done", "type": "join", "mode": "any", "after": ["pods", "saturation"]},
        ],
    },
]


def overlay() -> dict[str, Any]:
    return {
        "providers": {
            "backends": [
                {
                    "name": "scripted",
                    "models": [{"name": "wf-shell", "policy": "tests.e2e.dispatcher.workflow_models:shell"}],
                }
            ]
        },
        "agents": [NOTIFIER, SHELL],
        "dispatcher": {"claim_idle_s": 1.5, "claim_interval_s": 0.2, "heartbeat_interval_s": 0.5},
        "workflows": {"definitions": WORKFLOWS, "poll_interval_s": 0.1, "lease_s": 2},
    }


@pytest.fixture(scope="module")
def ops() -> Iterator[OpsApi]:
    with OpsApi() as api:
        yield api


@pytest.fixture(scope="module")
def redis_url(request: pytest.FixtureRequest) -> Iterator[str]:
    if cluster_mode(request.config):
        cluster = request.getfixturevalue("redis_cluster")
        empty(cluster)
        yield cluster.url
        return
    with LocalRedis() as server:
        yield server.url


@pytest.fixture(scope="module")
def mesh(ops: OpsApi, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    tmp = tmp_path_factory.mktemp("wfpolicies")
    (tmp / "overlay.yaml").write_text(yaml.safe_dump(overlay()), encoding="utf-8")
    write_service_log(tmp / "logs")
    every = free_ports([*SERVICE_ORDER, *(f"{name}-http" for name in SERVICE_ORDER)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
    env.update(
        {
            "AGENTMESH_AUTH_KEY": AUTH_KEY,
            "AGENTMESH_CONFIG": os.pathsep.join([WITH_DEMO, str(tmp / "overlay.yaml")]),
            "AGENTMESH_REDIS_URL": redis_url,
            "AGENTMESH_SERVICES": service_json(
                {n: every[n] for n in SERVICE_ORDER}, {n: every[f"{n}-http"] for n in SERVICE_ORDER}
            ),
            "AGENTMESH_TOOLS_LOGS_DIR": str(tmp / "logs"),
            "AGENTMESH_TELEMETRY_LOG_LEVEL": "INFO",
            "AGENTMESH_SERVER_DRAIN_DELAY_S": "0",
            "AGENTMESH_SERVER_GRACE_PERIOD_S": "2",
            "PYTHONPATH": str(REPO),
            OPS_URL_ENV: ops.url,
        }
    )
    found = Mesh(env=env, ports={n: every[n] for n in SERVICE_ORDER}, tmp=tmp)
    try:
        for name in SERVICE_ORDER:
            found.start(name)
        yield found
    finally:
        found.stop_all()


@pytest.fixture
async def stub(mesh: Mesh) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(mesh.target("dispatcher")) as channel:
        yield workflow_pb2_grpc.WorkflowServiceStub(channel)  # type: ignore[no-untyped-call]


async def run_to_end(stub: Any, workflow: str, run_id: str, data: dict[str, Any]) -> W.WorkflowRun:
    md = metadata()
    start = W.StartWorkflowRunRequest(workflow=workflow, run_id=run_id, input_json=json.dumps(data))
    await stub.StartWorkflowRun(start, metadata=md, timeout=10)
    watch = stub.WatchWorkflowRun(W.WatchWorkflowRunRequest(run_id=run_id), metadata=md, timeout=60)
    events = [r.event async for r in watch]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1)), events
    assert events[-1].run_status != W.WORKFLOW_RUN_STATUS_UNSPECIFIED, events
    run: W.WorkflowRun = (await stub.GetWorkflowRun(W.GetWorkflowRunRequest(run_id=run_id), metadata=md)).run
    return run


def metadata() -> tuple[tuple[str, str], ...]:
    """An operator whose grants cover the ops tools: a run acts as its starter, its tool calls too."""
    token = Authenticator(AuthSettings(key=AUTH_KEY), "dev").mint(
        subject="alice", roles=("operator",), permissions=("*:ops.*:read", "*:ops.*:write")
    )
    return ((IDENTITY_HEADER, token),)


def nodes(run: W.WorkflowRun) -> dict[str, W.WorkflowNode]:
    return {n.node_id: n for n in run.nodes}


def peak(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1]))
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


async def test_a_fan_out_of_8_never_runs_more_than_its_cap_of_3(mesh: Mesh, ops: OpsApi, stub: Any) -> None:
    services = [f"fan{i}-svc" for i in range(8)]
    for _ in services:
        ops.state.stall("/ops/metrics", STALL_S, effect=True)
    run = await run_to_end(stub, "fanout", "fan-1", {"services": services})
    assert run.status == W.WORKFLOW_RUN_STATUS_SUCCEEDED, run
    assert [m["service"] for m in json.loads(nodes(run)["metrics"].output_json)] == services  # in item order
    calls = [(s, e) for p, b, s, e in ops.state.spans if p == "/ops/metrics" and b["service"] in services]
    assert sorted(b["service"] for p, b in ops.state.calls if p == "/ops/metrics") == sorted(services)  # once each
    # The cap is reached (the calls overlap) and never passed.
    assert peak(calls) == 3, calls


async def test_an_engineering_failure_retries_then_takes_its_fallback(mesh: Mesh, ops: OpsApi, stub: Any) -> None:
    run = await run_to_end(stub, "fallback", "fb-1", {"service": "ghost-svc"})
    assert run.status == W.WORKFLOW_RUN_STATUS_SUCCEEDED, run
    by_id = nodes(run)
    assert by_id["deployment"].status == W.WORKFLOW_NODE_STATUS_FELL_BACK, by_id["deployment"]
    assert by_id["deployment"].attempts == 3 and by_id["deployment"].error_code == "UPSTREAM_NOT_FOUND"
    assert by_id["pods"].status == W.WORKFLOW_NODE_STATUS_SUCCEEDED and by_id["pods"].attempts == 1
    # Upstream: three attempts, then one fallback call; the dependent read the fallback's output.
    assert [b["service"] for b in ops.state.bodies("/ops/deployment")] == ["ghost-svc"] * 3
    assert [b["service"] for b in ops.state.bodies("/ops/pods")] == ["ghost-svc"]
    assert [b for b in ops.state.bodies("/ops/metrics") if b["metric"] == "error_rate"] == [
        {"service": "ghost-svc-7d9f8-x2k4q", "metric": "error_rate", "window": "5m"}
    ]


async def test_fatal_in_one_branch_aborts_the_run_and_cancels_the_other(mesh: Mesh, ops: OpsApi, stub: Any) -> None:
    """`cleanup`'s task is ABORTED by the danger guard (FATAL) while `announce`'s task waits on its first
    notify call (stalled): the run aborts before that call returns, `announce`'s task is cancelled and makes
    no further call once it does, and nothing after it runs."""
    ops.state.stall("/notify", NOTIFY_STALL_S, effect=True)
    before = len(ops.state.bodies("/notify"))
    answered = len(notify_spans(ops))
    run = await run_to_end(stub, "fatal", "fatal-1", {})
    assert run.status == W.WORKFLOW_RUN_STATUS_ABORTED, run
    # Ordered by events, not timed: the stalled call had not returned when the run had ended.
    assert len(notify_spans(ops)) == answered
    by_id = nodes(run)
    assert by_id["cleanup"].status == W.WORKFLOW_NODE_STATUS_FAILED, by_id["cleanup"]
    assert by_id["cleanup"].error_code == "DANGEROUS_OPERATION" and by_id["cleanup"].attempts == 1
    assert by_id["announce"].status == W.WORKFLOW_NODE_STATUS_CANCELLED, by_id["announce"]
    assert by_id["after_announce"].status in (W.WORKFLOW_NODE_STATUS_CANCELLED, W.WORKFLOW_NODE_STATUS_SKIPPED)
    md = metadata()
    async with grpc.aio.insecure_channel(mesh.target("dispatcher")) as channel:
        tasks = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        shell = (await tasks.GetTask(D.GetTaskRequest(task_id=by_id["cleanup"].task_id), metadata=md)).task
        assert shell.status == D.TASK_STATUS_ABORTED, shell
        announce = by_id["announce"].task_id
        deadline = time.monotonic() + 20
        while (task := (await tasks.GetTask(D.GetTaskRequest(task_id=announce), metadata=md)).task).status not in (
            D.TASK_STATUS_CANCELLED,
            D.TASK_STATUS_SUCCEEDED,
            D.TASK_STATUS_FAILED,
        ):
            assert time.monotonic() < deadline, task
            await asyncio.sleep(0.1)
        assert task.status == D.TASK_STATUS_CANCELLED, task
    # The stalled call returns; a task still running would send its next notify then (3 in all).
    deadline = time.monotonic() + 20
    while len(notify_spans(ops)) == answered:
        assert time.monotonic() < deadline, "the stalled notify call never returned"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    assert len(ops.state.bodies("/notify")) - before == 1
    assert not [b for b in ops.state.bodies("/ops/pods") if b["service"] == "never-svc"]


def notify_spans(ops: OpsApi) -> list[tuple[float, float]]:
    """The /notify calls the ops API has answered."""
    return [(start, end) for path, _, start, end in ops.state.spans if path == "/notify"]


async def test_a_condition_runs_the_branch_it_picks(mesh: Mesh, ops: OpsApi, stub: Any) -> None:
    hot = await run_to_end(stub, "branch", "br-hot", {"service": "hot-svc", "threshold": 0.1})
    calm = await run_to_end(stub, "branch", "br-calm", {"service": "calm-svc", "threshold": 0.5})
    for run in (hot, calm):
        assert run.status == W.WORKFLOW_RUN_STATUS_SUCCEEDED, run
    assert nodes(hot)["pods"].status == W.WORKFLOW_NODE_STATUS_SUCCEEDED
    assert nodes(hot)["saturation"].status == W.WORKFLOW_NODE_STATUS_SKIPPED
    assert nodes(calm)["pods"].status == W.WORKFLOW_NODE_STATUS_SKIPPED
    assert nodes(calm)["saturation"].status == W.WORKFLOW_NODE_STATUS_SUCCEEDED
    pods = [b["service"] for b in ops.state.bodies("/ops/pods") if b["service"] in ("hot-svc", "calm-svc")]
    saturation = [b["service"] for b in ops.state.bodies("/ops/metrics") if b["metric"] == "saturation"]
    assert (pods, saturation) == (["hot-svc"], ["calm-svc"])


async def test_a_watch_resumes_after_a_sequence_without_gaps(mesh: Mesh, stub: Any) -> None:
    """A watch dropped after two events and resumed with after_sequence=2 sees 3.. to the end, each once."""
    md = metadata()
    services = [f"w{i}-svc" for i in range(4)]
    start = W.StartWorkflowRunRequest(
        workflow="fanout", run_id="watch-1", input_json=json.dumps({"services": services})
    )
    await stub.StartWorkflowRun(start, metadata=md, timeout=10)
    first = stub.WatchWorkflowRun(W.WatchWorkflowRunRequest(run_id="watch-1"), metadata=md, timeout=60)
    head = []
    async for reply in first:
        head.append(reply.event.sequence)
        if len(head) == 2:
            break
    first.cancel()
    rest = stub.WatchWorkflowRun(W.WatchWorkflowRunRequest(run_id="watch-1", after_sequence=2), metadata=md, timeout=60)
    tail = [r.event async for r in rest]
    assert head + [e.sequence for e in tail] == list(range(1, len(tail) + 3))
    assert tail[-1].run_status == W.WORKFLOW_RUN_STATUS_SUCCEEDED, tail
    again = stub.WatchWorkflowRun(
        W.WatchWorkflowRunRequest(run_id="watch-1", after_sequence=2), metadata=md, timeout=60
    )
    assert [r.event async for r in again] == tail  # an ended run's events replay as they were
