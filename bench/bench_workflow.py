"""A 10-node workflow three ways, side by side in one run (issue 46).

The graph (`NODES`): an agent node, then a calculator tool node beside a parallel fan-out of three
calculator calls (cap 3), a join of both, a condition on the calculator's result choosing one of two
agent nodes (the other is skipped), a join (any) of the branches, a last calculator call and a
summarising agent node: 10 nodes, 8 steps run (3 tasks, 5 tool calls), on a scripted model that answers
at once, so everything measured is overhead.
- workflow: the four services as processes on one redis-server (bench_scale's Mesh, one of each), the
  run started by StartWorkflowRun and followed by WatchWorkflowRun to its end. A step's end wakes the
  run's owner at once (dispatcher_svc/workflows/wakes.py); the dispatcher also advances runs every
  `workflows.poll_interval_s` (`--poll-s`; the shipped default is 1 s). A watch wakes on the run's events.
- workflow (poll only), with `--poll-only`: the same on services of their own with `workflows.wake: false`,
  so runs move only at polls (what the workflow was before wakes): the wake's gain, in the same run.
- tasks: the same services, the same 10 nodes driven by a client: each agent node a RunTask (read to
  its final event), each tool node one ExecuteTool on tool_svc (the fan-out's three at once), the
  condition and the joins evaluated in the client: what a user writes without workflows.
- langgraph+sqlite: the same graph as a LangGraph StateGraph (Send for the fan-out, a conditional edge
  for the condition, a waiting edge for the join) with AsyncSqliteSaver on a file (one thread per run),
  in this process, agent nodes calling a fake chat model (GenericFakeChatModel), tool nodes the same
  calculator function (`tool_svc.builtin.calculator.evaluate`).

Rounds alternate the systems, each round c1 (runs one at a time: p50 latency) then c16 (16 at a time:
runs/s). Per-node overhead = a run's latency over its 10 nodes (c1 p50) and, at c16, wall time over
runs x 10 nodes. Beside them: CPU-ms per run (agentmesh: the four services' processes; LangGraph: this
process while only it runs). Medians over rounds; compare the ratios, not the absolute numbers.

Run: `.venv/bin/python -m bench.bench_workflow [--rounds 3] [--c1-runs 10] [--c16-runs 32] [--poll-s 0.05]
[--poll-only]`

The graph and its inputs are `bench.workflow_graph`; the LangGraph arm is `bench.workflow_langgraph`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc.aio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import AuthSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import (
    common_pb2,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
    workflow_pb2,
    workflow_pb2_grpc,
)
from bench.bench_peer import timed
from bench.bench_scale import AUTH_KEY, SERVICES, Mesh
from bench.common import percentile, table
from bench.workflow_graph import NODE_COUNT, NODES, Sample, run_input
from bench.workflow_langgraph import LangGraph

D = dispatcher_pb2
W = workflow_pb2
HIGH = 16
"""The concurrency of the throughput rounds."""


def settings(poll_s: float, wake: bool = True) -> dict[str, Any]:
    return {
        "environment": "dev",
        "server": {"drain_delay_s": 0, "grace_period_s": 1},
        "telemetry": {"log_level": "WARNING"},
        "providers": {
            "default_model": "scripted/wf",
            "backends": [
                {
                    "name": "scripted",
                    "type": "scripted",
                    "rate_limit_per_min": None,
                    "concurrency": 256,
                    "models": [{"name": "wf", "policy": "bench.workflow_graph:policy"}],
                }
            ],
        },
        "tools": {
            "builtins": ["calculator"],
            "rate_limit": {"capacity": 1_000_000, "refill_per_second": 1_000_000},
        },
        "agents": [
            {
                "id": "wf",
                "model": "scripted/wf",
                "tools": [],
                "permissions": ["*:*:read"],
                "max_steps": 2,
                "token_budget": 50_000,
            }
        ],
        "dispatcher": {"max_concurrent_tasks": 256, "call_timeout_s": 30},
        "workflows": {
            "poll_interval_s": poll_s,
            "wake": wake,
            "definitions": [{"name": "bench", "nodes": NODES}],
        },
    }


@dataclass
class System:
    """A system under test: does `n` runs `concurrency` at a time."""

    name: str
    run: Callable[[int, int, str], Awaitable[Sample]]
    c1: list[Sample] = field(default_factory=list)
    chigh: list[Sample] = field(default_factory=list)

    def cpu_ms_per_run(self) -> float:
        samples = (*self.c1, *self.chigh)
        return sum(s.cpu_s for s in samples) / sum(len(s.latencies) for s in samples) * 1000

    def service_ms_per_run(self, service: str) -> float:
        samples = (*self.c1, *self.chigh)
        return sum(s.services.get(service, 0.0) for s in samples) / sum(len(s.latencies) for s in samples) * 1000

    def p50_ms(self) -> float:
        return statistics.median(percentile(s.latencies, 0.5) for s in self.c1) * 1000

    def throughput(self) -> float:
        return statistics.median(len(s.latencies) / s.wall_s for s in self.chigh)

    def node_ms_c1(self) -> float:
        return self.p50_ms() / NODE_COUNT

    def node_ms_high(self) -> float:
        """Wall ms per node at c16: the batch's wall time over its runs' nodes."""
        return 1000 / self.throughput() / NODE_COUNT


class Services:
    """The four services as processes on a redis-server of their own, and clients of them."""

    def __init__(self, workdir: Path, poll_s: float, wake: bool = True) -> None:
        self.redis = LocalRedis()
        self.workdir = workdir
        self.poll_s = poll_s
        self.wake = wake
        self.mesh: Mesh | None = None
        token = Authenticator(AuthSettings(key=AUTH_KEY), "dev").mint(
            subject="bench", roles=("operator",), agent_id="bench", permissions=("*:*:*",)
        )
        self.metadata = ((IDENTITY_HEADER, token),)
        self.counter = itertools.count()

    def start(self) -> None:
        url = self.redis.__enter__().url
        tag = "wf-" if self.wake else "wfpoll-"
        self.mesh = Mesh(1, url, self.workdir, "", settings=settings(self.poll_s, self.wake), tag=tag)
        self.mesh.start()

    def stop(self) -> None:
        if self.mesh is not None:
            self.mesh.stop()
        self.redis.__exit__(None, None, None)

    async def measure(self, one: Callable[[int], Awaitable[None]], n: int, concurrency: int) -> Sample:
        assert self.mesh is not None
        before = self.mesh.cpu()
        latencies, wall = await timed(one, n, concurrency)
        after = self.mesh.cpu()
        spent = {service: after[service] - before[service] for service in SERVICES}
        return Sample(latencies, wall, sum(spent.values()), spent)

    async def workflow(self, n: int, concurrency: int, tag: str) -> Sample:
        """Runs through StartWorkflowRun, each followed by WatchWorkflowRun to its end."""
        assert self.mesh is not None
        failed: list[str] = []
        async with grpc.aio.insecure_channel(self.mesh.dispatcher_targets()[0]) as channel:
            stub = workflow_pb2_grpc.WorkflowServiceStub(channel)  # type: ignore[no-untyped-call]

            async def one(i: int) -> None:
                run_id = f"{tag}-{i}-{next(self.counter)}"
                start = W.StartWorkflowRunRequest(workflow="bench", run_id=run_id, input_json=json.dumps(run_input(i)))
                await stub.StartWorkflowRun(start, metadata=self.metadata, timeout=60)
                status = W.WORKFLOW_RUN_STATUS_UNSPECIFIED
                watch = stub.WatchWorkflowRun(
                    W.WatchWorkflowRunRequest(run_id=run_id), metadata=self.metadata, timeout=300
                )
                async for reply in watch:
                    if reply.event.run_status != W.WORKFLOW_RUN_STATUS_UNSPECIFIED:
                        status = reply.event.run_status
                if status != W.WORKFLOW_RUN_STATUS_SUCCEEDED:
                    failed.append(f"{run_id}: {W.WorkflowRunStatus.Name(status)}")

            sample = await self.measure(one, n, concurrency)
        if failed:
            raise RuntimeError(f"workflow: {len(failed)} of {n} runs failed, e.g. {failed[0]}; see {self.workdir}")
        return sample

    async def tasks(self, n: int, concurrency: int, tag: str) -> Sample:
        """The same nodes driven by a client: RunTask per agent node, ExecuteTool per tool node."""
        assert self.mesh is not None
        failed: list[str] = []
        async with (
            grpc.aio.insecure_channel(self.mesh.dispatcher_targets()[0]) as dchannel,
            grpc.aio.insecure_channel(f"127.0.0.1:{self.mesh.ports['tool']}") as tchannel,
        ):
            dispatcher = dispatcher_pb2_grpc.DispatcherServiceStub(dchannel)  # type: ignore[no-untyped-call]
            tools = tool_pb2_grpc.ToolServiceStub(tchannel)  # type: ignore[no-untyped-call]

            async def agent(goal: str) -> str:
                call = dispatcher.RunTask(
                    D.RunTaskRequest(start=D.StartTaskRequest(agent_id="wf", goal=goal)),
                    metadata=self.metadata,
                    timeout=60,
                )
                last = None
                async for reply in call:
                    last = reply.event
                if last is None or last.status != D.TASK_STATUS_SUCCEEDED:
                    raise RuntimeError(f"task: {last}")
                return str(last.message)

            async def calculator(run_id: str, node: str, expression: str) -> Any:
                request = tool_pb2.ExecuteToolRequest(
                    call=common_pb2.ToolCall(
                        id=node, name="calculator", arguments_json=json.dumps({"expression": expression})
                    ),
                    session_id=run_id,
                    idempotency_key=f"{run_id}.{node}",
                )
                reply = await tools.ExecuteTool(request, metadata=self.metadata, timeout=60)
                if reply.result.WhichOneof("outcome") != "output":
                    raise RuntimeError(f"tool: {reply}")
                return json.loads(reply.result.output.inline)

            async def one(i: int) -> None:
                run_id = f"{tag}-{i}-{next(self.counter)}"
                data = run_input(i)
                try:
                    await agent(f"classify: {data['question']}")
                    total, *_ = await asyncio.gather(
                        calculator(run_id, "total", data["expression"]),
                        *(calculator(run_id, f"parts.{k}", p) for k, p in enumerate(data["parts"])),
                    )
                    branch = "explain in detail" if float(total["result"]) > 100.0 else "explain briefly"
                    await agent(f"{branch}: {json.dumps(total)}")
                    check = await calculator(run_id, "check", f"{data['expression']} - 1")
                    await agent(f"sum up: {json.dumps(check)}")
                except (RuntimeError, grpc.aio.AioRpcError) as exc:
                    failed.append(str(exc)[:300])

            sample = await self.measure(one, n, concurrency)
        if failed:
            raise RuntimeError(f"tasks: {len(failed)} of {n} runs failed, e.g. {failed[0]}; see {self.workdir}")
        return sample


async def bench(args: argparse.Namespace, workdir: Path) -> list[System]:
    services = Services(workdir, args.poll_s)
    polled = Services(workdir, args.poll_s, wake=False) if args.poll_only else None
    graph = LangGraph(workdir)
    try:
        await asyncio.to_thread(services.start)
        if polled is not None:
            await asyncio.to_thread(polled.start)
        await graph.start()
        systems = [
            System("workflow", services.workflow),
            System("tasks", services.tasks),
            System("langgraph+sqlite", graph.run),
        ]
        if polled is not None:
            systems.append(System("workflow (poll only)", polled.workflow))
        for system in systems if args.warmup > 0 else ():  # warm-up: imports, connections, scripts loaded
            await system.run(args.warmup, min(args.warmup, 4), "warm")
        for r in range(args.rounds):
            order = systems[r % len(systems) :] + systems[: r % len(systems)]
            for system in order:
                system.c1.append(await system.run(args.c1_runs, 1, f"r{r}c1"))
            for system in order:
                system.chigh.append(await system.run(args.c16_runs, HIGH, f"r{r}c{HIGH}"))
        return systems
    finally:
        await graph.stop()
        services.stop()
        if polled is not None:
            polled.stop()


def report(args: argparse.Namespace, systems: list[System]) -> str:
    lines = [
        f"bench_workflow: {NODE_COUNT} nodes (3 tasks, 5 tool calls, 1 condition, 2 joins) on a scripted model; "
        f"{args.rounds} alternating rounds of {args.c1_runs} runs at c1 and {args.c16_runs} at c{HIGH}; "
        f"workflows.poll_interval_s {args.poll_s}; {os.cpu_count()} cores shared (compare ratios)"
    ]
    header = [
        "system",
        "c1 p50 ms/run",
        "c1 ms/node",
        f"c{HIGH} runs/s",
        f"c{HIGH} ms/node",
        "CPU ms/run",
    ]
    body = [
        [
            s.name,
            f"{s.p50_ms():.1f}",
            f"{s.node_ms_c1():.2f}",
            f"{s.throughput():.2f}",
            f"{s.node_ms_high():.2f}",
            f"{s.cpu_ms_per_run():.1f}",
        ]
        for s in systems
    ]
    lines.append(table(header, body))
    lines.append(
        "agentmesh CPU-ms per run by service: "
        + "; ".join(
            f"{s.name}: " + ", ".join(f"{v} {s.service_ms_per_run(v):.1f}" for v in SERVICES)
            for s in systems
            if s.c1 and s.c1[0].services
        )
    )
    flow = systems[0]
    for other in systems[1:]:
        lines.append(
            f"workflow / {other.name}: c1 ms/node {flow.node_ms_c1() / other.node_ms_c1():.2f}x, "
            f"c{HIGH} runs/s {flow.throughput() / other.throughput():.2f}x, "
            f"CPU per run {flow.cpu_ms_per_run() / other.cpu_ms_per_run():.2f}x"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_workflow", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--c1-runs", type=int, default=10)
    parser.add_argument("--c16-runs", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--poll-s", type=float, default=0.05, help="workflows.poll_interval_s (shipped default 1.0)")
    parser.add_argument(
        "--poll-only",
        action="store_true",
        help="also run the workflow with workflows.wake false (runs move at polls only), on services of its own",
    )
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="agentmesh-bench-workflow-"))
    systems = asyncio.run(bench(args, workdir))  # on failure the services' logs stay in workdir
    shutil.rmtree(workdir, ignore_errors=True)
    print(report(args, systems))
    return 0


if __name__ == "__main__":
    sys.exit(main())
