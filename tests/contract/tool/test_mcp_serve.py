"""`agentmesh mcp serve` (issue 30, docs/design.md §16): the official SDK's client calls agentmesh's governed
tools over stdio and streamable HTTP. tool_svc runs in-process with the SDK-written upstream mounted over HTTP
(its side effects counted at the upstream); `agentmesh mcp serve` is a separate process dialling it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from agentmesh.v1 import tool_pb2, tool_pb2_grpc
from tests.conftest import TEST_AUTH_KEY
from tests.contract.tool.mcp_support import UPSTREAM_KEY, HttpUpstream, effects, wait_port
from tests.e2e.conftest import free_port
from tool_svc.server import SPEC

SERVE = (sys.executable, "-m", "agentmesh.cli")
GRANTS = ["*:mcp.remote:write", "*:builtin.compute:read", "*:builtin.payload:read"]


async def _tool_service(start_service: Any, http: HttpUpstream) -> Any:
    remote = {
        "name": "remote",
        "transport": "http",
        "url": http.url,
        "headers": {"X-Upstream-Key": UPSTREAM_KEY},
        "tools": {"get-item": {"access": "read"}},
    }
    return await start_service(SPEC, {"tools": {"http_allowlist": [http.url], "mcp_servers": [remote]}})


def _config(tmp_path: Path, svc: Any) -> Path:
    """The configuration `agentmesh mcp serve` reads: where tool_svc is (the token is the caller's own)."""
    path = tmp_path / "serve.yaml"
    path.write_text(
        json.dumps(
            {
                "auth": {"key": TEST_AUTH_KEY},
                "services": {"tool": {"port": svc.host.port}},
                "telemetry": {"span_file": str(tmp_path / "spans.jsonl")},
            }
        ),
        encoding="utf-8",
    )
    return path


def _approved(approval_id: str) -> types.RequestParamsMeta:
    return cast("types.RequestParamsMeta", {"agentmesh_approval_id": approval_id})


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def _exercise(client: Client, svc: Any, http: HttpUpstream, tag: str) -> None:
    """Lists, calls, is refused, and completes an approval round trip with the effect run once."""
    names = {t.name for t in (await client.list_tools()).tools}
    assert {"calculator", "read_payload", "remote__delete_item", "remote__get_item"} <= names
    assert "run_python" not in names and "query_logs" not in names  # not granted: not offered

    # An MCP server's tool mounted in tool_svc, served back over MCP through the gateway.
    item = await client.call_tool("remote__get_item", {"id": f"{tag}-A1"})
    assert not item.is_error and item.structured_content == {"id": f"{tag}-A1", "qty": 3}

    refused = await client.call_tool("run_python", {"code": "print(1)"})
    assert refused.is_error and "PERMISSION_DENIED" in _text(refused) and "builtin.code" in _text(refused)
    assert refused.meta is not None and refused.meta["agentmesh/missing_permission"].endswith(":builtin.code:read")

    sku = f"{tag}-sku"
    asked = await client.call_tool("remote__delete_item", {"id": sku})
    assert asked.is_error and asked.meta is not None
    approval_id = asked.meta["agentmesh/approval_id"]
    assert approval_id in _text(asked) and "agentmesh_approval_id" in _text(asked)
    assert effects(http.effects).count(f"delete:{sku}") == 0

    # An operator (not the caller) approves through the existing ResolveApproval: the call runs now.
    stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    await stub.ResolveApproval(
        tool_pb2.ResolveApprovalRequest(
            approval_id=approval_id, approve=True, arguments_sha256=asked.meta["agentmesh/arguments_sha256"]
        ),
        metadata=svc.metadata(("operator",), subject="ops-approver"),
        timeout=30,
    )
    assert effects(http.effects).count(f"delete:{sku}") == 1

    done = await client.call_tool("remote__delete_item", {"id": sku}, meta=_approved(approval_id))
    assert not done.is_error and _text(done) == f"deleted {sku}", _text(done)
    assert done.meta is not None and done.meta["agentmesh/replayed"] is True
    again = await client.call_tool("remote__delete_item", {"id": sku}, meta=_approved(approval_id))
    assert _text(again) == f"deleted {sku}"
    assert effects(http.effects).count(f"delete:{sku}") == 1  # the effect ran once

    # An approval id used for another tool is refused, and runs nothing.
    wrong = await client.call_tool("remote__get_item", {"id": sku}, meta=_approved(approval_id))
    assert wrong.is_error and "was not opened for a call of remote__get_item" in _text(wrong)


def _token(svc: Any, agent: str) -> str:
    return str(svc.token(("agent",), subject=agent, agent_id=agent, permissions=GRANTS))


async def test_sdk_client_over_stdio(start_service: Any, http_upstream: HttpUpstream, tmp_path: Path) -> None:
    svc = await _tool_service(start_service, http_upstream)
    params = StdioServerParameters(
        command=sys.executable,
        args=[*SERVE[1:], "--config", str(_config(tmp_path, svc)), "mcp", "serve"],
        env={"AGENTMESH_TOKEN": _token(svc, "mcp-stdio-agent")},
    )
    async with Client(stdio_client(params), cache=None, read_timeout_seconds=60) as client:
        await _exercise(client, svc, http_upstream, "stdio")


@asynccontextmanager
async def _http_client(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), cache=None, mode=mode) as client,
    ):
        yield client


