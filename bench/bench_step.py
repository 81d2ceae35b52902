"""Orchestration overhead of one agent step, beside the same number of bare gRPC round trips.

A task "add two numbers" takes two steps (the model calls `calculator`, then answers). Its
dispatcher runs in this process behind the real ServiceHost (auth, OTel, load shedding) with Redis;
the downstream services are either
- `minimal`: trivial ContextService/ToolService/ProviderService servers answering at once, so the
  step time is the dispatcher's own orchestration plus the raw RPCs it makes; or
- `real`: context_svc, tool_svc (calculator) and provider_svc (scripted) themselves, in process.
Each task is measured from RunTask to its final event, at 1 and 32 concurrent tasks. The floor is
`RPCs per step` bare unary round trips (no interceptors, same machine, same run, measured in
rounds alternating with the tasks') at the same concurrency: the step ratio = step p50 / floor p50.

Run: `.venv/bin/python bench/bench_step.py [--tasks 200] [--mode minimal|real|both]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

import grpc
import grpc.aio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.auth import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import Settings, load_settings
from agentmesh.server import ServiceHost, ServiceSpec
from agentmesh.store import LocalRedis, Store
from agentmesh.telemetry import setup_telemetry
from agentmesh.v1 import (
    common_pb2,
    context_pb2,
    context_pb2_grpc,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
)
from bench.common import BENCH_DIR, STATS_HEADER, BareEchoServer, Stats, bar_plot, sample, stats_of, table

AUTH_KEY = "bench-step-key-" + "b" * 32
D = dispatcher_pb2


# --- minimal downstream services ------------------------------------------------------------------


class Counting:
    calls: ClassVar[Counter[str]] = Counter()


class MinimalContext(context_pb2_grpc.ContextServiceServicer):
    def __init__(self) -> None:
        self.logs: dict[str, list[common_pb2.Message]] = {}

    async def CreateSession(self, request: Any, context: Any) -> Any:
        Counting.calls["CreateSession"] += 1
        self.logs[request.session_id] = []
        return context_pb2.CreateSessionResponse(session=context_pb2.Session(session_id=request.session_id))

    async def GetSession(self, request: Any, context: Any) -> Any:
        Counting.calls["GetSession"] += 1
        log = self.logs[request.session_id]
        return context_pb2.GetSessionResponse(session=context_pb2.Session(message_count=len(log)))

    async def AppendMessage(self, request: Any, context: Any) -> Any:
        Counting.calls["AppendMessage"] += 1
        log = self.logs[request.session_id]
        log.append(request.message)
        return context_pb2.AppendMessageResponse(index=len(log) - 1, token_count=10)

    async def AppendToolResult(self, request: Any, context: Any) -> Any:
        Counting.calls["AppendToolResult"] += 1
        log = self.logs[request.session_id]
        log.append(
            common_pb2.Message(role=common_pb2.ROLE_TOOL, content=request.result.output.inline, tool_call_id="c1")
        )
        return context_pb2.AppendToolResultResponse(index=len(log) - 1, token_count=5)

    async def BuildContext(self, request: Any, context: Any) -> Any:
        Counting.calls["BuildContext"] += 1
        view = context_pb2.ContextView(messages=self.logs[request.session_id], total_tokens=50, budget_tokens=12000)
        return context_pb2.BuildContextResponse(view=view)


class MinimalTools(tool_pb2_grpc.ToolServiceServicer):
    SPEC = common_pb2.ToolSpec(name="calculator", description="arithmetic", input_schema_json='{"type":"object"}')

    async def DiscoverTools(self, request: Any, context: Any) -> Any:
        Counting.calls["DiscoverTools"] += 1
        return tool_pb2.DiscoverToolsResponse(tools=[tool_pb2.ScoredTool(tool=self.SPEC, score=1)])

    async def ExecuteTool(self, request: Any, context: Any) -> Any:
        Counting.calls["ExecuteTool"] += 1
        result = tool_pb2.ToolResult(tool_call_id=request.call.id, tool_name=request.call.name)
        result.output.inline = "42"
        return tool_pb2.ExecuteToolResponse(result=result)


class MinimalProvider(provider_pb2_grpc.ProviderServiceServicer):
    async def Generate(self, request: Any, context: Any) -> Any:
        Counting.calls["Generate"] += 1
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


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def real_downstream(redis_url: str, tmp: Path) -> tuple[dict[str, int], Callable[[], Awaitable[None]]]:
    """context_svc, tool_svc and provider_svc in process (their own ServiceHosts)."""
    from context_svc.server import SPEC as CONTEXT_SPEC
    from provider_svc.server import SPEC as PROVIDER_SPEC
    from tool_svc.server import SPEC as TOOL_SPEC

    ports = {name: _free_port() for name in ("context", "tool", "provider")}
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


async def _redis_commands(url: str) -> dict[str, int]:
    """Commands Redis has served so far, by name (INFO commandstats)."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


