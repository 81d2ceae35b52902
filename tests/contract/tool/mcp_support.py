"""Fixtures of the MCP tests: the SDK-written upstream (tests/contract/tool/mcp_upstream.py) over streamable
HTTP (one process per run) and over stdio (started by tool_svc), and tool_svc with both mounted."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentmesh.config import deep_merge
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc
from tests.e2e.conftest import free_port
from tool_svc.server import SPEC

UPSTREAM = Path(__file__).with_name("mcp_upstream.py")
UPSTREAM_KEY = "upstream-key-0123456789"


def wait_port(port: int, proc: subprocess.Popen[Any], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            try:
                sock.connect(("127.0.0.1", port))
                return
            except OSError:
                pass
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port} after {timeout_s}s")


def effects(path: Path) -> list[str]:
    """The side effects the upstream recorded, one per line."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@dataclass
class HttpUpstream:
    url: str
    effects: Path
    proc: subprocess.Popen[Any]


@pytest.fixture(scope="session")
def http_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpUpstream]:
    """The upstream over streamable HTTP (one for the run: tests use distinct ids); it refuses requests without
    X-Upstream-Key."""
    directory = tmp_path_factory.mktemp("mcp-http")
    port = free_port()
    effects_file = directory / "effects.txt"
    args = ["--transport", "http", "--port", str(port), "--effects", str(effects_file)]
    proc = subprocess.Popen(
        [sys.executable, str(UPSTREAM), *args, "--require-key", UPSTREAM_KEY],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, proc)
        yield HttpUpstream(f"http://127.0.0.1:{port}/mcp", effects_file, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def mcp_overrides(http: HttpUpstream, stdio_effects: Path, **local: Any) -> dict[str, Any]:
    """tool_svc with `local` (stdio, trusted annotations, handshake era) and `remote` (HTTP, untrusted)."""
    stdio = {
        "name": "local",
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(UPSTREAM), "--transport", "stdio", "--effects", str(stdio_effects)],
        "env": {"UPSTREAM_FLAVOUR": "stdio"},
        "trust_annotations": True,
        "mode": "legacy",
        "timeout_s": 10,
        "connect_timeout_s": 30,
        "restart_initial_s": 0.5,
        "restart_max_s": 1.0,
    }
    remote = {
        "name": "remote",
        "transport": "http",
        "url": http.url,
        "headers": {"X-Upstream-Key": UPSTREAM_KEY},
        "connect_timeout_s": 30,
        "tools": {"grow": {"requires_approval": False}, "get-item": {"access": "read"}},
    }
    return {
        "tools": {
            "http_allowlist": [http.url],
            "retry": {"max_attempts": 1},
            "rate_limit": {"capacity": 6, "refill_per_second": 0.001, "local_batch": 1},
            "mcp_servers": [deep_merge(stdio, local), remote],
        }
    }


class Tools:
    """Calls of the in-process tool_svc, as an agent holding `permissions`."""

    def __init__(self, svc: Any) -> None:
        self.svc = svc
        self.stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]

    def meta(self, agent: str = "agent-a", permissions: tuple[str, ...] = ("*:*:*",), **claims: Any) -> Any:
        return self.svc.metadata(("agent",), subject=agent, agent_id=agent, permissions=list(permissions), **claims)

    async def listing(self, agent: str = "agent-a", **request: Any) -> dict[str, common_pb2.ToolSpec]:
        reply = await self.stub.ListTools(tool_pb2.ListToolsRequest(**request), metadata=self.meta(agent), timeout=15)
        return {t.name: t for t in reply.tools}

    async def discover(self, goal: str, agent: str = "agent-a", k: int = 10) -> list[str]:
        reply = await self.stub.DiscoverTools(
            tool_pb2.DiscoverToolsRequest(goal=goal, k=k, permitted_only=True), metadata=self.meta(agent), timeout=15
        )
        return [s.tool.name for s in reply.tools]

    async def call(
        self, name: str, arguments: Any, *, agent: str = "agent-a", key: str = "", call_id: str = "c1"
    ) -> common_pb2.ToolResult:
        import json

        reply = await self.stub.ExecuteTool(
            tool_pb2.ExecuteToolRequest(
                call=common_pb2.ToolCall(id=call_id, name=name, arguments_json=json.dumps(arguments)),
                session_id="sess-mcp",
                idempotency_key=key,
            ),
            metadata=self.meta(agent),
            timeout=30,
        )
        result: common_pb2.ToolResult = reply.result
        return result

    async def wait_for(
        self, predicate: Callable[[dict[str, common_pb2.ToolSpec]], bool], timeout_s: float = 20
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(await self.listing()):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the tool list did not change as expected within {timeout_s}s")


@pytest.fixture
def mcp_tool_service(
    start_service: Callable[..., Awaitable[Any]], http_upstream: HttpUpstream, tmp_path: Path
) -> Callable[..., Awaitable[Tools]]:
    """`await mcp_tool_service(**local_overrides)`: tool_svc with both servers mounted; the stdio server's
    side effects are in `tmp_path / "stdio-effects.txt"`."""

    async def start(**local: Any) -> Tools:
        overrides = mcp_overrides(http_upstream, tmp_path / "stdio-effects.txt", **local)
        return Tools(await start_service(SPEC, overrides))

    return start
