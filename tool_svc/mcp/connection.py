"""One supervised client per configured MCP server and tool_svc replica (docs/design.md §16).

A supervisor task owns the SDK's `Client` (entered and left in that task, as anyio requires): it connects
(a stdio server is started as a child process; streamable HTTP needs no process), lists the tools and
reports them, then keeps the connection until it breaks: the server process exits (its stderr ends), a
call finds the connection closed, or the periodic re-listing fails. Then it reports the server down with
the reason, waits (`restart_initial_s`, doubling up to `restart_max_s`) and connects again, which restarts
a stdio server. Calls run in the callers' tasks on the shared client; a transport failure inside the SDK
cancels only the supervisor.

Tool list changes: `notifications/tools/list_changed` (handshake-era connections) and a
`subscriptions/listen` stream (2026-07-28) both trigger a re-listing; the periodic re-listing catches a
server that says nothing.

A stdio server's environment is its configured `env` plus PATH and HOME, nothing else of ours: the SDK
adds its own allow-list (LOGNAME, SHELL, TERM, USER), which the process is started without (`env -u`).

Traces: the SDK puts the caller's trace context (the mount's `tools/call` CLIENT span, and the baggage
holding the request id) into each request's `params._meta`, as the MCP spec's trace propagation says; over
streamable HTTP the SDK sends it from a task of its own, so `McpHttpTransport` reads it back from the
JSON-RPC body and sends the request in an HTTP CLIENT span of that trace, with `traceparent` and
`x-request-id` headers (agentmesh.httptrace). Requests made outside any call (listings, the change
stream) carry no trace context and get neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import baggage, propagate, trace
from opentelemetry import context as otel_context

from agentmesh import __version__
from agentmesh.config import McpServerSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.httptrace import HttpClientSpan
from agentmesh.redact import redact_str
from agentmesh.semconv import BAGGAGE_REQUEST_ID
from tool_svc.mcp.catalog import ListedTool
from tool_svc.mcp.stderr import StderrPump

log = logging.getLogger("tool_svc.mcp")
# httpx2 logs every request at INFO with its full URL; keep only problems (as tool_svc.http does for httpx).
logging.getLogger("httpx2").setLevel(logging.WARNING)

ToolsCallback = Callable[["McpConnection", "list[ListedTool] | None", str], None]
"""Called with the server's tools when (re)listed, or None and the reason when it went down."""

KEPT_ENV = ("PATH", "HOME")
_MAX_PAGES = 100


def _reason(exc: BaseException) -> str:
    """A short, redacted description of why a connection failed."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    if isinstance(exc, MCPError):
        text = f"MCP error {exc.code}: {exc.message}"
    elif not isinstance(exc, AgentmeshError):
        text = f"{type(exc).__name__}: {text}"
    text = redact_str(" ".join(text.split()))
    return text[:300]


def listed(tool: types.Tool) -> ListedTool:
    """The SDK's Tool as plain data."""
    hints = tool.annotations
    return ListedTool(
        name=tool.name,
        description=tool.description or "",
        title=tool.title or (hints.title if hints is not None and hints.title else "") or "",
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        read_only_hint=None if hints is None else hints.read_only_hint,
        destructive_hint=None if hints is None else hints.destructive_hint,
        idempotent_hint=None if hints is None else hints.idempotent_hint,
    )


def _caller_context(request: httpx2.Request) -> otel_context.Context | None:
    """The trace context (and baggage) the SDK put in a JSON-RPC request's `params._meta`, if any."""
    if request.method != "POST":
        return None
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("traceparent"), str):
        return None
    carrier = {k: v for k, v in meta.items() if k in ("traceparent", "tracestate", "baggage") and isinstance(v, str)}
    found = propagate.extract(carrier)
    return found if trace.get_current_span(found).get_span_context().is_valid else None


