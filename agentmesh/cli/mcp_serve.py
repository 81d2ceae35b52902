"""`agentmesh mcp serve`: agentmesh's governed tools to any MCP client, over stdio or streamable HTTP
(docs/design.md §16).

Every MCP request becomes a call of tool_svc's gRPC API made with the caller's own token (forwarded,
opaque, as `x-agentmesh-identity`; tool_svc verifies it): `tools/list` is ListTools of the tools the
token may use (unavailable ones left out), `tools/call` is ExecuteTool, so each call goes through the
whole gateway (validation, permissions, approvals, rate limits, breakers, redaction, offload).

The token: over stdio from `--token` or $AGENTMESH_TOKEN (one client per process); over HTTP from each
request's `Authorization: Bearer <token>`, else `--token`/$AGENTMESH_TOKEN (for clients that cannot send a
header; then only on a loopback address, since every local caller acts as that token), else 401. What the
token may use is its grants (`environment:group:access`): an agent's token with grants lists tools, an
operator's alone lists none, which the start-up line says. Over HTTP the endpoint's URL is printed at start.

Exactly once: a call's idempotency key is derived from the token, the MCP session (the `Mcp-Session-Id`
of a handshake-era HTTP session; one per process over stdio) and the JSON-RPC request id, so a request
the client re-sends is not run twice. A 2026-07-28 HTTP request has no session: unless the client names
a key (`_meta.agentmesh_idempotency_key`), each request is its own call. A write that needs an approval
answers a tool error naming the approval id (also in the result's `_meta`); after an operator approves
it (ResolveApproval), which runs the call, the client repeats the call with
`_meta.agentmesh_approval_id` and gets that run's result: the effect happens once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import secrets
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
import grpc.aio
import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from agentmesh import __version__
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import Settings
from agentmesh.errors import AgentmeshError, ErrorCode, model_text
from agentmesh.rpc.channels import create_channel
from agentmesh.rpc.status import from_detail, from_rpc_error
from agentmesh.v1 import common_pb2, tool_pb2, tool_pb2_grpc

log = logging.getLogger("agentmesh.mcp")

TOKEN_ENV = "AGENTMESH_TOKEN"
APPROVAL_META = "agentmesh_approval_id"
KEY_META = "agentmesh_idempotency_key"
_SESSION_HEADER = "mcp-session-id"
# How long a repeat waits, in total, for a call another request is still running.
_IN_PROGRESS_WAIT_S = 30.0

T = tool_pb2


class NoIdentityError(MCPError):
    """The request carries no token."""

    def __init__(self, how: str) -> None:
        super().__init__(types.INVALID_REQUEST, f"no agentmesh identity: {how}")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _meta(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Mapping[str, Any]:
    return params.meta or ctx.meta or {}


def _text_result(text: str, meta: dict[str, Any] | None = None, *, error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error, _meta=meta)


def error_result(err: AgentmeshError) -> types.CallToolResult:
    """A tool error the model can read (agentmesh's structured error text), its fields in `_meta`."""
    meta: dict[str, Any] = {"agentmesh/error_code": err.code.name, "agentmesh/error_class": err.error_class.name}
    if err.missing_permission:
        meta["agentmesh/missing_permission"] = err.missing_permission
    for key in ("settlement_id", "approval_id"):
        if key in err.metadata:
            meta[f"agentmesh/{key}"] = err.metadata[key]
    return _text_result(model_text(err), meta, error=True)


def pending_result(pending: common_pb2.PendingApproval) -> types.CallToolResult:
    """A write waiting for an operator: a tool error naming the approval, and how to complete the call."""
    text = (
        f"approval required: {pending.plan.name} needs an operator's approval before it runs "
        f"(approval id {pending.approval_id}; impact: {pending.impact or 'not stated'}). Nothing ran. "
        f"Once an operator has approved {pending.approval_id} (ResolveApproval, arguments_sha256 "
        f"{pending.arguments_sha256}), call {pending.plan.name} again with the same arguments and "
        f'_meta {{"{APPROVAL_META}": "{pending.approval_id}"}} to get the result of the approved run.'
    )
    meta = {
        "agentmesh/error_code": "APPROVAL_REQUIRED",
        "agentmesh/approval_id": pending.approval_id,
        "agentmesh/arguments_sha256": pending.arguments_sha256,
    }
    return _text_result(text, meta, error=True)


def output_result(result: common_pb2.ToolResult) -> types.CallToolResult:
    """A successful outcome: inline text (and structured content for a JSON object), or the digest and
    payload reference of an offloaded output."""
    out = result.output
    meta: dict[str, Any] = {"agentmesh/replayed": result.stats.replayed, "agentmesh/redacted": out.redacted}
    if out.HasField("ref"):
        ref = out.ref
        meta["agentmesh/payload"] = {
            "ref_id": ref.ref_id,
            "size_bytes": ref.size_bytes,
            "media_type": ref.media_type,
            "sha256": ref.sha256,
        }
        text = (
            f"{out.digest}\n\n(The whole output, {ref.size_bytes} bytes of {ref.media_type}, is stored as "
            f'payload {ref.ref_id}: read parts of it with the read_payload tool, {{"ref_id": "{ref.ref_id}"}}.)'
        )
        return _text_result(text, meta, error=False)
    structured: Any = None
    if out.result_type == common_pb2.RESULT_TYPE_STRUCTURED:
        with contextlib.suppress(ValueError):
            value = json.loads(out.inline)
            structured = value if isinstance(value, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(text=out.inline)], structured_content=structured, is_error=False, _meta=meta
    )