ROUNDS = {1: 5, 32: 2}
"""Tasks and bare round trips are measured in alternating rounds, so a change in the machine's
speed during the run (common on shared machines) weighs on both sides of the ratio alike. Fewer
at 32: each round ramps up to 32 in flight and down again, which a short round would overweigh."""


async def interleaved(
    one_task: Callable[[], Awaitable[None]], *, tasks: int, roundtrips: int, concurrency: int, mode: str
) -> tuple[Stats, Stats]:
    """Stats of `tasks` tasks and of `roundtrips` bare round trips, in alternating rounds (ROUNDS)."""
    rounds = ROUNDS.get(concurrency, 1)
    task_latencies: list[float] = []
    bare_latencies: list[float] = []
    task_s = bare_s = 0.0
    payload = b"x" * 64
    async with BareEchoServer() as server, grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        echo = channel.unary_unary("/bench.Echo/Echo")  # type: ignore[call-arg]

        async def roundtrip() -> None:
            await echo(payload)

        for _ in range(5):
            await one_task()
        for _ in range(20):
            await roundtrip()
        for _ in range(rounds):
            latencies, elapsed = await sample(one_task, calls=tasks // rounds, concurrency=concurrency)
            task_latencies += latencies
            task_s += elapsed
            latencies, elapsed = await sample(roundtrip, calls=roundtrips // rounds, concurrency=concurrency)
            bare_latencies += latencies
            bare_s += elapsed
    return (
        stats_of(f"task ({mode})", concurrency, task_latencies, task_s),
        stats_of("bare gRPC round trip", concurrency, bare_latencies, bare_s),
    )


async def run_mode(mode: str, redis: LocalRedis, tasks: int) -> tuple[list[Stats], dict[str, Any]]:
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-step-{mode}-"))
    if mode == "minimal":
        ports, stop_downstream = await minimal_downstream()
        extra = None
    else:
        ports, stop_downstream = await real_downstream(redis.url, tmp)
        extra = REAL_EXTRA
    settings = base_settings(redis.url, tmp, ports, extra)
    from dispatcher_svc.server import SPEC

    host, stop_dispatcher = await host_service(SPEC, settings)
    token = Authenticator(settings.auth, settings.environment).mint(subject="bench", roles=("operator",))
    metadata = ((IDENTITY_HEADER, token),)
    rows: list[Stats] = []
    facts: dict[str, Any] = {"rpcs_per_task": 11.0}
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{host.port}") as channel:
            stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
            steps_seen: list[int] = []

            async def one_task() -> None:
                start = D.StartTaskRequest(agent_id="calc", goal="what is 40 + 2? use the calculator")
                last = None
                async for reply in stub.RunTask(D.RunTaskRequest(start=start), metadata=metadata, timeout=60):
                    last = reply.event
                assert last is not None and last.status == D.TASK_STATUS_SUCCEEDED, last
                steps_seen.append(last.step)

            Counting.calls.clear()
            before = await _redis_commands(redis.url)
            for _ in range(5):
                await one_task()
            await asyncio.sleep(0.2)  # the answer is recorded in the session just after the final event
            after = await _redis_commands(redis.url)
            used = {name: (after[name] - before.get(name, 0)) / 5 for name in after}
            facts["redis_per_task"] = sum(used.values()) - 1  # minus our own INFO
            facts["redis_detail"] = ", ".join(
                f"{name} {n:g}" for name, n in sorted(used.items(), key=lambda kv: -kv[1]) if n and name != "info"
            )
            # The real services are not counted: they make the same calls (the dispatcher decides them).
            rpcs_per_task = sum(Counting.calls.values()) / 5 if mode == "minimal" else facts["rpcs_per_task"]
            steps = steps_seen[-1]
            facts["steps_per_task"] = steps
            facts["rpcs_per_task"] = rpcs_per_task
            for concurrency in (1, 32):
                n = tasks if concurrency == 1 else tasks * 2
                stats, bare = await interleaved(
                    one_task, tasks=n, roundtrips=max(400, n * 4), concurrency=concurrency, mode=mode
                )
                per_step = Stats(
                    name=f"agent step ({mode})",
                    concurrency=concurrency,
                    calls=stats.calls * steps,
                    p50_ms=stats.p50_ms / steps,
                    p99_ms=stats.p99_ms / steps,
                    mean_ms=stats.mean_ms / steps,
                    throughput_per_s=stats.throughput_per_s * steps,
                )
                rpcs_per_step = (rpcs_per_task + 1) / steps  # + the client's RunTask
                floor = Stats(
                    name=f"{rpcs_per_step:.1f} bare round trips",
                    concurrency=concurrency,
                    calls=bare.calls,
                    p50_ms=bare.p50_ms * rpcs_per_step,
                    p99_ms=bare.p99_ms * rpcs_per_step,
                    mean_ms=bare.mean_ms * rpcs_per_step,
                    throughput_per_s=bare.throughput_per_s / rpcs_per_step,
                )
                rows += [per_step, floor]
                facts[f"ratio_c{concurrency}"] = per_step.p50_ms / floor.p50_ms
                facts[f"bare_p50_c{concurrency}"] = bare.p50_ms
    finally:
        await stop_dispatcher()
        await stop_downstream()
    return rows, facts


async def main(tasks: int, modes: list[str]) -> int:
    logging.getLogger().setLevel(logging.WARNING)
    all_rows: list[Stats] = []
    labels: list[str] = []
    ratios: list[float] = []
    with LocalRedis() as redis:
        for mode in modes:
            began = time.perf_counter()
            rows, facts = await run_mode(mode, redis, tasks)
            all_rows += rows
            print(
                f"[{mode}] {facts['steps_per_task']:.0f} steps/task, "
                f"{facts['rpcs_per_task']:.0f} downstream RPCs/task; "
                f"step/floor p50 ratio: c=1 {facts['ratio_c1']:.2f}x, c=32 {facts['ratio_c32']:.2f}x "
                f"({time.perf_counter() - began:.0f}s)"
            )
            redis_line = f"{facts['redis_per_task']:.1f} ({facts['redis_detail']})"
            print(f"[{mode}] Redis commands per task (all services, incl. those inside Lua scripts): {redis_line}")
            for c in (1, 32):
                labels.append(f"{mode} c={c}")
                ratios.append(facts[f"ratio_c{c}"])
    print()
    print(table(STATS_HEADER, [r.row() for r in all_rows]))
    print("\ntarget: step p50 <= 2x the floor of the same number of bare round trips")
    path = bar_plot(BENCH_DIR / "bench_step.png", "agent step p50 / bare round-trip floor", labels, ratios, "ratio (x)")
    print(f"plot: {path}")
    print(json.dumps({"ratios": dict(zip(labels, ratios, strict=True))}))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100, help="tasks at concurrency 1 (2x that at 32)")
    parser.add_argument("--mode", choices=["minimal", "real", "both"], default="both")
    ns = parser.parse_args()
    chosen = ["minimal", "real"] if ns.mode == "both" else [ns.mode]
    sys.exit(asyncio.run(main(ns.tasks, chosen)))
