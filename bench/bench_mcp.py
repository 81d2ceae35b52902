"""Benchmark: what the gateway adds to a call of an MCP server's tool (docs/design.md §16).

One run, same machine, same moment, against one MCP server written with the official SDK
(tests/contract/tool/mcp_upstream.py, tool `Echo.Text`), over stdio and over streamable HTTP:
- a bare gRPC round trip (the floor, bench/common.py);
- the tool called directly with the SDK's client (what an agent framework that mounts MCP does);
- ExecuteTool of the same tool through tool_svc (its own process, its own client to the server):
  auth, the whole pipeline (validation, permissions, rate limit in Redis, breaker, output checks,
  redaction, offload check), spans, then the same MCP call;
each at concurrency 1 and 16. The ratio that matters is ExecuteTool over the direct SDK call.

    .venv/bin/python -m bench.bench_mcp [--calls 1000] [--plot bench/bench_mcp.png]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc.aio
import httpx2
import yaml
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.supervisor import health_status
from agentmesh.dev.localredis import LocalRedis
from agentmesh.tokens import mint_token
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc
from bench.bench_tool import _free_port
from bench.common import BENCH_DIR, STATS_HEADER, Stats, bar_plot, bare_roundtrip, measure, table

REPO = BENCH_DIR.parent
UPSTREAM = REPO / "tests" / "contract" / "tool" / "mcp_upstream.py"
AUTH_KEY = "bench-mcp-key-" + "m" * 32


def _wait(check: Callable[[], bool], what: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.1)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _start(tmp: Path, redis_url: str) -> tuple[list[subprocess.Popen[bytes]], str, str]:
    http_port, tool_port = _free_port(), _free_port()
    upstream_args = ["--effects", str(tmp / "effects.txt")]
    http = subprocess.Popen(
        [sys.executable, str(UPSTREAM), "--transport", "http", "--port", str(http_port), *upstream_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait(lambda: _listening(http_port), "the HTTP MCP server", http)
    url = f"http://127.0.0.1:{http_port}/mcp"
    stdio = {"command": sys.executable, "args": [str(UPSTREAM), "--transport", "stdio", *upstream_args]}
    config: dict[str, Any] = {
        "environment": "dev",
        "auth": {"mode": "enabled", "key": AUTH_KEY},
        "redis": {"url": redis_url},
        "services": {"tool": {"host": "127.0.0.1", "port": tool_port}},
        "telemetry": {"span_file": str(tmp / "spans.jsonl"), "log_level": "WARNING"},
        "tools": {
            "rate_limit": {"capacity": 1_000_000, "refill_per_second": 1_000_000},
            "http_allowlist": [url],
            "mcp_servers": [
                {"name": "local", "transport": "stdio", "trust_annotations": True, **stdio},
                {"name": "remote", "transport": "http", "url": url, "trust_annotations": True},
            ],
        },
    }
    path = tmp / "agentmesh.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_"))}
    env["PYTHONPATH"] = str(REPO)
    log = (tmp / "tool.log").open("wb")
    tool = subprocess.Popen([sys.executable, "-m", "tool_svc", str(path)], cwd=REPO, env=env, stdout=log, stderr=log)
    target = f"127.0.0.1:{tool_port}"
    _wait(lambda: health_status(target, timeout_s=1.0) == "SERVING", "tool_svc", tool)
    return [http, tool], url, target


async def _run(calls: int, url: str, target: str, tmp: Path) -> list[Stats]:
    token = mint_token(
        AUTH_KEY.encode(), subject="bench", roles=["agent"], agent_id="bench", permissions=["*:*:*"], ttl_s=3600
    )
    metadata = ((IDENTITY_HEADER, token),)
    results: list[Stats] = []
    async with AsyncExitStack() as stack:
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(target))
        stub = tool_pb2_grpc.ToolServiceStub(channel)  # type: ignore[no-untyped-call]
        params = StdioServerParameters(
            command=sys.executable, args=[str(UPSTREAM), "--transport", "stdio", "--effects", str(tmp / "e.txt")]
        )
        direct_stdio = await stack.enter_async_context(Client(stdio_client(params), cache=None))
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=60))
        direct_http = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http), cache=None))

        def via_sdk(client: Client) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                answer = await client.call_tool("Echo.Text", {"text": "hi"})
                assert not answer.is_error

            return call

        def via_gateway(name: str) -> Callable[[], Awaitable[None]]:
            request = tool_pb2.ExecuteToolRequest(
                call=common_pb2.ToolCall(id="c1", name=name, arguments_json='{"text": "hi"}'), session_id="bench"
            )

            async def call() -> None:
                reply = await stub.ExecuteTool(request, metadata=metadata, timeout=30)
                assert reply.result.output.inline == "echo:hi", reply

            return call

        workloads = [
            ("stdio: SDK client direct", via_sdk(direct_stdio)),
            ("stdio: ExecuteTool via tool_svc", via_gateway("local__echo_text")),
            ("http: SDK client direct", via_sdk(direct_http)),
            ("http: ExecuteTool via tool_svc", via_gateway("remote__echo_text")),
        ]
        for concurrency in (1, 16):
            results.append(await bare_roundtrip(calls, concurrency))
            for name, call in workloads:
                await measure(name, call, calls=min(calls, 50), concurrency=concurrency)  # warm-up
                results.append(await measure(name, call, calls=calls, concurrency=concurrency))
    return results


def _verdict(results: list[Stats]) -> list[str]:
    lines = []
    for concurrency in (1, 16):
        rows = {r.name: r for r in results if r.concurrency == concurrency}
        bare = next(r for r in rows.values() if r.name.startswith("bare"))
        for transport in ("stdio", "http"):
            direct, gateway = rows[f"{transport}: SDK client direct"], rows[f"{transport}: ExecuteTool via tool_svc"]
            lines.append(
                f"c{concurrency} {transport}: ExecuteTool p50 {gateway.p50_ms:.2f} ms = "
                f"{gateway.p50_ms / direct.p50_ms:.2f}x the direct SDK call ({direct.p50_ms:.2f} ms), "
                f"+{gateway.p50_ms - direct.p50_ms:.2f} ms; bare gRPC {bare.p50_ms:.3f} ms; "
                f"throughput {gateway.throughput_per_s:.0f}/s vs {direct.throughput_per_s:.0f}/s direct"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--plot", type=Path, default=BENCH_DIR / "bench_mcp.png")
    args = parser.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with LocalRedis() as redis_server, tempfile.TemporaryDirectory() as tmp:
            procs, url, target = _start(Path(tmp), redis_server.url)
            results = asyncio.run(_run(args.calls, url, target, Path(tmp)))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(table(STATS_HEADER, [r.row() for r in results]))
    print()
    print("\n".join(_verdict(results)))
    labels = [f"{r.name[:24]} c{r.concurrency}" for r in results]
    bar_plot(args.plot, "MCP tool: direct SDK call vs ExecuteTool through tool_svc (p50)", labels,
             [r.p50_ms for r in results], "p50 ms")  # fmt: skip
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
