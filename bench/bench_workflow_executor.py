"""The workflow executor's own overhead (issue 46, partial `bench_workflow`): a 10-node workflow (a
fan-out of 4, a condition, a join and a chain) whose steps finish at once through an in-memory step
port, on a local redis-server, at 1 and 16 concurrent runs. Prints, per concurrency, the runs' wall
time, the advances (each: acquire, read, plan, start steps, fenced commit) and the wall time per node
(the run's wall time over its nodes: the overhead a node costs, all replicas' CPU and Redis included).
What it leaves out: the steps themselves (no task, no model, no tool), and the comparison with plain
tasks and LangGraph that the issue's bench asks for.

    python -m bench.bench_workflow_executor [--runs 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from typing import Any

from agentmesh.config import RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.store import Store
from agentmesh.workflow_config import WorkflowsSettings
from bench.common import table
from dispatcher_svc.workflows.catalog import definition_from_data
from dispatcher_svc.workflows.executor import Executor, StepRequest, StepResult
from dispatcher_svc.workflows.runs import RunStore
from dispatcher_svc.workflows.state import RunStatus
from dispatcher_svc.workflows.validate import Names, Workflow, compile_workflow

NODES: list[dict[str, Any]] = [
    {"id": "intake", "type": "agent", "agent": "bot", "goal": "{{ input.alert }}"},
    {
        "id": "logs",
        "type": "parallel",
        "after": ["intake"],
        "over": "{{ input.services }}",
        "max_concurrency": 4,
        "do": {"type": "tool", "tool": "logs", "arguments": {"service": "{{ item }}"}},
    },
    {"id": "metrics", "type": "tool", "tool": "metrics", "after": ["intake"], "arguments": {"s": "{{ input.alert }}"}},
    {"id": "evidence", "type": "join", "after": ["logs", "metrics"]},
    {"id": "diagnose", "type": "agent", "agent": "bot", "after": ["evidence"], "goal": "{{ nodes.evidence.output }}"},
    {
        "id": "severe",
        "type": "condition",
        "after": ["diagnose"],
        "when": "nodes.diagnose.output.severe",
        "then": ["page"],
        "else": ["note"],
    },
    {"id": "page", "type": "agent", "agent": "bot", "goal": "page"},
    {"id": "note", "type": "agent", "agent": "bot", "goal": "note"},
    {"id": "done", "type": "join", "mode": "any", "after": ["page", "note"]},
    {"id": "summary", "type": "agent", "agent": "bot", "after": ["done"], "goal": "{{ nodes.diagnose.output }}"},
]


class InstantPort:
    """Every step succeeds as soon as it starts."""

    def __init__(self) -> None:
        self.results: dict[str, StepResult] = {}

    async def start(self, request: StepRequest) -> None:
        self.results[request.step_id] = StepResult({"severe": True, "ok": 1})

    async def result(self, step_id: str) -> StepResult | None:
        return self.results.get(step_id)

    async def cancel(self, step_id: str) -> None:
        return None


def workflow() -> Workflow:
    names = Names(frozenset({"bot"}), frozenset({"logs", "metrics"}))
    return compile_workflow(definition_from_data({"name": "bench", "nodes": NODES}), names, WorkflowsSettings())


async def one_run(executor: Executor, flow: Workflow, run_id: str) -> int:
    await executor.start(run_id, flow, {"alert": "p99 high", "services": ["a", "b", "c", "d"]})
    advances = 0
    while True:
        advances += 1
        if await executor.advance(run_id) != RunStatus.RUNNING:
            return advances


async def measure(store: Store, runs: int, concurrency: int, tag: str) -> list[str]:
    flow = workflow()
    executor = Executor(RunStore(store, ttl_s=600), InstantPort(), owner="bench", limits=WorkflowsSettings())
    gate = asyncio.Semaphore(concurrency)

    async def guarded(index: int) -> int:
        async with gate:
            return await one_run(executor, flow, f"{tag}-{index}")

    started = time.perf_counter()
    advances = await asyncio.gather(*(guarded(i) for i in range(runs)))
    elapsed = time.perf_counter() - started
    nodes = len(NODES) + 3  # the fan-out's 4 items are steps too (the parallel node itself is instant)
    return [
        str(concurrency),
        str(runs),
        f"{elapsed:.2f}",
        f"{sum(advances) / runs:.1f}",
        f"{elapsed * 1e3 / (runs * nodes):.3f}",
        f"{runs / elapsed:.1f}",
    ]


async def main_async(runs: int) -> None:
    for name in [k for k in os.environ if k.startswith("AGENTMESH_")]:
        del os.environ[name]
    with LocalRedis() as redis:
        store = await Store.connect(RedisSettings(url=redis.url), "dev")
        try:
            rows = [await measure(store, runs, c, f"c{c}") for c in (1, 16)]
        finally:
            await store.close()
    print("workflow executor, 10 nodes (13 steps and instant nodes) per run, instant steps, local Redis")
    print(table(["concurrency", "runs", "wall s", "advances/run", "wall ms per node", "runs/s"], rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=32)
    asyncio.run(main_async(parser.parse_args(argv).runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
