"""`agentmesh mcp serve`'s entry: checks where the token may come from, dials tool_svc, says what the
token may use, and serves until the client (stdio) or a signal (HTTP) ends it (docs/design.md §16)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from typing import Any

from agentmesh.config import Settings
from agentmesh.mcpserve.bridge import ToolBridge
from agentmesh.mcpserve.transports import is_loopback, serve_http, serve_stdio
from agentmesh.rpc.channels import create_channel
from agentmesh.v1 import tool_pb2_grpc

TOKEN_ENV = "AGENTMESH_TOKEN"


async def describe_token(bridge: ToolBridge, token: str, out: Any = None) -> int:
    """Says how many tools `token` may use (and what a token needs when none); the count, -1 on failure."""
    out = out or sys.stderr
    try:
        listed = await asyncio.wait_for(bridge.list_tools(token), 10.0)
    except Exception as exc:  # the start-up line only: the server still starts
        print(f"agentmesh mcp serve: could not list the token's tools: {exc}", file=out, flush=True)
        return -1
    count = len(listed.tools)
    if count:
        names = ", ".join(t.name for t in listed.tools[:8]) + (", ..." if count > 8 else "")
        print(f"agentmesh mcp serve: the token may use {count} tools: {names}", file=out, flush=True)
    else:
        print(
            "agentmesh mcp serve: the token may use no tool: tools are listed by the token's grants "
            "(environment:group:access), which an operator's token alone does not hold; use an agent's, e.g. "
            "agentmesh token --agent assistant --permission 'dev:builtin.*:read'",
            file=out,
            flush=True,
        )
    return count


def serve_command(
    settings: Settings, *, transport: str, host: str, port: int, token: str | None, timeout_s: float
) -> int:
    """Serves until the client (stdio) or a signal (HTTP) ends it; 2 when stdio has no token."""
    token = token or os.environ.get(TOKEN_ENV, "")
    if transport == "stdio" and not token:
        print(f"agentmesh mcp serve: stdio needs a token: --token or ${TOKEN_ENV}", file=sys.stderr)
        return 2
    if transport == "http" and token and not is_loopback(host):
        print(
            f"agentmesh mcp serve: --token/${TOKEN_ENV} over HTTP makes every caller that token: only on a "
            f"loopback --host, not {host} (callers elsewhere send Authorization: Bearer <token>)",
            file=sys.stderr,
        )
        return 2
    # Our stdout is the MCP channel over stdio: every log line goes to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    async def main() -> None:
        target = settings.services.endpoint("tool").dial_target
        channel = create_channel(target, settings)
        described: asyncio.Task[int] | None = None
        try:
            bridge = ToolBridge(tool_pb2_grpc.ToolServiceStub(channel), timeout_s=timeout_s)  # type: ignore[no-untyped-call]
            # Beside serving, not before it: the start-up line never delays the server.
            if token:
                described = asyncio.create_task(describe_token(bridge, token))
            if transport == "stdio":
                await serve_stdio(bridge, token or "")
            else:
                await serve_http(bridge, host, port, default_token=token)
        finally:
            if described is not None:
                described.cancel()
            await channel.close(None)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0
