"""A 5-agent relay (issue 44) on the scripted model with injected faults: hop summaries against forwarding
the whole transcript.

The chain: triage (reads the service's log with query_logs) -> log analyst -> remediation -> reporter ->
a carrier of the capability `closing` (verifier or closer, picked by capability routing). Each run plants
five values: pod, heap and build in the triage agent's tool output (a log file of its own), the ticket and
the change window in the user's words. Two modes on the same four services (tests/contract/stack.py,
in process, one local redis-server), the same scripted policy (provider_svc/scenarios/relay.py) and the same faults:

- **hops**: agentmesh handoffs. Each agent calls `transfer_to_<next>` with a brief whose facts cite the
  session message holding each value; context_svc BuildHandoff checks the citations, adds the user's
  constraints and caps the hop (800 tokens); the child's goal is that hop summary.
- **transcript**: the baseline. The same agents without handoffs answer with their whole transcript and the
  bench starts the next agent with it as its goal (the last one by `capability`), clipped to StartTask's
  goal limit (8192 characters, the tail kept) when longer.

Per mode: success (the last agent SUCCEEDED), the planted values found in the last agent's goal, tokens
each hop carried (the hop summary's tokens, or the forwarded transcript's, before clipping), model calls
and all tokens per run (every task's usage), the hops clipped, BuildHandoff's demotions, and the p50 of
the `dispatcher.route` span (capability routing's choice). Our own scripted data, not a model's:

    PYTHONPATH=. .venv/bin/python -m bench.bench_relay [--runs 300] [--concurrency 8] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.chat import MAX_GOAL_CHARS
from agentmesh.dev.localredis import LocalRedis
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc
from bench.common import BENCH_DIR, percentile, table
from provider_svc.scenarios.relay import PLANTED
from provider_svc.testing.scripted.model import count_tokens
from tests.contract.stack import Stack

D = dispatcher_pb2
ROLES = ("triage", "logs", "remediation", "reporter")
CLOSERS = ("verifier", "closer")
FAULTS = {"malformed_json": 0.04, "schema_violation": 0.04, "unknown_tool": 0.04}
"""Per tool call (handoff calls included): what the scripted model gets wrong; its corrections are clean."""
LOG_LINES = 120
"""Lines of each run's service log (about 2,700 tokens): what the triage agent's tool output holds."""


def _model(name: str, role: str, next_tool: str, seed: int) -> dict[str, Any]:
    return {
        "name": name,
        "policy": "provider_svc.scenarios.relay:relay_policy",
        "policy_args": {"role": role, "next_tool": next_tool},
        "faults": {"seed": seed, **FAULTS},
    }


def config(logs_dir: Path, seed: int) -> dict[str, Any]:
    """Both modes' agents: `relay_*` hand off, `base_*` answer with their transcript."""
    models, agents = [], []
    for prefix, handing in (("relay", True), ("base", False)):
        chain = [f"{prefix}_{r}" for r in ROLES]
        for i, role in enumerate(ROLES):
            agent = chain[i]
            if handing:
                target = chain[i + 1] if i + 1 < len(chain) else "closing"
                next_tool = f"transfer_to_{target}"
                handoffs: list[Any] = [chain[i + 1]] if i + 1 < len(chain) else [{"capability": "closing"}]
            else:
                next_tool, handoffs = "", []
            models.append(_model(agent, role, next_tool, seed))
            tools = ["query_logs"] if role == "triage" else ["none_here"]
            agents.append(_agent(agent, tools, handoffs, []))
        for closer in CLOSERS:
            models.append(_model(f"{prefix}_{closer}", "close", "", seed))
            capability = "closing" if handing else "base_closing"
            agents.append(_agent(f"{prefix}_{closer}", ["none_here"], [], [capability]))
    return {
        "providers": {
            "default_model": "scripted/relay_triage",
            # No backend rate limit (its default is 60 requests a minute): the bench measures the relay.
            "backends": [{"name": "scripted", "type": "scripted", "rate_limit_per_min": None, "models": models}],
        },
        # No tool rate limit either (its default bucket is 60 calls per agent, 1 a second).
        "tools": {
            "builtins": ["query_logs", "read_payload"],
            "logs_dir": str(logs_dir),
            "rate_limit": {"capacity": 1_000_000, "refill_per_second": 1_000_000},
        },
        "agents": agents,
        "dispatcher": {"call_timeout_s": 30, "heartbeat_interval_s": 0.5},
    }


