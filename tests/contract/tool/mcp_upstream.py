"""An MCP server written with the official SDK (MCPServer), for the MCP tests: run over stdio or HTTP.

`python tests/contract/tool/mcp_upstream.py --transport stdio|http [--port N] --effects FILE`

Tools with names that need mapping (`Echo.Text`, `get-item`, `Ship.Order-NOW`), annotations of every
kind, side effects counted one line per effect in FILE (so a test sees how often a write really ran),
a secret in an output, a large output, an image, a slow tool, an error, a server-side argument check,
a tool that adds a tool (and says so: list_changed), a tool that writes a secret to stderr, one
that reports the process's environment and one whose answer breaks its own outputSchema.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import INVALID_PARAMS, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel

READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)
# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SECRET = "AKIAZ7QW3ER5TY8UI2OP"  # (not AWS's documentation key: that one is a placeholder)


class Item(BaseModel):
    id: str
    qty: int


async def _misshapen(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """A server that breaks its own outputSchema: `Bad.Shape` answers structured content without `qty`."""
    if ctx.method == "tools/call" and (ctx.params or {}).get("name") == "Bad.Shape":
        return {"content": [{"type": "text", "text": '{"id": 7}'}], "structuredContent": {"id": 7}, "isError": False}
    return await call_next(ctx)


def build(effects: Path) -> MCPServer:
    mcp = MCPServer("upstream", log_level="WARNING", middleware=[_misshapen])

    def record(effect: str) -> None:
        with effects.open("a", encoding="utf-8") as out:
            out.write(effect + "\n")

    @mcp.tool(name="Echo.Text", description="Echo a text back.", annotations=READ, structured_output=False)
    def echo(text: str) -> str:
        return "echo:" + text

    @mcp.tool(name="get-item", description="Look up an item of the inventory by id.", annotations=READ)
    def get_item(id: str) -> Item:
        return Item(id=id, qty=3)

    @mcp.tool(name="Bad.Shape", description="An item, in a shape its schema does not allow.", annotations=READ)
    def bad_shape(id: str) -> Item:
        return Item(id=id, qty=1)

    @mcp.tool(name="Ship.Order-NOW", description="Ship an order at once.", annotations=DESTRUCTIVE)
    def ship(order: str) -> str:
        record(f"ship:{order}")
        return f"shipped {order}"

    @mcp.tool(description="Delete an item of the inventory.", annotations=DESTRUCTIVE, structured_output=False)
    def delete_item(id: str) -> str:
        record(f"delete:{id}")
        return f"deleted {id}"

    @mcp.tool(description="Add a note to the inventory log.", annotations=ADDITIVE, structured_output=False)
    def add_note(text: str) -> str:
        record(f"note:{text}")
        return "noted"

    @mcp.tool(description="Show the storage credentials.", annotations=READ, structured_output=False)
    def leak() -> str:
        return f"aws_access_key_id={SECRET} aws_secret_access_key=k8Jd2LmQ/9xZ+vB4nR7tY1wE5sA3fG6hJ0cV2bN4"

    @mcp.tool(description="A large report of n lines.", annotations=READ, structured_output=False)
    def report(lines: int) -> str:
        return "\n".join(f"line {i}: status ok, latency {i % 97} ms" for i in range(lines))

    @mcp.tool(description="A snapshot image of the shelf.", annotations=READ, structured_output=False)
    def snapshot() -> list[TextContent | ImageContent]:
        return [TextContent(text="shelf 4"), ImageContent(data=base64.b64encode(PNG).decode(), mime_type="image/png")]

    @mcp.tool(description="Wait, then answer.", annotations=READ, structured_output=False)
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "waited"

    @mcp.tool(description="Wait, then record an effect.", annotations=ADDITIVE, structured_output=False)
    async def slow_write(seconds: float, tag: str) -> str:
        await asyncio.sleep(seconds)
        record(f"slow:{tag}")
        return "written"

    @mcp.tool(description="The server process id.", annotations=READ, structured_output=False)
    def pid() -> str:
        return str(os.getpid())

    @mcp.tool(description="Always fails.", annotations=READ, structured_output=False)
    def fail() -> str:
        raise ToolError("inventory locked by another user")

    @mcp.tool(description="Accepts even quantities only.", annotations=READ, structured_output=False)
    def even(qty: int) -> str:
        if qty % 2:
            raise MCPError(INVALID_PARAMS, "qty must be an even number of items")
        return f"{qty} ok"

    @mcp.tool(description="Write a line to stderr.", annotations=READ, structured_output=False)
    def shout() -> str:
        print(f"debug: connecting with password=hunter2-secret and key {SECRET}", file=sys.stderr, flush=True)
        return "shouted"

    @mcp.tool(description="The names of the server's environment variables.", annotations=READ)
    def env_names() -> list[str]:
        return sorted(os.environ)

    @mcp.tool(description="Add the late tool.", annotations=ADDITIVE, structured_output=False)
    async def grow(ctx: Context) -> str:
        if not any(t.name == "late_tool" for t in await mcp.list_tools()):

            def late_tool(x: int) -> int:
                """A tool that appeared at run time."""
                return x + 1

            mcp.add_tool(late_tool, name="late_tool", annotations=READ)
        await ctx.notify_tools_changed()  # 2026-07-28 subscribers
        try:
            await ctx.session.send_tool_list_changed()  # handshake-era connections
        except Exception as exc:
            print(f"legacy notification not sent: {exc}", file=sys.stderr)
        return "grown"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--effects", type=Path, required=True)
    parser.add_argument("--require-key", default="", help="http: refuse requests without this X-Upstream-Key")
    parser.add_argument("--collide", action="store_true", help="also list two tools that map to one name")
    parser.add_argument(
        "--headers-log", type=Path, default=None, help="http: append each request's trace headers to this file"
    )
    args = parser.parse_args()
    server = build(args.effects)
    if args.collide:
        server.add_tool(lambda: "a", name="Dup.Name", description="One.", annotations=READ)
        server.add_tool(lambda: "b", name="dup-name", description="Two.", annotations=READ)
    if args.transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    app = server.streamable_http_app()
    key = args.require_key.encode()

    async def keyed(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and args.headers_log is not None:
            # What an upstream sees of the caller's trace: one JSON line per request.
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            seen = {k: headers.get(k, "") for k in ("traceparent", "x-request-id")}
            with args.headers_log.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"method": scope["method"], **seen}) + "\n")
        # The header comes from tool_svc's configuration (tools.mcp_servers[].headers).
        if scope["type"] == "http" and key and dict(scope["headers"]).get(b"x-upstream-key") != key:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"missing X-Upstream-Key"})
            return
        await app(scope, receive, send)

    uvicorn.run(keyed, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