def mcp_tool(spec: common_pb2.ToolSpec) -> types.Tool:
    """A ToolSpec as an MCP tool; the annotations say what the gateway enforces."""
    read = spec.permission.access == common_pb2.ACCESS_MODE_READ
    return types.Tool(
        name=spec.name,
        description=spec.description,
        input_schema=json.loads(spec.input_schema_json or '{"type": "object"}'),
        annotations=types.ToolAnnotations(
            read_only_hint=read,
            destructive_hint=None if read else spec.requires_approval,
            idempotent_hint=spec.idempotent or read,
        ),
    )


class ToolBridge:
    """MCP `tools/list` and `tools/call` over tool_svc's gRPC API, as the calling token."""

    def __init__(self, stub: Any, *, timeout_s: float, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.stub = stub
        self.timeout_s = timeout_s
        self.sleep = sleep

    @staticmethod
    def _metadata(token: str) -> tuple[tuple[str, str], ...]:
        return ((IDENTITY_HEADER, token),)

    async def list_tools(self, token: str) -> types.ListToolsResult:
        try:
            reply = await self.stub.ListTools(
                T.ListToolsRequest(permitted_only=True), metadata=self._metadata(token), timeout=self.timeout_s
            )
        except grpc.RpcError as exc:
            err = from_rpc_error(exc)
            raise MCPError(types.INVALID_REQUEST if _callers_fault(err) else types.INTERNAL_ERROR, str(err)) from None
        return types.ListToolsResult(tools=[mcp_tool(t) for t in reply.tools if not t.unavailable_reason])

    async def _key_of_approval(self, token: str, approval_id: str, name: str) -> str:
        """The idempotency key of the call an approval was opened for (its plan's call id)."""
        reply = await self.stub.GetApproval(
            T.GetApprovalRequest(approval_id=approval_id), metadata=self._metadata(token), timeout=self.timeout_s
        )
        plan = reply.approval.request.plan
        if plan.name != name or not plan.id.startswith("mcp-"):
            raise AgentmeshError(
                ErrorCode.INVALID_REQUEST,
                f"approval {approval_id} was not opened for a call of {name} through MCP; repeat the call "
                "that asked for it",
            )
        return str(plan.id)

    async def call_tool(
        self, token: str, name: str, arguments: Mapping[str, Any], *, key_basis: str, approval_id: str = ""
    ) -> types.CallToolResult:
        try:
            if approval_id:
                key = await self._key_of_approval(token, approval_id, name)
            else:
                key = "mcp-" + _digest(token, key_basis)[:40]
            return await self._execute(token, name, arguments, key)
        except AgentmeshError as err:
            return error_result(err)
        except grpc.RpcError as exc:
            return error_result(from_rpc_error(exc))

    async def _execute(self, token: str, name: str, arguments: Mapping[str, Any], key: str) -> types.CallToolResult:
        request = T.ExecuteToolRequest(
            call=common_pb2.ToolCall(id=key, name=name, arguments_json=json.dumps(dict(arguments))),
            # One payload scope per identity: a later call (read_payload) reads what an earlier one stored.
            session_id="mcp-" + _digest(token)[:32],
            idempotency_key=key,
        )
        waited = 0.0
        while True:
            try:
                reply = await self.stub.ExecuteTool(request, metadata=self._metadata(token), timeout=self.timeout_s)
                break
            except grpc.RpcError as exc:
                err = from_rpc_error(exc)
                if err.metadata.get("reason") != "in_progress" or waited >= _IN_PROGRESS_WAIT_S:
                    raise
                # The same call is running (an approved run, a re-sent request): its outcome is coming.
                pause = min(err.retry_after or 0.5, 2.0)
                await self.sleep(pause)
                waited += pause
        result = reply.result
        kind = result.WhichOneof("outcome")
        if kind == "output":
            return output_result(result)
        if kind == "pending_approval":
            return pending_result(result.pending_approval)
        return error_result(from_detail(result.error))


def _callers_fault(err: AgentmeshError) -> bool:
    return err.code in (ErrorCode.UNAUTHENTICATED, ErrorCode.PERMISSION_DENIED, ErrorCode.INVALID_REQUEST)


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


async def _serve_stdio(bridge: ToolBridge, token: str) -> None:
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


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def endpoint_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/mcp"


async def _serve_http(bridge: ToolBridge, host: str, port: int, default_token: str = "", out: Any = None) -> None:
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
    if transport == "http" and token and not _is_loopback(host):
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
                await _serve_stdio(bridge, token or "")
            else:
                await _serve_http(bridge, host, port, default_token=token)
        finally:
            if described is not None:
                described.cancel()
            await channel.close(None)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0