def _agent(agent_id: str, tools: list[str], handoffs: list[Any], capabilities: list[str]) -> dict[str, Any]:
    return {
        "id": agent_id,
        "model": f"scripted/{agent_id}",
        "tools": tools,
        "handoffs": handoffs,
        "capabilities": capabilities,
        "permissions": ["*:*:*"],
        "max_steps": 8,
        "token_budget": 400_000,
    }


@dataclass
class Planted:
    """One run's planted values and its goal."""

    service: str
    values: dict[str, str]

    @property
    def goal(self) -> str:
        v = self.values
        return (
            f"Alert on service {self.service}: checkout requests fail. The customer ticket is {v['ticket']}; "
            f"do not restart anything {v['window']}. Find the cause and get it fixed."
        )


def plant(run: int, seed: int, logs_dir: Path) -> Planted:
    """The run's values and its service's log file (noise lines around the planted one)."""
    rng = random.Random(seed * 100_003 + run)
    hexd = "0123456789abcdef"
    values = {
        "pod": f"checkout-{''.join(rng.choices(hexd, k=4))}-{''.join(rng.choices('abcdefghjkmnpqrstvwxz2345', k=5))}",
        "heap": f"heap {rng.randint(1, 9)}.{rng.randint(0, 9)}GiB",
        "build": f"build b{''.join(rng.choices(hexd, k=7))}",
        "ticket": f"INC-{rng.randint(10_000, 99_999)}",
        "window": f"before {rng.randint(10, 23)}:{rng.choice('012345')}0 UTC",
    }
    assert all(PLANTED[k].fullmatch(v) for k, v in values.items()), values
    # A name whose one-character cut (the schema_violation fault) names no log: never another run's facts.
    service = f"svc-{run}-z"
    noise = ("request served in {} ms", "GC pause {} ms", "cache hit ratio 0.{}", "upstream latency {} ms")
    lines = [
        f"2026-12-06T03:{m // 60:02d}:{m % 60:02d}Z INFO [{service}] " + rng.choice(noise).format(rng.randint(5, 90))
        for m in range(LOG_LINES)
    ]
    lines.insert(
        LOG_LINES // 3,
        f"2026-12-06T03:00:40Z ERROR [{service}] pod {values['pod']} OOMKilled: {values['heap']} over its limit "
        f"since {values['build']} rolled out",
    )
    (logs_dir / f"{service}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Planted(service, values)


@dataclass
class RunResult:
    """What one run of one mode gave."""

    ok: bool
    reached: int
    hop_tokens: list[int] = field(default_factory=list)
    model_calls: int = 0
    total_tokens: int = 0
    clipped: int = 0
    demoted: int = 0
    confirmed: int = 0
    seconds: float = 0.0
    last_agent: str = ""
    pickup_ms: list[float] = field(default_factory=list)
    failure: str = ""
    """The failed task's agent and error code."""
    """hops: each child's wait on the work queue (its PENDING event to its first RUNNING one)."""


class Client:
    """The dispatcher's gRPC API as an operator."""

    def __init__(self, stack: Stack) -> None:
        assert stack.channel is not None
        token = Authenticator(stack.hosts["dispatcher"][0].settings.auth, "dev").mint(
            subject="operator", roles=("operator",)
        )
        self.md = ((IDENTITY_HEADER, token),)
        self.stub = dispatcher_pb2_grpc.DispatcherServiceStub(stack.channel)  # type: ignore[no-untyped-call]

    async def events(self, task_id: str) -> list[D.TaskEvent]:
        call = self.stub.WatchTask(D.WatchTaskRequest(task_id=task_id), metadata=self.md, timeout=120)
        return [r.event async for r in call if r.event.sequence]

    async def task(self, task_id: str) -> D.Task:
        reply: D.GetTaskResponse = await self.stub.GetTask(D.GetTaskRequest(task_id=task_id), metadata=self.md)
        return reply.task


def _reached(goal: str, planted: Planted) -> int:
    return sum(value in goal for value in planted.values.values())


async def run_hops(client: Client, planted: Planted) -> RunResult:
    """agentmesh handoffs: start the triage agent, follow the chain to its end."""
    first_ms = last_ms = 0
    reply = await client.stub.StartTask(
        D.StartTaskRequest(agent_id="relay_triage", goal=planted.goal), metadata=client.md
    )
    task_id, result = reply.task.task_id, RunResult(ok=False, reached=0)
    while True:
        events = await client.events(task_id)
        task = await client.task(task_id)
        result.model_calls += sum(e.kind == D.TASK_EVENT_KIND_MODEL_REPLY for e in events)
        result.total_tokens += task.usage.total_tokens
        first_ms, last_ms = first_ms or events[0].time.ToMilliseconds(), events[-1].time.ToMilliseconds()
        if task.parent_task_id:
            running = [e.time.ToMilliseconds() for e in events if e.status == D.TASK_STATUS_RUNNING]
            if running:
                result.pickup_ms.append(running[0] - events[0].time.ToMilliseconds())
        hops = [e for e in events if e.kind == D.TASK_EVENT_KIND_HANDOFF and e.attributes["parent_task_id"] == task_id]
        for hop in hops:
            result.hop_tokens.append(int(hop.attributes["hop_tokens"]))
            result.demoted += int(hop.attributes["demoted"])
            result.confirmed += int(hop.attributes["confirmed"])
        if task.status != D.TASK_STATUS_HANDED_OFF:
            break
        task_id = task.child_task_id
    result.ok = task.status == D.TASK_STATUS_SUCCEEDED and len(result.hop_tokens) == len(ROLES)
    if not result.ok:
        result.failure = f"{task.agent_id}: {task.error.message[:90] or D.TaskStatus.Name(task.status)}"
    result.reached = _reached(task.goal, planted)
    result.last_agent = task.agent_id
    result.seconds = (last_ms - first_ms) / 1000
    return result


async def run_transcript(client: Client, planted: Planted) -> RunResult:
    """The baseline: each agent's whole transcript is the next one's goal."""
    first_ms = last_ms = 0
    result, goal = RunResult(ok=False, reached=0), planted.goal
    for i in range(len(ROLES) + 1):
        last = i == len(ROLES)
        start = (
            D.StartTaskRequest(capability="base_closing", goal=goal)
            if last
            else D.StartTaskRequest(agent_id=f"base_{ROLES[i]}", goal=goal)
        )
        call = client.stub.RunTask(D.RunTaskRequest(start=start), metadata=client.md, timeout=120)
        events = [r.event async for r in call if r.event.sequence]
        task = await client.task(events[0].task_id)
        first_ms, last_ms = first_ms or events[0].time.ToMilliseconds(), events[-1].time.ToMilliseconds()
        result.model_calls += sum(e.kind == D.TASK_EVENT_KIND_MODEL_REPLY for e in events)
        result.total_tokens += task.usage.total_tokens
        if last:
            result.ok = task.status == D.TASK_STATUS_SUCCEEDED
            result.reached = _reached(goal, planted)
            result.last_agent = task.agent_id
            break
        if task.status != D.TASK_STATUS_SUCCEEDED:
            result.failure = f"{task.agent_id}: {task.error.message[:90] or D.TaskStatus.Name(task.status)}"
            break
        result.hop_tokens.append(count_tokens(task.answer))
        goal = task.answer
        if len(goal) > MAX_GOAL_CHARS:
            result.clipped += 1
            goal = goal[-MAX_GOAL_CHARS:]
    result.seconds = (last_ms - first_ms) / 1000
    return result


def route_ms(span_file: Path) -> dict[str, list[float]]:
    """The `dispatcher.route` spans' durations (ms) by capability."""
    found: dict[str, list[float]] = {}
    if span_file.exists():
        for line in span_file.read_text(encoding="utf-8").splitlines():
            try:
                span = json.loads(line)
            except ValueError:
                continue
            if span.get("name") == "dispatcher.route":
                start, end = span.get("start_time_unix_nano"), span.get("end_time_unix_nano")
                capability = str((span.get("attributes") or {}).get("agentmesh.route.capability", ""))
                if isinstance(start, int) and isinstance(end, int):
                    found.setdefault(capability, []).append((end - start) / 1e6)
    return found


async def bench(runs: int, concurrency: int, seed: int) -> dict[str, list[RunResult]]:
    results: dict[str, list[RunResult]] = {"hops": [], "transcript": []}
    with LocalRedis() as redis, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        logs_dir = work / "logs"
        logs_dir.mkdir()
        planted = [plant(i, seed, logs_dir) for i in range(runs + 1)]
        warm = planted.pop()  # one run first, unmeasured: tool_svc's CPU pool starts on the first query_logs
        raw = [count_tokens((logs_dir / f"{p.service}.log").read_text(encoding="utf-8")) for p in planted]
        results["raw"] = [RunResult(ok=True, reached=int(statistics.median(raw)))]
        async with Stack(redis.url, work, config(logs_dir, seed)) as stack:
            client = Client(stack)
            await run_transcript(client, warm)
            gate = asyncio.Semaphore(concurrency)

            async def one(mode: str, p: Planted) -> None:
                async with gate:
                    runner = run_hops if mode == "hops" else run_transcript
                    results[mode].append(await runner(client, p))

            for mode in ("hops", "transcript"):
                await asyncio.gather(*(one(mode, p) for p in planted))
        routes = route_ms(work / "spans.jsonl")  # written as the services stop
        for mode, capability in (("hops", "closing"), ("transcript", "base_closing")):
            samples = routes.get(capability, [])
            p50 = percentile(samples, 0.5) if samples else float("nan")
            results[f"route_{mode}"] = [RunResult(ok=True, reached=len(samples), seconds=p50)]
    return results


def summary(results: dict[str, list[RunResult]]) -> list[list[str]]:
    rows = []
    for mode in ("hops", "transcript"):
        rs = results[mode]
        n = len(rs)
        tokens = [t for r in rs for t in r.hop_tokens]
        pickups = [p for r in rs for p in r.pickup_ms]
        by_hop = [statistics.mean(r.hop_tokens[i] for r in rs if len(r.hop_tokens) > i) for i in range(len(ROLES))
                  if any(len(r.hop_tokens) > i for r in rs)]  # fmt: skip
        rows.append(
            [
                mode,
                str(n),
                f"{100 * sum(r.ok for r in rs) / n:.1f}%",
                f"{100 * sum(r.reached for r in rs) / (n * len(PLANTED)):.1f}%",
                f"{100 * sum(r.reached == len(PLANTED) for r in rs) / n:.1f}%",
                f"{statistics.mean(tokens):.0f}" if tokens else "-",
                " / ".join(f"{t:.0f}" for t in by_hop),
                f"{statistics.mean(r.model_calls for r in rs):.2f}",
                f"{statistics.mean(r.total_tokens for r in rs):,.0f}",
                str(sum(r.clipped for r in rs)),
                f"{sum(r.demoted for r in rs)}/{sum(r.confirmed + r.demoted for r in rs)}",
                f"{percentile([r.seconds for r in rs], 0.5) * 1000:.0f}",
                f"{percentile(pickups, 0.5):.0f}" if pickups else "-",
            ]
        )
    return rows


HEADER = [
    "mode", "runs", "success", "planted reached", "all 5 reached", "tokens/hop", "hop 1/2/3/4 tokens",
    "model calls/run", "tokens/run (all)", "hops clipped", "demoted/cited", "run p50 ms", "queue wait p50 ms",
]  # fmt: skip


def plot(path: Path, results: dict[str, list[RunResult]]) -> Path:
    """Tokens carried per hop, both modes (matplotlib, headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for mode, color in (("hops", "#4c72b0"), ("transcript", "#dd8452")):
        rs = results[mode]
        xs, ys = [], []
        for i in range(len(ROLES)):
            values = [r.hop_tokens[i] for r in rs if len(r.hop_tokens) > i]
            if values:
                xs.append(i + 1)
                ys.append(statistics.mean(values))
        ax.plot(xs, ys, marker="o", color=color, label=mode)
    ax.set_xticks(range(1, len(ROLES) + 1))
    ax.set_xlabel("hop")
    ax.set_ylabel("tokens carried (mean)")
    ax.set_title("5-agent relay on the scripted model: hop summary vs whole transcript")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=44)
    parser.add_argument("--quick", action="store_true", help="a smoke test: 3 runs, no PNG")
    parser.add_argument("--plot", type=Path, default=BENCH_DIR / "bench_relay.png")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else args.runs
    results = asyncio.run(bench(runs, args.concurrency, args.seed))
    print(f"5-agent relay, {runs} seeded runs (seed {args.seed}), scripted model, faults per tool call {FAULTS}")
    print(table(HEADER, summary(results)))
    for mode, how in (("hops", "a handoff to `closing`"), ("transcript", "StartTask naming `base_closing`")):
        route = results[f"route_{mode}"][0]
        print(
            f"capability routing, {how} (`dispatcher.route` span): "
            f"p50 {route.seconds:.2f} ms over {route.reached} routes"
        )
    print("tokens/hop: hops = BuildHandoff's hop summary; transcript = the forwarded answer before clipping "
          f"to the {MAX_GOAL_CHARS}-character goal limit.")  # fmt: skip
    print(f"the triage agent's raw tool output: {results['raw'][0].reached} tokens (p50); the transcript carries what "
          "the agent saw of it (context_svc offloads a big output to a preview with its ref).")  # fmt: skip
    for mode in ("hops", "transcript"):
        failures = Counter(r.failure for r in results[mode] if r.failure)
        if failures:
            print(f"{mode} failures: " + ", ".join(f"{why} x{n}" for why, n in failures.most_common()))
    if not args.quick:
        print(f"plot: {plot(args.plot, results)}")
    ok = all(r.ok for mode in ("hops", "transcript") for r in results[mode])
    return 0 if ok or not args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