@pytest.fixture
def serve_http(tmp_path: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[Any]] = []

    def start(config: Path, *extra: str, stderr: Path | None = None) -> str:
        port = free_port()
        proc = subprocess.Popen(
            [*SERVE, "--config", str(config), "mcp", "serve", "--transport", "http", "--port", str(port), *extra],
            stdout=subprocess.DEVNULL,
            stderr=stderr.open("wb") if stderr is not None else None,
        )
        procs.append(proc)
        wait_port(port, proc)
        return f"http://127.0.0.1:{port}/mcp"

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_sdk_client_over_streamable_http(
    start_service: Any, http_upstream: HttpUpstream, tmp_path: Path, serve_http: Any
) -> None:
    svc = await _tool_service(start_service, http_upstream)
    url = serve_http(_config(tmp_path, svc))
    async with httpx2.AsyncClient() as anonymous:
        refused = await anonymous.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    async with _http_client(url, _token(svc, "mcp-http-agent")) as client:
        await _exercise(client, svc, http_upstream, "http")
    # Handshake-era clients (sessions) are served too.
    async with _http_client(url, _token(svc, "legacy"), mode="legacy") as client:
        assert client.protocol_version != "2026-07-28"
        assert "remote__get_item" in {t.name for t in (await client.list_tools()).tools}
        answer = await client.call_tool("remote__get_item", {"id": "legacy"})
        assert answer.structured_content == {"id": "legacy", "qty": 3}


async def test_http_with_a_token_serves_clients_that_send_no_header(
    start_service: Any, http_upstream: HttpUpstream, tmp_path: Path, serve_http: Any
) -> None:
    """Issue 42: `--token` over HTTP (the MCP Inspector sends no header): the URL and the token's tools are
    printed at start, and a client without Authorization acts as the token (a header still wins)."""
    svc = await _tool_service(start_service, http_upstream)
    log = tmp_path / "serve.err"
    url = serve_http(_config(tmp_path, svc), "--token", _token(svc, "inspector"), stderr=log)
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"calculator", "remote__get_item"} <= names
        answer = await client.call_tool("calculator", {"expression": "6*7"})
        assert not answer.is_error and "42" in _text(answer)
    printed = log.read_text(encoding="utf-8")
    assert f"streamable HTTP at {url}" in printed and "act as the --token" in printed
    assert "the token may use" in printed and "calculator" in printed


def test_a_token_without_grants_is_told_what_a_token_must_hold(tmp_path: Path) -> None:
    """An operator's token lists no tools: the start-up line says why (and the process still serves)."""
    from agentmesh.mcpserve.command import describe_token

    class Stub:
        async def list_tools(self, token: str) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[])

    import asyncio
    import io

    out = io.StringIO()
    assert asyncio.run(describe_token(cast(Any, Stub()), "operator-token", out)) == 0
    assert "may use no tool" in out.getvalue() and "--permission" in out.getvalue()


def test_a_token_over_http_on_a_public_address_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"auth": {"key": TEST_AUTH_KEY}}), encoding="utf-8")
    result = subprocess.run(
        [*SERVE, "--config", str(config), "mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--token", "t"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "loopback" in result.stderr
