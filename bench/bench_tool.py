"""Benchmark: what the tool gateway costs per call.

One run, same machine, same moment:
- a bare gRPC round trip (the floor, bench/common.py);
- ExecuteTool(calculator) through tool_svc: auth, the whole pipeline (resolve, validate, guard,
  permissions, rate limit in Redis, breaker, execute, output schema, redaction, offload check), spans;
- the same against a tool_svc whose rate limiter takes one token per Redis call (`local_batch: 1`;
  the default takes small batches, see tool_svc/ratelimit.py);
- the same with an idempotency key (claim + settle in Redis);
each at concurrency 1 and 32. tool_svc runs in its own process with its real configuration, so the
client and the service do not share one GIL. Redis round trips per call are counted in a separate,
untimed pass with MONITOR: the commands clients sent, not the ones Lua scripts ran inside Redis
(INFO commandstats would count those too).

Target (issue 3): ExecuteTool p50 <= 3x the bare round trip p50.

    .venv/bin/python -m bench.bench_tool [--calls 2000] [--plot bench/bench_tool.png]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import redis
import yaml

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.supervisor import health_status
from agentmesh.dev.localredis import LocalRedis
from agentmesh.tokens import mint_token
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc
from bench.common import BENCH_DIR, STATS_HEADER, Stats, bar_plot, bare_roundtrip, measure, table

REPO = BENCH_DIR.parent
AUTH_KEY = "bench-tool-key-" + "t" * 32


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_tool_svc(tmp: Path, redis_url: str, local_batch: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    tmp = tmp / f"batch{local_batch}"
    tmp.mkdir()
    config: dict[str, Any] = {
        "environment": "dev",
        "auth": {"mode": "enabled", "key": AUTH_KEY},
        "redis": {"url": redis_url},
        "services": {"tool": {"host": "127.0.0.1", "port": port}},
        "telemetry": {"span_file": str(tmp / "spans.jsonl"), "log_level": "WARNING"},
        # The benchmark measures the gateway, not the limiter refusing it.
        "tools": {"rate_limit": {"capacity": 1_000_000, "refill_per_second": 1_000_000, "local_batch": local_batch}},
    }
    path = tmp / "agentmesh.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
    env["PYTHONPATH"] = str(REPO)
    log = (tmp / "tool.log").open("wb")
    # BENCH_PROFILE=<file>: run tool_svc under cProfile (pstats file written on exit).
    profile = os.environ.get("BENCH_PROFILE")
    prefix = ["-m", "cProfile", "-o", profile] if profile else []
    proc = subprocess.Popen(
        [sys.executable, *prefix, "-m", "tool_svc", str(path)], cwd=REPO, env=env, stdout=log, stderr=log
    )
    target = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while health_status(target, timeout_s=1.0) != "SERVING":
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"tool_svc did not start; see {tmp / 'tool.log'}")
        time.sleep(0.1)
    return proc, target


_STOP = "bench-monitor-stop"


def _monitor(url: str, started: threading.Event, seen: list[str]) -> None:
    client = redis.Redis.from_url(url, decode_responses=True)
    with client.monitor() as monitor:  # type: ignore[no-untyped-call]
        started.set()
        for entry in monitor.listen():
            command = str(entry.get("command", ""))
            if _STOP in command:
                break
            if entry.get("client_type") != "lua":
                seen.append(command)
    client.close()


async def _round_trips(url: str, call: Any, n: int = 200) -> float:
    """Client commands Redis received per call, over n sequential calls."""
    started = threading.Event()
    seen: list[str] = []
    thread = threading.Thread(target=_monitor, args=(url, started, seen), daemon=True)
    thread.start()
    started.wait(10)
    for _ in range(n):
        await call()
    control = redis.Redis.from_url(url)
    control.echo(_STOP)
    control.close()
    thread.join(10)
    return len(seen) / n


async def _run(calls: int, target: str, exact_target: str, redis_url: str) -> tuple[list[Stats], dict[str, float]]:
    results: list[Stats] = []
    round_trips: dict[str, float] = {}
    token = mint_token(
        AUTH_KEY.encode(), subject="bench", roles=["agent"], agent_id="bench", permissions=["*:*:*"], ttl_s=3600
    )
    metadata = ((IDENTITY_HEADER, token),)
    counter = itertools.count()
    async with grpc.aio.insecure_channel(target) as channel, grpc.aio.insecure_channel(exact_target) as exact_channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)  # type: ignore[no-untyped-call]
        exact_stub = tool_pb2_grpc.ToolServiceStub(exact_channel)  # type: ignore[no-untyped-call]
        plain = tool_pb2.ExecuteToolRequest(
            call=common_pb2.ToolCall(id="c1", name="calculator", arguments_json='{"expression": "(17 * 3) / 4"}'),
            session_id="bench",
        )

        async def execute() -> None:
            reply = await stub.ExecuteTool(plain, metadata=metadata, timeout=30)
            assert reply.result.WhichOneof("outcome") == "output", reply

        async def execute_exact() -> None:
            reply = await exact_stub.ExecuteTool(plain, metadata=metadata, timeout=30)
            assert reply.result.WhichOneof("outcome") == "output", reply

        async def execute_idempotent() -> None:
            request = tool_pb2.ExecuteToolRequest()
            request.CopyFrom(plain)
            request.idempotency_key = f"bench:{next(counter)}"
            reply = await stub.ExecuteTool(request, metadata=metadata, timeout=30)
            assert reply.result.WhichOneof("outcome") == "output", reply

        async def list_nothing() -> None:
            await stub.ListTools(tool_pb2.ListToolsRequest(group="no-such-group"), metadata=metadata, timeout=30)

        workloads = [
            ("ExecuteTool calculator", execute),
            ("ExecuteTool, limiter batch 1", execute_exact),
            ("ExecuteTool + idempotency key", execute_idempotent),
        ]
        for concurrency in (1, 32):
            results.append(await bare_roundtrip(calls, concurrency))
            for name, call in workloads:
                results.append(await measure(name, call, calls=calls, concurrency=concurrency))
            # Diagnostic: the service host alone (interceptors, auth, spans) with an empty answer.
            results.append(await measure("ListTools (host floor)", list_nothing, calls=calls, concurrency=concurrency))
        for name, call in workloads:
            round_trips[name] = await _round_trips(redis_url, call)
    return results, round_trips


def _verdict(results: list[Stats], round_trips: dict[str, float]) -> list[str]:
    lines = []
    for concurrency in (1, 32):
        rows = [r for r in results if r.concurrency == concurrency]
        bare = next(r for r in rows if r.name.startswith("bare"))
        host = next(r for r in rows if r.name.startswith("ListTools"))
        floor = host.p50_ms / bare.p50_ms
        lines.append(
            f"c{concurrency} service host floor (ListTools, empty): p50 {host.p50_ms:.3f} ms = {floor:.2f}x bare"
        )
        for row in rows:
            if row is bare or row.name not in round_trips:
                continue
            ratio = row.p50_ms / bare.p50_ms
            target = "  (target <= 3x)" if row.name == "ExecuteTool calculator" else ""
            lines.append(
                f"c{concurrency} {row.name}: p50 {row.p50_ms:.3f} ms = {ratio:.2f}x bare {bare.p50_ms:.3f} ms{target}; "
                f"p99 {row.p99_ms:.3f} ms; {row.throughput_per_s:.0f} calls/s "
                f"({row.throughput_per_s / bare.throughput_per_s:.0%} of bare); "
                f"Redis round trips/call {round_trips[row.name]:.2f}"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--plot", type=Path, default=BENCH_DIR / "bench_tool.png")
    args = parser.parse_args()
    services: list[subprocess.Popen[bytes]] = []
    try:
        with LocalRedis() as redis_server, tempfile.TemporaryDirectory() as tmp:
            leased, target = _start_tool_svc(Path(tmp), redis_server.url, local_batch=16)
            services.append(leased)
            exact, exact_target = _start_tool_svc(Path(tmp), redis_server.url, local_batch=1)
            services.append(exact)
            results, round_trips = asyncio.run(_run(args.calls, target, exact_target, redis_server.url))
            for service in services:
                service.terminate()
                service.wait(timeout=30)
    finally:
        for service in services:
            if service.poll() is None:
                service.kill()
    print(table(STATS_HEADER, [r.row() for r in results]))
    print()
    print("\n".join(_verdict(results, round_trips)))
    labels = [f"{r.name.replace('ExecuteTool', 'Exec')[:20]} c{r.concurrency}" for r in results]
    bar_plot(args.plot, "tool_svc ExecuteTool vs bare gRPC: p50 latency", labels, [r.p50_ms for r in results], "p50 ms")
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
