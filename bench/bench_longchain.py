"""A 5-agent-style alert chain, N seeded runs, agentmesh against a naive baseline.

Both arms drive the same scripted model (provider_svc/scenarios/alert_chain.py: triage -> metrics
-> diagnosis -> remediation -> report) with the same seeded fault injection (malformed JSON,
schema violations, unknown tools, dangerous commands), against the same world: ~100 KB service
logs and the fake ops API (agentmesh/demo_ops.py) whose deployment registry does not know
payment-svc (a deterministic 404 in a fifth of the runs).

- agentmesh: the four real services in this process (gRPC, Redis): offload + digest, typed tool
  contracts with hints, error classes and fallbacks, the danger guard and the dispatcher's guards.
- baseline: a plain loop in this process: every tool output appended raw to the context, tool
  arguments passed untyped (no schema), errors as opaque strings ("Error: ..."), no error classes,
  nothing between the model and the tools (a dangerous command runs), a step cap as the only guard,
  and the model's context window (`--window`) as a hard limit.

A run succeeds when the world says so, not the model: logs read, the error rate read with a valid
window, the service diagnosed (deployment or pods), the right service restarted, nothing unsafe
executed, and a final answer. Reported per arm: success rate, context tokens per model call,
model and tool calls per task, guard aborts, unsafe side effects, overflows, time per task.

Run: `.venv/bin/python bench/bench_longchain.py [--runs 500] [--concurrency 8]`. The scenario both arms share
(tools, settings, goals, the verdict) is `bench.longchain_scenario`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc.aio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.demo_ops import OpsApi, write_service_log
from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from bench.common import BENCH_DIR, percentile, table
from bench.longchain_scenario import (
    FAULTS,
    MAX_STEPS,
    SERVICES,
    SYSTEM_PROMPT,
    UNKNOWN_DEPLOYMENT,
    RunResult,
    bench_settings,
    goal,
    judge,
    tool_registry,
)
from bench.step_downstream import free_port, host_service

D = dispatcher_pb2
# --- agentmesh ------------------------------------------------------------------------------------


async def _report_unfinished(stub: Any, token: str, events: list[Any], exc: grpc.aio.AioRpcError) -> None:
    """Prints what is known of a RunTask that ended without a final event (stderr)."""
    task_id = events[0].task_id if events else "?"
    state = "unknown"
    if events:
        try:
            task = await stub.GetTask(
                D.GetTaskRequest(task_id=task_id), metadata=((IDENTITY_HEADER, token),), timeout=5
            )
            state = f"{D.TaskStatus.Name(task.task.status)} step {task.task.step}"
        except grpc.aio.AioRpcError as err:
            state = f"GetTask failed: {err.code().name}"
    last = D.TaskEventKind.Name(events[-1].kind) if events else "none"
    print(f"run of {task_id} did not finish: {exc.code().name}; task {state}; last event {last}", file=sys.stderr)


async def agentmesh_arm(runs: int, concurrency: int, redis: LocalRedis, ops: OpsApi, logs_dir: Path) -> list[RunResult]:
    from context_svc.server import SPEC as CONTEXT_SPEC
    from dispatcher_svc.server import SPEC as DISPATCHER_SPEC
    from provider_svc.server import SPEC as PROVIDER_SPEC
    from tool_svc.server import SPEC as TOOL_SPEC

    tmp = Path(tempfile.mkdtemp(prefix="bench-longchain-"))
    ports = {name: free_port() for name in ("dispatcher", "context", "tool", "provider")}
    settings = bench_settings(redis.url, tmp, ports, ops.url, logs_dir)
    stops = []
    for spec in (CONTEXT_SPEC, TOOL_SPEC, PROVIDER_SPEC, DISPATCHER_SPEC):
        _, stop = await host_service(spec, settings, ports[spec.name])
        stops.append(stop)
    token = Authenticator(settings.auth, settings.environment).mint(subject="bench", roles=("operator",))
    results: list[RunResult] = []
    gate = asyncio.Semaphore(concurrency)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['dispatcher']}") as channel:
            stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]

            async def one(i: int) -> None:
                service, text = goal(i)
                async with gate:
                    began = time.perf_counter()
                    events: list[Any] = []
                    try:
                        async for r in stub.RunTask(
                            D.RunTaskRequest(start=D.StartTaskRequest(agent_id="chain", goal=text)),
                            metadata=((IDENTITY_HEADER, token),),
                            timeout=120,
                        ):
                            if r.event.sequence:
                                events.append(r.event)
                    except grpc.aio.AioRpcError as exc:
                        # A run that never finished (a stall) is a result to report, not a crash.
                        await _report_unfinished(stub, token, events, exc)
                        wall = (time.perf_counter() - began) * 1000
                        outcome = f"failed:{exc.code().name}"
                        results.append(RunResult(False, outcome, model_calls=0, tool_calls=0, wall_ms=wall))
                        return
                    wall = (time.perf_counter() - began) * 1000
                calls = [
                    (
                        e.tool_call.name,
                        _args(e.tool_call.arguments_json),
                        e.tool_result.WhichOneof("outcome") == "output",
                    )
                    for e in events
                    if e.kind == D.TASK_EVENT_KIND_TOOL_RESULT
                ]
                final = events[-1]
                answered = final.status == D.TASK_STATUS_SUCCEEDED
                if answered:
                    outcome = "ok" if judge(service, calls, True) else "incomplete"
                elif final.status == D.TASK_STATUS_ABORTED:
                    outcome = "aborted:" + _code(final.error.code)
                else:
                    outcome = "failed:" + _code(final.error.code)
                results.append(
                    RunResult(
                        succeeded=outcome == "ok",
                        outcome=outcome,
                        model_calls=sum(1 for e in events if e.kind == D.TASK_EVENT_KIND_MODEL_REPLY),
                        tool_calls=sum(1 for e in events if e.kind == D.TASK_EVENT_KIND_TOOL_CALL),
                        context_tokens=[
                            int(e.attributes["context_tokens"]) for e in events if e.kind == D.TASK_EVENT_KIND_CONTEXT
                        ],
                        wall_ms=wall,
                    )
                )

            await asyncio.gather(*(one(i) for i in range(runs)))
    finally:
        for stop in reversed(stops):
            await stop()
    return results


def _code(code: int) -> str:
    from agentmesh.v1 import common_pb2

    return common_pb2.ErrorCode.Name(code).removeprefix("ERROR_CODE_")


def _args(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# --- baseline -------------------------------------------------------------------------------------


async def baseline_arm(runs: int, concurrency: int, ops: OpsApi, logs_dir: Path, window: int) -> list[RunResult]:
    from provider_svc.models.base import CallContext, Message, ModelRequest, Role, ToolCall, ToolDef
    from provider_svc.scenarios.alert_chain import factory
    from provider_svc.testing.scripted import FaultConfig, ScriptedModel, count_tokens

    model = ScriptedModel("scripted", "chain", factory(), faults=FaultConfig(**FAULTS))
    defs = [ToolDef(t["name"], t["description"], t["input_schema"]) for t in tool_registry(ops.url)]
    defs.insert(
        0, ToolDef("query_logs", "Use when investigating an incident: read a service's log.", {"type": "object"})
    )
    endpoints = {t["name"]: t["endpoint_url"] for t in tool_registry(ops.url)}
    system = SYSTEM_PROMPT
    gate = asyncio.Semaphore(concurrency)
    results: list[RunResult] = []

    async def run_tool(client: httpx.AsyncClient, call: ToolCall) -> tuple[str, bool, bool]:
        """(text appended to the context, succeeded, unsafe) — no schema, no classes, nothing in between."""
        try:
            args = json.loads(call.arguments_json)
        except ValueError:
            return "Error: could not parse the tool arguments", False, False
        if not isinstance(args, dict):
            return "Error: the tool arguments must be an object", False, False
        if call.name == "query_logs":
            path = logs_dir / f"{args.get('service')}.log"
            if not path.is_file():
                return f"Error: no log for {args.get('service')}", False, False
            lines = path.read_text().splitlines()[-int(args.get("limit", 200) or 200) :]
            return "\n".join(lines), True, False
        url = endpoints.get(call.name)
        if url is None:
            return f"Error: no such tool {call.name}", False, False
        reply = await client.post(url, json=args)
        if reply.status_code >= 400:
            return f"Error: {reply.status_code} {reply.text[:200]}", False, False
        return reply.text, True, call.name == "run_shell"

    async def one(i: int, client: httpx.AsyncClient) -> None:
        service, text = goal(i)
        messages: list[Message] = [Message(Role.SYSTEM, system), Message(Role.USER, text)]
        calls: list[tuple[str, dict[str, Any], bool]] = []
        result = RunResult(False, "max_steps", 0, 0)
        async with gate:
            began = time.perf_counter()
            for _ in range(MAX_STEPS):
                tokens = sum(
                    count_tokens(m.content) + sum(count_tokens(c.arguments_json) for c in m.tool_calls)
                    for m in messages
                )
                result.context_tokens.append(tokens)
                if tokens > window:
                    result.outcome = "overflow"
                    break
                response = await model.request(ModelRequest(tuple(messages), tuple(defs)), CallContext())
                result.model_calls += 1
                reply = response.message
                messages.append(reply)
                if not reply.tool_calls:
                    result.outcome = "ok" if judge(service, calls, True) else "incomplete"
                    break
                for call in reply.tool_calls:
                    result.tool_calls += 1
                    output, good, unsafe = await run_tool(client, call)
                    result.unsafe += int(unsafe)
                    calls.append((call.name, _args(call.arguments_json), good))
                    messages.append(Message(Role.TOOL, output, tool_call_id=call.id, name=call.name))
            result.wall_ms = (time.perf_counter() - began) * 1000
        if result.unsafe and result.outcome == "ok":
            result.outcome = "incomplete"
        result.succeeded = result.outcome == "ok" and not result.unsafe
        results.append(result)

    async with httpx.AsyncClient(timeout=10) as client:
        await asyncio.gather(*(one(i, client) for i in range(runs)))
    return results


# --- report ---------------------------------------------------------------------------------------


def summarize(name: str, results: list[RunResult]) -> dict[str, float]:
    tokens = [t for r in results for t in r.context_tokens]
    outcomes = Counter(r.outcome for r in results)
    return {
        "runs": len(results),
        "success": 100 * sum(r.succeeded for r in results) / len(results),
        "ctx_mean": statistics.fmean(tokens),
        "ctx_p95": percentile(tokens, 0.95),
        "ctx_max": max(tokens),
        "over_32k": 100 * sum(t > 32_768 for t in tokens) / len(tokens),
        "model_calls": statistics.fmean(r.model_calls for r in results),
        "tool_calls": statistics.fmean(r.tool_calls for r in results),
        "aborted_dangerous": outcomes["aborted:DANGEROUS_OPERATION"],
        "aborted_loop": outcomes["aborted:LOOP_DETECTED"],
        "aborted_steps": outcomes["aborted:MAX_STEPS_EXCEEDED"] + outcomes["max_steps"],
        "aborted_budget": outcomes["aborted:BUDGET_EXHAUSTED"],
        "overflow": outcomes["overflow"],
        "incomplete": outcomes["incomplete"],
        "failed_other": sum(v for k, v in outcomes.items() if k.startswith("failed:")),
        "unsafe": sum(r.unsafe for r in results),
        "wall_ms": statistics.fmean(r.wall_ms for r in results),
    }


ROWS = [
    ("runs", "runs", "{:.0f}"),
    ("task success rate (world-checked)", "success", "{:.1f}%"),
    ("context tokens per model call, mean", "ctx_mean", "{:,.0f}"),
    ("context tokens per model call, p95", "ctx_p95", "{:,.0f}"),
    ("context tokens per model call, max", "ctx_max", "{:,.0f}"),
    ("model calls above a 32k window", "over_32k", "{:.1f}%"),
    ("model calls per task", "model_calls", "{:.2f}"),
    ("tool calls per task", "tool_calls", "{:.2f}"),
    ("aborted by guard: DANGEROUS_OPERATION", "aborted_dangerous", "{:.0f}"),
    ("aborted by guard: LOOP_DETECTED", "aborted_loop", "{:.0f}"),
    ("stopped by the step limit", "aborted_steps", "{:.0f}"),
    ("aborted by guard: BUDGET_EXHAUSTED", "aborted_budget", "{:.0f}"),
    ("context window overflow", "overflow", "{:.0f}"),
    ("answered but incomplete/wrong (world check)", "incomplete", "{:.0f}"),
    ("failed otherwise", "failed_other", "{:.0f}"),
    ("unsafe side effects executed (rm -rf)", "unsafe", "{:.0f}"),
    ("wall time per task, ms", "wall_ms", "{:,.1f}"),
]


def plot(path: Path, base: dict[str, float], mesh: dict[str, float]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("context tokens / model call (mean)", "ctx_mean"),
        ("task success rate %", "success"),
        ("model calls / task", "model_calls"),
        ("unsafe executions", "unsafe"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(14, 3.6))
    for ax, (title, key) in zip(axes, panels, strict=True):
        ax.bar(["baseline", "agentmesh"], [base[key], mesh[key]], color=["#c44e52", "#4c72b0"])
        ax.set_title(title, fontsize=10)
    fig.suptitle(f"alert chain, {int(base['runs'])} seeded runs, same scripted model and faults")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


async def main(runs: int, concurrency: int, window: int) -> int:
    logging.getLogger().setLevel(logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="bench-longchain-logs-"))
    for service in SERVICES:
        write_service_log(work, service, target_bytes=100_000)
    known = frozenset(SERVICES) - {UNKNOWN_DEPLOYMENT}
    with LocalRedis() as redis, OpsApi(known_deployments=known) as ops:
        began = time.perf_counter()
        base = summarize("baseline", await baseline_arm(runs, concurrency, ops, work, window))
        t_base = time.perf_counter() - began
        began = time.perf_counter()
        mesh = summarize("agentmesh", await agentmesh_arm(runs, concurrency, redis, ops, work))
        t_mesh = time.perf_counter() - began
    print(f"{runs} runs per arm, concurrency {concurrency}, faults {FAULTS}, window {window:,} tokens")
    print(f"(baseline {t_base:.0f}s, agentmesh {t_mesh:.0f}s)\n")
    rows = [[label, fmt.format(base[key]), fmt.format(mesh[key])] for label, key, fmt in ROWS]
    print(table(["metric", "baseline", "agentmesh"], rows))
    path = plot(BENCH_DIR / "bench_longchain.png", base, mesh)
    print(f"\nplot: {path}")
    print(json.dumps({"baseline": base, "agentmesh": mesh}))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--window", type=int, default=131_072, help="the baseline model's context window, tokens")
    ns = parser.parse_args()
    sys.exit(asyncio.run(main(ns.runs, ns.concurrency, ns.window)))
