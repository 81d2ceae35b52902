"""The low-level MCP server over stdio or streamable HTTP: which token each request acts as, and the key
basis that makes a re-sent request one call (docs/design.md §16)."""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import sys
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from agentmesh import __version__
from agentmesh.mcpserve.bridge import ToolBridge
from agentmesh.mcpserve.results import APPROVAL_META

KEY_META = "agentmesh_idempotency_key"
_SESSION_HEADER = "mcp-session-id"


class NoIdentityError(MCPError):
    """The request carries no token."""

    def __init__(self, how: str) -> None:
        super().__init__(types.INVALID_REQUEST, f"no agentmesh identity: {how}")


def _meta(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Mapping[str, Any]:
    return params.meta or ctx.meta or {}


TokenOf = Callable[[ServerRequestContext[Any, Any]], str]
KeyBasisOf = Callable[[ServerRequestContext[Any, Any], types.CallToolRequestParams], str]


def build_server(bridge: ToolBridge, token_of: TokenOf, key_basis_of: KeyBasisOf) -> Server[Any]:
    """The low-level MCP server: its tool schemas are tool_svc's, exactly."""

    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return await bridge.list_tools(token_of(ctx))

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        meta = _meta(ctx, params)
        approval = str(meta.get(APPROVAL_META) or "")
        return await bridge.call_tool(
            token_of(ctx),
            params.name,
            params.arguments or {},
            key_basis=key_basis_of(ctx, params),
            approval_id=approval,
        )

    return Server(
        "agentmesh",
        version=__version__,
        instructions="agentmesh's governed tools: every call is validated, permission-checked, rate-limited, "
        "approval-gated for writes and redacted by agentmesh's tool gateway.",
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def _explicit_key(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> str:
    named = _meta(ctx, params).get(KEY_META)
    return f"client-key\n{named}" if named else ""


async def serve_stdio(bridge: ToolBridge, token: str) -> None:
    from mcp.server.stdio import stdio_server

    session = secrets.token_hex(16)  # one client per process: the process is the session

    def key_basis(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> str:
        return _explicit_key(ctx, params) or f"stdio\n{session}\n{ctx.request_id!r}"

    server = build_server(bridge, lambda ctx: token, key_basis)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def bearer_token(headers: Mapping[str, str] | None) -> str:
    """The token of `Authorization: Bearer <token>` ("" without one)."""
    value = (headers or {}).get("authorization", "")
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _request_headers(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, str]:
    request = ctx.request
    headers = getattr(request, "headers", None)
    return headers if headers is not None else {}


def _http_token_of(default: str) -> TokenOf:
    """Each request's bearer token, else `default` (the --token of a loopback server), else NoIdentityError."""

    def token_of(ctx: ServerRequestContext[Any, Any]) -> str:
        token = bearer_token(_request_headers(ctx)) or default
        if not token:
            raise NoIdentityError("send Authorization: Bearer <token>")
        return token

    return token_of


def _http_key_basis(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> str:
    explicit = _explicit_key(ctx, params)
    if explicit:
        return explicit
    session = _request_headers(ctx).get(_SESSION_HEADER, "")
    if session:
        return f"http\n{session}\n{ctx.request_id!r}"
    # A 2026-07-28 request has no session to repeat it in: it is its own call.
    return f"http-once\n{secrets.token_hex(16)}"


def require_bearer(app: Any, *, default_token: str = "") -> Any:
    """ASGI wrapper: an HTTP request without `Authorization: Bearer` is answered 401 before MCP sees it
    (unless the server acts as a default token)."""

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and not default_token:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not bearer_token(headers):
                body = b'{"error": "send Authorization: Bearer <agentmesh token>"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="agentmesh"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def endpoint_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/mcp"


async def serve_http(bridge: ToolBridge, host: str, port: int, default_token: str = "", out: Any = None) -> None:
    import uvicorn

    server = build_server(bridge, _http_token_of(default_token), _http_key_basis)
    app = require_bearer(server.streamable_http_app(host=host), default_token=default_token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    running = uvicorn.Server(config)
    serving = asyncio.create_task(running.serve())
    while not running.started and not serving.done():  # noqa: ASYNC110 (uvicorn offers a flag, no event)
        await asyncio.sleep(0.05)
    if running.started:
        who = (
            "requests without Authorization act as the --token"
            if default_token
            else "each request sends Authorization: Bearer <agentmesh token>"
        )
        print(
            f"agentmesh mcp serve: streamable HTTP at {endpoint_url(host, port)} ({who})",
            file=out or sys.stderr,
            flush=True,
        )
    await serving
