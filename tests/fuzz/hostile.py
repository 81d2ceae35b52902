"""The red team's resource attacks as fuzz cases (issue 39), run by `make fuzz` after the RPC fuzz on the
same cluster: ExecuteTool arguments built to make a backtracking regex engine explode (a catastrophic
`pattern` in a tool's schema), and HTTP bodies trickling into every service's HTTP listener while gRPC
calls are made. Either fails the run if a call is answered UNKNOWN or INTERNAL, if gRPC stops answering,
or if a service stops SERVING."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc

EVIL_TOOL: dict[str, Any] = {
    "name": "fuzz_evil_pattern",
    "description": "Use when fuzzing schema regexes",
    "executor": "http",
    "endpoint_url": "http://127.0.0.1:9/evil",
    "permission": {"group": "fuzz", "access": "read"},
    "timeout_s": 1.0,
    "input_schema": {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^(a+)+$"}, "n": {"type": "string", "pattern": "^(a|aa)*$"}},
        "patternProperties": {"^(b+)+$": {"type": "string"}},
        "additionalProperties": False,
    },
}
"""Catastrophic for a backtracking engine on "aaa…!"; tool_svc matches schemas with RE2."""

HTTP_PATHS = {
    "dispatcher": "/agentmesh.v1.DispatcherService/ListAgents",
    "context": "/agentmesh.v1.ContextService/GetSession",
    "tool": "/agentmesh.v1.ToolService/ListTools",
    "provider": "/agentmesh.v1.ProviderService/ListModels",
}


def _evil_arguments(rng: random.Random) -> str:
    length = rng.choice([25, 29, 33, 100, 1000, 10_000])
    tail = rng.choice(["!", "b", "\u00e9", "\x00", ""])
    kind = rng.randrange(3)
    if kind == 0:
        return json.dumps({"id": "a" * length + tail})
    if kind == 1:
        return json.dumps({"n": "a" * length + tail})
    return json.dumps({"b" * length + tail: "x"})


async def redos_case(cluster: Any, stats: Any, rng: random.Random, count: int) -> None:
    """`count` ExecuteTool calls with catastrophic arguments, 8 at a time; each must be answered (OK with
    a tool error: SCHEMA_INVALID, or PERMISSION_DENIED) within the call's deadline."""
    stub = tool_pb2_grpc.ToolServiceStub(cluster.running["tool"].channel)  # type: ignore[no-untyped-call]
    token = ((IDENTITY_HEADER, cluster.token()),)
    limit = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        request = tool_pb2.ExecuteToolRequest(
            call=common_pb2.ToolCall(id=f"redos-{i}", name=EVIL_TOOL["name"], arguments_json=_evil_arguments(rng)),
            session_id="fuzz-session",
        )
        async with limit:
            stats.sent += 1
            try:
                reply = await stub.ExecuteTool(request, metadata=token, timeout=5)
            except grpc.aio.AioRpcError as exc:
                stats.statuses[exc.code().name] += 1
                if exc.code() in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED):
                    stats.internal += 1
                    stats.problem(f"ExecuteTool with catastrophic arguments: {exc.code().name} {exc.details()}")
                return
            outcome = reply.result.error.code if reply.result.HasField("error") else 0
            stats.statuses["OK/" + common_pb2.ErrorCode.Name(outcome).removeprefix("ERROR_CODE_")] += 1

    await asyncio.gather(*(one(i) for i in range(count)))


async def slow_body_case(cluster: Any, stats: Any, per_port: int) -> None:
    """`per_port` trickling bodies into each service's HTTP listener (half from a token with no grant);
    meanwhile every service answers gRPC health and ListTools answers."""
    conns = []
    assert cluster.authenticator is not None
    granted = cluster.authenticator.mint(subject="fuzz-slow", roles=("agent",), permissions=["dev:x:read"])
    ungranted = cluster.authenticator.mint(subject="fuzz-nobody", roles=("agent",))
    for name, path in HTTP_PATHS.items():
        port = cluster.running[name].host.http_port
        for i in range(per_port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            token = granted if i % 2 else ungranted
            writer.write(
                (
                    f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    f"authorization: Bearer {token}\r\ncontent-length: 100000\r\n\r\n{{"
                ).encode()
            )
            conns.append((reader, writer))
            stats.sent += 1
    await asyncio.sleep(0.5)
    token = ((IDENTITY_HEADER, cluster.token()),)
    for name, running in cluster.running.items():
        try:
            health = health_pb2_grpc.HealthStub(running.channel)
            await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
            stats.statuses[f"health:{name}:OK"] += 1
        except grpc.aio.AioRpcError as exc:
            stats.crashes += 1
            stats.problem(f"{name}: gRPC health during slow bodies: {exc.code().name}")
    stub = tool_pb2_grpc.ToolServiceStub(cluster.running["tool"].channel)  # type: ignore[no-untyped-call]
    try:
        await stub.ListTools(tool_pb2.ListToolsRequest(), metadata=token, timeout=5)
        stats.statuses["grpc:ListTools:OK"] += 1
    except grpc.aio.AioRpcError as exc:
        stats.internal += 1
        stats.problem(f"ListTools over gRPC during slow bodies: {exc.code().name}")
    for _, writer in conns:
        writer.close()
