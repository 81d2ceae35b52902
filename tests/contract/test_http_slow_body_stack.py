"""The acceptance run of issue 39's slow-body finding, bounded: 300 slow-body connections against every
service's HTTP port while 20 tasks run on the four services in-process; every task SUCCEEDS and gRPC
health answers within its 1 s deadline throughout (a deadline, not a timing assertion: the call fails
otherwise). The bodies are given a long grace here so they hold their HTTP slots for the whole run: the
point is that HTTP slots are not gRPC's."""

from __future__ import annotations

import asyncio
from pathlib import Path

from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from tests.contract.stack import AGENT, Stack
from tests.contract.test_http_slow_body import slow_post, status_of, wait_for

SERVICES = ("dispatcher", "context", "tool", "provider")
PATHS = {
    "dispatcher": "/agentmesh.v1.DispatcherService/ListAgents",
    "context": "/agentmesh.v1.ContextService/GetSession",
    "tool": "/agentmesh.v1.ToolService/ListTools",
    "provider": "/agentmesh.v1.ProviderService/ListModels",
}


async def test_300_slow_bodies_on_every_http_port_while_20_tasks_run(redis_url: str, tmp_path: Path) -> None:
    overrides = {"server": {"http_body_grace_s": 600, "max_concurrent_rpcs": 64}}
    async with Stack(redis_url, tmp_path, overrides, http=True) as stack:
        settings = stack.hosts["dispatcher"][0].settings
        auth = Authenticator(settings.auth, "dev")
        operator = ((IDENTITY_HEADER, auth.mint(subject="operator", roles=("operator",))),)
        # 20 tokens, 15 connections each: the even ones with no grants, as the red team's (refused before
        # they hold anything), the odd ones with a grant (they hold their HTTP slots for the whole run).
        tokens = [
            auth.mint(subject=f"attacker-{i}", roles=("agent",), permissions=["dev:x:read"] if i % 2 else [])
            for i in range(20)
        ]
        conns = []
        for i in range(300):
            service = SERVICES[i % 4]
            conns.append(await slow_post(stack.hosts[service][0].http_port, tokens[i % 20], PATHS[service]))
        await wait_for(lambda: sum(stack.hosts[s][0].http_limiter.in_flight for s in SERVICES) == 150)
        held = 150
        assert all(stack.hosts[s][0].limiter.in_flight < 64 for s in SERVICES)
        assert stack.channel is not None
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel)  # type: ignore[no-untyped-call]
        health = health_pb2_grpc.HealthStub(stack.channel)
        started = await asyncio.gather(
            *(
                stub.StartTask(
                    dispatcher_pb2.StartTaskRequest(agent_id=AGENT, goal=f"compute {i}*7"),
                    metadata=operator,
                    timeout=30,
                )
                for i in range(20)
            )
        )
        ids = [s.task.task_id for s in started]
        checks = 0
        pending = set(ids)
        for _ in range(600):
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            checks += 1
            for task_id in list(pending):
                got = await stub.GetTask(dispatcher_pb2.GetTaskRequest(task_id=task_id), metadata=operator, timeout=10)
                status = dispatcher_pb2.TaskStatus.Name(got.task.status)
                if status not in ("TASK_STATUS_PENDING", "TASK_STATUS_RUNNING"):
                    assert status == "TASK_STATUS_SUCCEEDED", got.task
                    pending.discard(task_id)
            if not pending:
                break
            await asyncio.sleep(0.1)
        assert not pending, pending
        refused = [await status_of(reader, timeout=5) for i, (reader, _) in enumerate(conns) if i % 2 == 0]
        assert refused == [403] * 150
        # The attack still holds its HTTP slots: it was never cut, only kept apart.
        assert sum(stack.hosts[s][0].http_limiter.in_flight for s in SERVICES) == held
        for _, writer in conns:
            writer.close()
        await wait_for(lambda: sum(stack.hosts[s][0].http_limiter.in_flight for s in SERVICES) == 0)
        print(f"20/20 tasks SUCCEEDED, {checks} health checks OK, {held} HTTP slots held by the attack")
