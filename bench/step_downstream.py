"""The services a benchmark's dispatcher talks to (bench_step, bench_longchain), and how they are hosted.

- minimal: trivial ContextService/ToolService/ProviderService servers answering at once, counting (and on
  request recording) what they were asked (`Counting`);
- real: context_svc, tool_svc (calculator) and provider_svc (scripted) in process, each behind its own
  ServiceHost (`host_service`), on settings made for the benchmark (`base_settings`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

import grpc
import grpc.aio

from agentmesh.authenticator import Authenticator
from agentmesh.config import Settings, load_settings
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.store import Store
from agentmesh.telemetry import setup_telemetry
from agentmesh.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
)

AUTH_KEY = "bench-step-key-" + "b" * 32


# --- minimal downstream services ------------------------------------------------------------------


class Counting:
    """What the minimal servers were asked: counts always, the requests themselves while recording."""

    calls: ClassVar[Counter[str]] = Counter()
    recording: ClassVar[list[tuple[str, Any]] | None] = None

    @classmethod
    def saw(cls, method: str, request: Any) -> None:
        cls.calls[method] += 1
        if cls.recording is not None:
            cls.recording.append((method, request))


class MinimalContext(context_pb2_grpc.ContextServiceServicer):
    def __init__(self) -> None:
        self.logs: dict[str, list[common_pb2.Message]] = {}

    async def CreateSession(self, request: Any, context: Any) -> Any:
        Counting.saw("CreateSession", request)
        self.logs[request.session_id] = []
        return context_pb2.CreateSessionResponse(session=context_pb2.Session(session_id=request.session_id))

    async def GetSession(self, request: Any, context: Any) -> Any:
        Counting.saw("GetSession", request)
        log = self.logs[request.session_id]
        return context_pb2.GetSessionResponse(session=context_pb2.Session(message_count=len(log)))

    async def AppendMessage(self, request: Any, context: Any) -> Any:
        Counting.saw("AppendMessage", request)
        log = self.logs[request.session_id]
        log.append(request.message)
        return context_pb2.AppendMessageResponse(index=len(log) - 1, token_count=10)

    async def AppendToolResult(self, request: Any, context: Any) -> Any:
        Counting.saw("AppendToolResult", request)
        log = self.logs[request.session_id]
        log.append(
            common_pb2.Message(role=common_pb2.ROLE_TOOL, content=request.result.output.inline, tool_call_id="c1")
        )
        return context_pb2.AppendToolResultResponse(index=len(log) - 1, token_count=5)

    async def BuildContext(self, request: Any, context: Any) -> Any:
        Counting.saw("BuildContext", request)
        view = context_pb2.ContextView(messages=self.logs[request.session_id], total_tokens=50, budget_tokens=12000)
        return context_pb2.BuildContextResponse(view=view)


class MinimalTools(tool_pb2_grpc.ToolServiceServicer):
    SPEC = common_pb2.ToolSpec(name="calculator", description="arithmetic", input_schema_json='{"type":"object"}')

    async def DiscoverTools(self, request: Any, context: Any) -> Any:
        Counting.saw("DiscoverTools", request)
        return tool_pb2.DiscoverToolsResponse(tools=[tool_pb2.ScoredTool(tool=self.SPEC, score=1)])

    async def ExecuteTool(self, request: Any, context: Any) -> Any:
        Counting.saw("ExecuteTool", request)
        result = common_pb2.ToolResult(tool_call_id=request.call.id, tool_name=request.call.name)
        result.output.inline = "42"
        return tool_pb2.ExecuteToolResponse(result=result)


class MinimalProvider(provider_pb2_grpc.ProviderServiceServicer):
    async def Generate(self, request: Any, context: Any) -> Any:
        Counting.saw("Generate", request)
        if any(m.role == common_pb2.ROLE_TOOL for m in request.messages):
            message = common_pb2.Message(role=common_pb2.ROLE_ASSISTANT, content="42")
        else:
            call = common_pb2.ToolCall(id="c1", name="calculator", arguments_json='{"expression":"40+2"}')
            message = common_pb2.Message(role=common_pb2.ROLE_ASSISTANT, tool_calls=[call])
        usage = common_pb2.TokenUsage(input_tokens=50, output_tokens=5, total_tokens=55)
        return provider_pb2.GenerateResponse(message=message, usage=usage, model="bench/minimal")


REAL_EXTRA: dict[str, Any] = {
    "providers": {
        "default_model": "scripted/bench",
        "backends": [
            {"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": [{"name": "bench"}]}
        ],
    },
    # No quota in a benchmark: the per-agent tool bucket would throttle the run, not measure it.
    "tools": {"rate_limit": {"capacity": 1e9, "refill_per_second": 1e9}},
}


# --- hosting --------------------------------------------------------------------------------------


def base_settings(redis_url: str, tmp: Path, ports: dict[str, int], extra: dict[str, Any] | None = None) -> Settings:
    empty = tmp / "empty.yaml"
    empty.write_text("{}\n")
    overrides: dict[str, Any] = {
        "redis": {"url": redis_url},
        "auth": {"key": AUTH_KEY},
        "server": {"drain_delay_s": 0, "grace_period_s": 1, "max_concurrent_rpcs": 1024},
        "telemetry": {"span_file": str(tmp / "spans.jsonl"), "log_level": "WARNING"},
        "services": {name: {"port": port} for name, port in ports.items()},
        "agents": [
            {
                "id": "calc",
                "model": "scripted/bench",
                "permissions": ["*:*:*"],
                "token_budget": 1_000_000,
                "tools": ["calculator"],
            }
        ],
        "dispatcher": {"max_concurrent_tasks": 64},
        **(extra or {}),
    }
    return load_settings(empty, overrides=overrides)


async def host_service(
    spec: ServiceSpec, settings: Settings, port: int = 0
) -> tuple[ServiceHost, Callable[[], Awaitable[None]]]:
    store = await Store.connect(settings.redis, settings.environment)
    host = ServiceHost(
        name=spec.name,
        settings=settings,
        telemetry=setup_telemetry(f"{spec.name}_svc", settings, configure_logs=False),
        authenticator=Authenticator(settings.auth, settings.environment),
        method_roles=spec.method_roles,
        store=store,
    )
    cleanup = await spec.setup(host)
    await host.start(f"127.0.0.1:{port}")

    async def stop() -> None:
        await host.stop(grace=0, drain_delay=0)
        if cleanup is not None:
            await cleanup()
        await store.close()
        await host.telemetry.aclose()

    return host, stop


async def minimal_downstream() -> tuple[dict[str, int], Callable[[], Awaitable[None]]]:
    servers = []
    ports = {}
    for name, servicer, add in (
        ("context", MinimalContext(), context_pb2_grpc.add_ContextServiceServicer_to_server),
        ("tool", MinimalTools(), tool_pb2_grpc.add_ToolServiceServicer_to_server),
        ("provider", MinimalProvider(), provider_pb2_grpc.add_ProviderServiceServicer_to_server),
    ):
        server = grpc.aio.server()
        add(servicer, server)  # type: ignore[no-untyped-call]
        ports[name] = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)

    async def stop() -> None:
        for server in servers:
            await server.stop(0)

    return ports, stop


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def real_downstream(redis_url: str, tmp: Path) -> tuple[dict[str, int], Callable[[], Awaitable[None]]]:
    """context_svc, tool_svc and provider_svc in process (their own ServiceHosts)."""
    from context_svc.server import SPEC as CONTEXT_SPEC
    from provider_svc.server import SPEC as PROVIDER_SPEC
    from tool_svc.server import SPEC as TOOL_SPEC

    ports = {name: free_port() for name in ("context", "tool", "provider")}
    extra = REAL_EXTRA
    settings = base_settings(redis_url, tmp, ports, extra)
    stops = []
    for spec in (CONTEXT_SPEC, TOOL_SPEC, PROVIDER_SPEC):
        _, stop = await host_service(spec, settings, ports[spec.name])
        stops.append(stop)

    async def stop_all() -> None:
        for stop in reversed(stops):
            await stop()

    return ports, stop_all


async def redis_commands(url: str) -> dict[str, int]:
    """Commands Redis has served so far, by name (INFO commandstats)."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