class McpHttpTransport(httpx2.AsyncBaseTransport):
    """httpx2's transport with an HTTP CLIENT span, `traceparent` and `x-request-id` on every request made
    for a call (see the module doc)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, tracer: trace.Tracer) -> None:
        self.inner = inner
        self.tracer = tracer

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        parent = _caller_context(request)
        if parent is None:
            return await self.inner.handle_async_request(request)
        span = HttpClientSpan(self.tracer, request.method, str(request.url), parent=parent)
        rid = baggage.get_baggage(BAGGAGE_REQUEST_ID, parent)
        span.inject(request.headers, str(rid) if rid else None)
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException as exc:
            span.failed(exc)
            raise
        span.answered(response.status_code, response.extensions.get("http_version"))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class McpConnection:
    """The supervised client of one MCP server."""

    def __init__(
        self, settings: McpServerSettings, on_tools: ToolsCallback, tracer: trace.Tracer | None = None
    ) -> None:
        self.settings = settings
        self.tracer = tracer or trace.NoOpTracer()
        self.name = settings.name
        self.on_tools = on_tools
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._broken = asyncio.Event()
        self._broken_reason = ""
        self._wake = asyncio.Event()
        self._refresh = asyncio.Event()
        self.reason = "not connected yet"
        """Why the server is unavailable ("" while it is up)."""
        self.listed_once = asyncio.Event()
        """Set when the first listing (or the first failure to connect) is known."""

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"mcp server {self.name}")

    async def aclose(self) -> None:
        self._closing = True
        self._break("tool_svc is stopping")
        self._wake.set()
        if self._task is None:
            return
        # The SDK stops a stdio server within about 5 s (stdin closed, SIGTERM, SIGKILL).
        done, _ = await asyncio.wait({self._task}, timeout=10)
        if not done:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def _break(self, reason: str) -> None:
        if not self._broken.is_set():
            self._broken_reason = reason
            self._broken.set()

    # -- calls -----------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> types.CallToolResult:
        """One `tools/call` on the live connection. MCPError / SDK errors propagate (results.py maps them);
        with no live connection: UPSTREAM_UNAVAILABLE marked as never sent."""
        client = self._client
        if client is None or self._broken.is_set():
            raise AgentmeshError(
                ErrorCode.UPSTREAM_UNAVAILABLE,
                f"MCP server {self.name} is unavailable: {self.reason or self._broken_reason or 'reconnecting'}",
                metadata={"sent": "no"},
            )
        try:
            # The gateway's own timeout applies too; this one frees the SDK's request slot.
            return await client.call_tool(tool, arguments, read_timeout_seconds=timeout_s + 1.0)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self._break("the connection closed")
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, httpx2.TransportError) as exc:
            self._break(_reason(exc))
            raise MCPError(types.CONNECTION_CLOSED, "Connection closed") from exc

    # -- the supervisor --------------------------------------------------------------------------

    async def _supervise(self) -> None:
        delay = self.settings.restart_initial_s
        while not self._closing:
            started = time.monotonic()
            self._broken = asyncio.Event()
            self._broken_reason = ""
            try:
                await self._connected()
                reason = self._broken_reason or "the connection ended"
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closing or (task is not None and task.cancelling()):
                    raise
                # A cancellation of the SDK's own that escaped it: the connection is gone, not the supervisor.
                reason = self._broken_reason or "the connection was cancelled"
            except Exception as exc:
                reason = self._broken_reason or _reason(exc)
            self._client = None
            if self._closing:
                break
            self.reason = reason
            self.on_tools(self, None, reason)
            self.listed_once.set()
            if time.monotonic() - started > self.settings.restart_max_s:
                delay = self.settings.restart_initial_s  # it ran well for a while: not a crash loop
            log.warning("MCP server %s unavailable (%s); reconnecting in %.2fs", self.name, reason, delay)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            delay = min(delay * 2, self.settings.restart_max_s)

    async def _connected(self) -> None:
        """One connection, from connecting to breaking."""
        # The handshake and the first listing are bounded; the connection itself is not. The scope
        # encloses the client (anyio's scopes nest), and its deadline is lifted once the tools are known.
        with anyio.CancelScope(deadline=anyio.current_time() + self.settings.connect_timeout_s) as scope:
            async with AsyncExitStack() as stack:
                client, _ = await self._open(stack)
                tools = await self._list(client)
                scope.deadline = math.inf
                self._client = client
                self.reason = ""
                self.on_tools(self, tools, "")
                self.listed_once.set()
                log.info("MCP server %s connected (%s): %d tools", self.name, client.protocol_version, len(tools))
                helpers = [asyncio.create_task(self._refresher(client), name=f"mcp refresh {self.name}")]
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    helpers.append(asyncio.create_task(self._listen(client), name=f"mcp listen {self.name}"))
                try:
                    await self._broken.wait()
                finally:
                    self._client = None
                    for helper in helpers:
                        helper.cancel()
                    for helper in helpers:
                        with contextlib.suppress(asyncio.CancelledError, Exception):
                            await helper
        if scope.cancelled_caught:
            raise TimeoutError(f"no answer within connect_timeout_s ({self.settings.connect_timeout_s}s)")

    async def _open(self, stack: AsyncExitStack) -> tuple[Client, StderrPump | None]:
        """The connected client (a stdio server started, its stderr pumped into our logs)."""
        pump: StderrPump | None = None
        if self.settings.transport == "stdio":
            pump = StderrPump(self.name, on_eof=self._refresh.set)
            stack.push_async_callback(pump.aclose)
            pump.start()
            transport: Any = stdio_client(self._stdio_parameters(), errlog=pump.errlog)
        else:
            http = httpx2.AsyncClient(
                transport=McpHttpTransport(httpx2.AsyncHTTPTransport(trust_env=False), self.tracer),
                headers={k: v.get_secret_value() for k, v in self.settings.headers.items()},
                timeout=httpx2.Timeout(self.settings.connect_timeout_s, read=max(300.0, self.settings.timeout_s)),
                trust_env=False,
                follow_redirects=False,
            )
            await stack.enter_async_context(http)
            transport = streamable_http_client(self.settings.url, http_client=http)
        client = Client(
            transport,
            mode=self.settings.mode,
            message_handler=self._on_message,
            read_timeout_seconds=self.settings.connect_timeout_s,
            client_info=types.Implementation(name="agentmesh-tool-svc", version=__version__),
            cache=None,
        )
        await stack.enter_async_context(client)
        if pump is not None:
            # The process has its copy: from now on the pipe ends when the process (and its children) end.
            pump.release_write_end()
        return client, pump

    def _stdio_parameters(self) -> StdioServerParameters:
        env = {k: v.get_secret_value() for k, v in self.settings.env.items()}
        for key in KEPT_ENV:
            if key not in env and key in os.environ:
                env[key] = os.environ[key]
        # The SDK passes its own allow-list of our variables; `env -u` starts the server without them.
        unset = [x for name in DEFAULT_INHERITED_ENV_VARS if name not in env for x in ("-u", name)]
        wrapper = shutil.which("env") or "/usr/bin/env"
        return StdioServerParameters(
            command=wrapper,
            args=[*unset, "--", self.settings.command, *self.settings.args],
            env=env,
            cwd=self.settings.cwd,
        )

    async def _list(self, client: Client) -> list[ListedTool]:
        tools: list[ListedTool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(listed(t) for t in page.tools)
            cursor = page.next_cursor
            if cursor is None or len(tools) > self.settings.max_tools:
                break
        return tools

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._refresh.set()
        elif isinstance(message, Exception):
            log.warning("MCP server %s: %s", self.name, _reason(message))

    async def _refresher(self, client: Client) -> None:
        """Re-lists on a change notice, on the stderr's end (has the process gone?) and periodically."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._refresh.wait(), self.settings.health_interval_s)
            self._refresh.clear()
            try:
                with anyio.fail_after(self.settings.connect_timeout_s):
                    tools = await self._list(client)
            except Exception as exc:
                self._break(f"listing the tools failed: {_reason(exc)}")
                return
            self.on_tools(self, tools, "")

    async def _listen(self, client: Client) -> None:
        """2026-07-28: the `subscriptions/listen` stream of tool list changes, re-opened when it drops."""
        pause = self.settings.restart_initial_s
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    pause = self.settings.restart_initial_s
                    async for _ in subscription:
                        self._refresh.set()
            except ListenNotSupportedError:
                return
            except MCPError as exc:
                if exc.code in (types.METHOD_NOT_FOUND, types.INVALID_REQUEST):
                    return  # not served: the periodic re-listing remains
                log.info("MCP server %s: tool change stream failed: %s", self.name, _reason(exc))
            except (SubscriptionLost, TimeoutError) as exc:
                log.info("MCP server %s: tool change stream lost: %s", self.name, _reason(exc))
            await asyncio.sleep(pause)
            pause = min(pause * 2, self.settings.restart_max_s)

    async def wait_listed(self, timeout_s: float) -> bool:
        """Waits until the first listing (or failure) is known; False when the wait timed out."""
        try:
            await asyncio.wait_for(self.listed_once.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
