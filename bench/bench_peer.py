"""One small task through agentmesh and through LangGraph, side by side in one run (issue 45).

The task: the model asks the calculator for an expression, the calculator answers, the model answers
with the value (model -> calculator -> model -> answer), on a scripted model that answers at once.
- agentmesh: the four services as processes on one redis-server (bench_scale's Mesh, one of each),
  the task sent by RunTask (its stream read to the final event); the calculator is the built-in one.
- LangGraph + its SQLite checkpointer (AsyncSqliteSaver on a file, one thread per task): a
  StateGraph model -> ToolNode -> model in this process, what a user would pick instead; the same
  calculator function (`tool_svc.builtin.calculator.evaluate`) called in-process.

Rounds alternate the systems (and `--before`, a second checkout of agentmesh, e.g. the commit before a
change: `git worktree add /tmp/base <commit>`), each round c1 (tasks one at a time: p50 latency) then
c32 (32 at a time: tasks/s). Beside them, over every measured task: CPU-ms per task (agentmesh: the
four services' processes; LangGraph: this process while only it runs), Redis main-thread CPU-ms and
Redis commands per task (INFO; Lua scripts' own commands included, as Redis counts them).
The figures are medians over rounds; compare the ratios, not the absolute numbers (a shared machine).
`--skeleton` adds the task's bare shape to the alternation (bench/peer_skeleton.py): four plain grpc.aio
processes making the same calls, events and Redis round trips with no code of ours, and the same with our
RPC edge: the floor of this design, and how much of agentmesh's cost is the edge and how much the services.

Run: `.venv/bin/python -m bench.bench_peer [--rounds 3] [--c1-tasks 30] [--c32-tasks 128] [--before DIR]
[--skeleton]`
(`make bench-peer`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc.aio
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import AuthSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from bench.bench_scale import AUTH_KEY, REPO, SERVICES, Mesh, RedisSnapshot
from bench.common import percentile, table
from bench.peer_skeleton import Skeleton
from provider_svc.models.base import Role
from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest, ScriptedToolCall
from tool_svc.builtin.calculator import evaluate

D = dispatcher_pb2
HIGH = 32
"""The concurrency of the throughput rounds."""
SKELETON = "skeleton (floor)"
SKELETON_EDGE = "skeleton + our edge"


def expression_of(goal: str) -> str:
    """The arithmetic a goal asks for: `what is 12 * 7 + 3` -> `12 * 7 + 3`."""
    return goal.removeprefix("what is ").strip()


def policy(req: ScriptedRequest) -> ScriptedReply:
    """Step 1 asks the calculator; step 2 answers with what it said."""
    results = [m for m in req.messages if m.role == Role.TOOL]
    if not results:
        args = json.dumps({"expression": expression_of(req.goal)})
        return ScriptedReply(tool_calls=(ScriptedToolCall("calculator", args),))
    return ScriptedReply(text=f"ANSWER {results[-1].content[:80]}")


def settings(*, pack_events: bool | None = None) -> dict[str, Any]:
    """The services' configuration; `pack_events` (dispatcher.pack_events, issue 45; None: the checkout's
    default) only for a checkout that knows the setting (not a `--before` one from before it)."""
    return {
        "environment": "dev",
        "server": {"drain_delay_s": 0, "grace_period_s": 1},
        "telemetry": {"log_level": "WARNING"},
        "providers": {
            "default_model": "scripted/peer",
            "backends": [
                {
                    "name": "scripted",
                    "type": "scripted",
                    "rate_limit_per_min": None,
                    "concurrency": 256,
                    "models": [{"name": "peer", "policy": "bench.bench_peer:policy"}],
                }
            ],
        },
        "tools": {
            "builtins": ["calculator"],
            "rate_limit": {"capacity": 1_000_000, "refill_per_second": 1_000_000},
        },
        "agents": [
            {
                "id": "peer",
                "model": "scripted/peer",
                "tools": ["calculator"],
                "permissions": ["*:*:read"],
                "max_steps": 4,
                "token_budget": 50_000,
            }
        ],
        "dispatcher": {
            "max_concurrent_tasks": 256,
            "call_timeout_s": 30,
            **({} if pack_events is None else {"pack_events": pack_events}),
        },
    }


def goal(i: int) -> str:
    return f"what is {i % 97 + 3} * {i % 13 + 2} + {i}"


@dataclass
class Sample:
    """One batch of tasks: each task's seconds, the batch's wall seconds, and its costs."""

    latencies: list[float]
    wall_s: float
    cpu_s: float
    redis_cpu_s: float = 0.0
    commands: int = 0
    services: dict[str, float] = field(default_factory=dict)
    """agentmesh: CPU seconds of each service."""


@dataclass
class System:
    """A system under test: runs `n` tasks `concurrency` at a time and says what they cost."""

    name: str
    run: Callable[[int, int, str], Awaitable[Sample]]
    c1: list[Sample] = field(default_factory=list)
    c32: list[Sample] = field(default_factory=list)

    def tasks(self) -> int:
        return sum(len(s.latencies) for s in (*self.c1, *self.c32))

    def per_task(self, attr: str) -> float:
        return float(sum(getattr(s, attr) for s in (*self.c1, *self.c32))) / self.tasks()

    def service_ms(self, service: str) -> float:
        """CPU-ms per task of one agentmesh service."""
        return sum(s.services.get(service, 0.0) for s in (*self.c1, *self.c32)) / self.tasks() * 1000

    def p50_ms(self) -> float:
        return statistics.median(percentile(s.latencies, 0.5) for s in self.c1) * 1000

    def throughput(self) -> float:
        return statistics.median(len(s.latencies) / s.wall_s for s in self.c32)


async def timed(one: Callable[[int], Awaitable[None]], n: int, concurrency: int) -> tuple[list[float], float]:
    limit = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def task(i: int) -> None:
        async with limit:
            began = time.perf_counter()
            await one(i)
            latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(task(i) for i in range(n)))
    return latencies, time.perf_counter() - began


class Agentmesh:
    """The services as processes on a redis-server of their own (from `repo`)."""

    def __init__(self, repo: Path, workdir: Path, tag: str, *, pack_events: bool | None = None) -> None:
        self.redis = LocalRedis()
        self.pack_events = pack_events
        self.repo = repo
        self.workdir = workdir
        self.tag = tag
        self.mesh: Mesh | None = None
        self.client: redis.Redis | None = None
        self.token = Authenticator(AuthSettings(key=AUTH_KEY), "dev").mint(subject="bench", roles=("operator",))
        self.channel: grpc.aio.Channel | None = None

    def start(self) -> None:
        url = self.redis.__enter__().url
        self.client = redis.Redis.from_url(url)
        self.mesh = Mesh(
            1, url, self.workdir, "", settings=settings(pack_events=self.pack_events), repo=self.repo, tag=self.tag
        )
        self.mesh.start()

    def stop(self) -> None:
        if self.mesh is not None:
            self.mesh.stop()
        if self.client is not None:
            self.client.close()
        self.redis.__exit__(None, None, None)

    async def run(self, n: int, concurrency: int, tag: str) -> Sample:
        assert self.mesh is not None and self.client is not None
        channel = grpc.aio.insecure_channel(self.mesh.dispatcher_targets()[0])
        stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]
        failed: list[str] = []

        async def one(i: int) -> None:
            start = D.StartTaskRequest(agent_id="peer", goal=goal(i))
            call = stub.RunTask(D.RunTaskRequest(start=start), metadata=((IDENTITY_HEADER, self.token),), timeout=120)
            last = None
            async for reply in call:
                last = reply.event
            if last is None or last.status != D.TASK_STATUS_SUCCEEDED:
                failed.append(str(last))

        try:
            cpu_before, redis_before = self.mesh.cpu(), RedisSnapshot.take(self.client)
            latencies, wall = await timed(one, n, concurrency)
            cpu_after, redis_after = self.mesh.cpu(), RedisSnapshot.take(self.client)
        finally:
            await channel.close(None)
        if failed:
            raise RuntimeError(f"{self.tag}: {len(failed)} of {n} tasks failed, e.g. {failed[0]}; see {self.workdir}")
        spent = redis_after.minus(redis_before)
        return Sample(
            latencies,
            wall,
            sum(cpu_after.values()) - sum(cpu_before.values()),
            spent.cpu_main_s,
            sum(spent.commands.values()) - 3,  # less our own INFO commands
            {s: cpu_after[s] - cpu_before[s] for s in SERVICES},
        )


class LangGraph:
    """A StateGraph model -> tools -> model with AsyncSqliteSaver, in this process."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "langgraph.sqlite"
        self.graph: Any = None
        self.saver_cm: Any = None

    async def start(self) -> None:
        from langchain_core.messages import AIMessage, ToolMessage
        from langchain_core.tools import tool
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition

        @tool
        def calculator(expression: str) -> str:
            """Evaluates an arithmetic expression exactly."""
            return json.dumps({"value": evaluate(expression)})

        async def model(state: MessagesState) -> dict[str, Any]:
            messages = state["messages"]
            results = [m for m in messages if isinstance(m, ToolMessage)]
            if not results:
                expression = expression_of(str(messages[0].content))
                call = {"name": "calculator", "args": {"expression": expression}, "id": f"call_{len(messages)}"}
                return {"messages": [AIMessage(content="", tool_calls=[call])]}
            return {"messages": [AIMessage(content=f"ANSWER {str(results[-1].content)[:80]}")]}

        builder = StateGraph(MessagesState)
        builder.add_node("model", model)
        builder.add_node("tools", ToolNode([calculator]))
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", tools_condition)
        builder.add_edge("tools", "model")
        builder.add_edge("model", END)
        self.saver_cm = AsyncSqliteSaver.from_conn_string(str(self.path))
        saver = await self.saver_cm.__aenter__()
        self.graph = builder.compile(checkpointer=saver)

    async def stop(self) -> None:
        if self.saver_cm is not None:
            await self.saver_cm.__aexit__(None, None, None)

    async def run(self, n: int, concurrency: int, tag: str) -> Sample:
        failed: list[str] = []

        async def one(i: int) -> None:
            config = {"configurable": {"thread_id": f"{tag}-{i}"}}
            out = await self.graph.ainvoke({"messages": [("user", goal(i))]}, config)
            answer = str(out["messages"][-1].content)
            if not answer.startswith("ANSWER"):
                failed.append(answer)

        before = resource.getrusage(resource.RUSAGE_SELF)
        latencies, wall = await timed(one, n, concurrency)
        after = resource.getrusage(resource.RUSAGE_SELF)
        if failed:
            raise RuntimeError(f"langgraph: {len(failed)} of {n} tasks failed, e.g. {failed[0]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return Sample(latencies, wall, cpu)


async def bench(args: argparse.Namespace, workdir: Path) -> list[System]:
    meshes = [Agentmesh(REPO, workdir, "after-" if args.before else "", pack_events=args.pack_events)]
    if args.before:
        meshes.append(Agentmesh(Path(args.before), workdir, "before-"))
    graph = LangGraph(workdir)
    skeleton_redis = LocalRedis() if args.skeleton else None
    url = skeleton_redis.__enter__().url if skeleton_redis else ""
    skeletons = [Skeleton(url, workdir), Skeleton(url, workdir, edge=True)] if skeleton_redis else []
    try:
        # Started at once: in A/A runs (the same checkout on both sides) the mesh started first used 3-6 % more
        # CPU per task than the other, whichever checkout it ran (2026-12-07: bench/RESULTS.md, "Eleventh").
        # Both starts end before any failure is raised: the `finally` below then stops every process they made.
        started = await asyncio.gather(*(asyncio.to_thread(mesh.start) for mesh in meshes), return_exceptions=True)
        if failed := next((r for r in started if isinstance(r, BaseException)), None):
            raise failed
        await graph.start()
        systems = [System("agentmesh", meshes[0].run)]
        if args.before:
            systems.append(System("agentmesh (before)", meshes[1].run))
        for skeleton in skeletons:
            skeleton.start()
            await skeleton.ready()
            systems.append(System(SKELETON_EDGE if skeleton.edge else SKELETON, skeleton.sample))
        systems.append(System("langgraph+sqlite", graph.run))
        for system in systems:  # warm-up: imports, connections, scripts loaded
            await system.run(8, 4, "warm")
        for r in range(args.rounds):
            order = systems[r % len(systems) :] + systems[: r % len(systems)]
            for system in order:
                system.c1.append(await system.run(args.c1_tasks, 1, f"r{r}c1"))
            for system in order:
                system.c32.append(await system.run(args.c32_tasks, HIGH, f"r{r}c{HIGH}"))
        return systems
    finally:
        await graph.stop()
        for mesh in meshes:
            mesh.stop()
        for skeleton in skeletons:
            skeleton.stop()
        if skeleton_redis is not None:
            skeleton_redis.__exit__(None, None, None)


def add_no_pack_events(parser: argparse.ArgumentParser, which: str) -> None:
    """`--no-pack-events`: dispatcher.pack_events off (on by default since issue 45); `args.pack_events` is
    then False, else None (the checkout's default)."""
    parser.add_argument(
        "--no-pack-events",
        dest="pack_events",
        action="store_const",
        const=False,
        default=None,
        help=f"dispatcher.pack_events off ({which})",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_peer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--c1-tasks", type=int, default=30)
    parser.add_argument("--c32-tasks", type=int, default=128)
    parser.add_argument("--before", default="", help="a second agentmesh checkout to run alternately")
    add_no_pack_events(parser, "this checkout, not --before's")
    parser.add_argument("--skeleton", action="store_true", help="also the task's bare shape (bench/peer_skeleton.py)")
    args = parser.parse_args(argv)
    if args.before:
        args.before = str(Path(args.before).resolve())
        # The baseline's provider loads this bench's policy: it must find this module in its checkout.
        if not (Path(args.before) / "bench" / "bench_peer.py").exists():
            shutil.copy(Path(__file__), Path(args.before) / "bench" / "bench_peer.py")
    workdir = Path(tempfile.mkdtemp(prefix="agentmesh-bench-peer-"))
    systems = asyncio.run(bench(args, workdir))  # on failure the services' logs stay in workdir
    shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"bench_peer: model -> calculator -> model -> answer on a scripted model; {args.rounds} alternating "
        f"rounds of {args.c1_tasks} tasks at c1 and {args.c32_tasks} at c{HIGH}; {os.cpu_count()} cores shared "
        "(compare ratios)"
    )
    header = ["system", "c1 p50 ms", f"c{HIGH} tasks/s", "CPU ms/task", "Redis ms/task", "Redis cmds/task"]
    body = []
    for s in systems:
        redis_cells = ["-", "-"]
        if s.name.startswith("agentmesh"):
            redis_cells = [f"{s.per_task('redis_cpu_s') * 1000:.2f}", f"{s.per_task('commands'):.1f}"]
        body.append(
            [s.name, f"{s.p50_ms():.1f}", f"{s.throughput():.1f}", f"{s.per_task('cpu_s') * 1000:.1f}", *redis_cells]
        )
    print(table(header, body))
    meshes = [s for s in systems if s.name.startswith("agentmesh")]
    print(
        "agentmesh CPU-ms per task by service: "
        + "; ".join(f"{s.name}: " + ", ".join(f"{v} {s.service_ms(v):.1f}" for v in SERVICES) for s in meshes)
    )
    mesh, peer = systems[0], systems[-1]
    print(
        f"agentmesh / langgraph: c1 p50 {mesh.p50_ms() / peer.p50_ms():.2f}x (target <= 2.5x), "
        f"c{HIGH} tasks/s {mesh.throughput() / peer.throughput():.2f}x (target >= 0.8x), "
        f"CPU per task {mesh.per_task('cpu_s') / peer.per_task('cpu_s'):.2f}x"
    )
    for skeleton in (s for s in systems if s.name in (SKELETON, SKELETON_EDGE)):
        print(
            f"{skeleton.name} / langgraph: c1 p50 {skeleton.p50_ms() / peer.p50_ms():.2f}x, "
            f"c{HIGH} tasks/s {skeleton.throughput() / peer.throughput():.2f}x, "
            f"CPU per task {skeleton.per_task('cpu_s') / peer.per_task('cpu_s'):.2f}x; agentmesh / it: "
            f"c1 p50 {mesh.p50_ms() / skeleton.p50_ms():.2f}x, CPU per task "
            f"{mesh.per_task('cpu_s') / skeleton.per_task('cpu_s'):.2f}x"
        )
    if args.before:
        old = systems[1]
        print(
            f"agentmesh after / before: c1 p50 {mesh.p50_ms() / old.p50_ms():.2f}x, "
            f"c{HIGH} tasks/s {mesh.throughput() / old.throughput():.2f}x, "
            f"CPU per task {mesh.per_task('cpu_s') / old.per_task('cpu_s'):.2f}x, "
            f"Redis cmds per task {mesh.per_task('commands') / old.per_task('commands'):.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
