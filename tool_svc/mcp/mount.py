"""Every configured MCP server mounted in the registry, and the executor of their tools (docs/design.md §16).

At start-up: each streamable HTTP URL must match `tools.http_allowlist` and each stdio command must exist
(else ConfigError: tool_svc exits 2); every server is connected at once and tool_svc waits up to each
server's `connect_timeout_s` for its first listing. Two tools of one server mapping to one registry name
(at start-up or in any later listing) leave that name listed but unavailable, with the reason naming
both, and a warning: never a crash, never a refused start (issue 39). A server that cannot be reached
does not stop tool_svc (it stays SERVING): the server is retried with backoff, and its tools appear when it answers.

Later listings (a change notice, a reconnect) replace the server's entries; a collision or a refused
schema then leaves those tools out and is logged. While a server is down its tools stay listed,
unavailable with the reason; calls to them fail UPSTREAM_UNAVAILABLE without being sent.

Every call is a CLIENT span `tools/call <tool>` (the OTel MCP conventions: `mcp.method.name`,
`gen_ai.tool.name`, `gen_ai.operation.name` execute_tool, `network.transport` pipe or tcp, the server's
address; `error.type` the JSON-RPC error code, `tool_error` for an isError result, or the failure's
class); the SDK carries its context to the server in `params._meta` (and over HTTP, connection.py in
`traceparent` and `x-request-id` headers of an HTTP span under it).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from typing import Any
from urllib.parse import urlsplit

from mcp import MCPError
from opentelemetry import trace
from pydantic import ValidationError

from agentmesh.config import ConfigError, ToolsSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.httptrace import set_error_type
from agentmesh.payloads import PayloadStore
from agentmesh.semconv import GEN_AI_OPERATION_NAME, GEN_AI_TOOL_NAME
from agentmesh.urlallow import Allowlist
from tool_svc.mcp import results
from tool_svc.mcp.catalog import ListedTool, catalog
from tool_svc.mcp.connection import McpConnection
from tool_svc.mcp.stderr import redact_sdk_logs
from tool_svc.model import Invocation, Produced
from tool_svc.registry import ToolRegistry

log = logging.getLogger("tool_svc.mcp")


def check_settings(settings: ToolsSettings, allowlist: Allowlist) -> None:
    """What start-up refuses (ConfigError): a URL off the HTTP allowlist, a command that is not there."""
    for server in settings.mcp_servers:
        where = f"tools.mcp_servers: {server.name}"
        if server.transport == "http" and not allowlist.allows(server.url):
            raise ConfigError(
                f"{where}: url {server.url.split('?', 1)[0]!r} does not match tools.http_allowlist "
                "(the allowlist HTTP tools use: scheme://host[:port]/path-prefix)"
            )
        if server.transport == "stdio" and shutil.which(server.command) is None:
            raise ConfigError(f"{where}: command {server.command!r} is not an executable file or on PATH")


class McpMount:
    """The configured MCP servers: their connections, their registry entries, their executor."""

    def __init__(
        self,
        settings: ToolsSettings,
        registry: ToolRegistry,
        payloads: PayloadStore | None,
        tracer: trace.Tracer | None = None,
    ) -> None:
        check_settings(settings, registry.allowlist)
        redact_sdk_logs()
        self.settings = settings
        self.registry = registry
        self.payloads = payloads
        self.tracer = tracer or trace.NoOpTracer()
        self.connections: dict[str, McpConnection] = {
            s.name: McpConnection(s, self._on_tools, self.tracer) for s in settings.mcp_servers
        }
        self.problems: dict[str, list[str]] = {}
        """What the last listing of each server could not mount, and why."""

    async def start(self) -> None:
        """Connects every server and waits for the first listings."""
        for connection in self.connections.values():
            connection.start()
        await asyncio.gather(*(c.wait_listed(c.settings.connect_timeout_s + 1.0) for c in self.connections.values()))

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.connections.values()), return_exceptions=True)

    def _on_tools(self, connection: McpConnection, tools: list[ListedTool] | None, reason: str) -> None:
        """A listing (or a server gone down) becomes the server's registry entries."""
        server = connection.settings
        if tools is None:
            self.registry.set_mcp_tools(server.name, None, reason)
            return
        found = catalog(tools, server, self.settings.retry)
        collided = {c.name: c.describe(server.name) for c in found.collisions}
        problems = list(collided.values())
        problems += [f"MCP server {server.name}: {p}" for p in found.skipped]
        problems += self.registry.set_mcp_tools(server.name, list(found.tools), "", collided)
        if problems != self.problems.get(server.name, []):
            for problem in problems:
                log.warning("not mounted: %s", problem)
        self.problems[server.name] = problems

    async def __call__(self, call: Invocation) -> Produced:
        """The executor of MCP tools (ToolDef.executor == "mcp")."""
        tool = call.tool
        connection = self.connections.get(tool.mcp_server)
        if connection is None:
            raise AgentmeshError(
                ErrorCode.UPSTREAM_UNAVAILABLE,
                f"{tool.name}: MCP server {tool.mcp_server} is not configured on this replica",
                metadata={"sent": "no"},
                fallback_tool=tool.fallback_tool,
            )
        arguments: dict[str, Any] = call.arguments if isinstance(call.arguments, dict) else {}
        with self.tracer.start_as_current_span(
            f"tools/call {tool.mcp_tool}",
            kind=trace.SpanKind.CLIENT,
            attributes=_span_attributes(connection, tool.mcp_tool),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                answer = await connection.call(tool.mcp_tool, arguments, call.timeout_s)
            except AgentmeshError as exc:
                set_error_type(span, exc.code.name, exc.message)
                raise exc.replace(message=f"{tool.name}: {exc.message}", fallback_tool=tool.fallback_tool) from None
            except MCPError as exc:
                set_error_type(span, str(exc.code), exc.message)
                raise results.protocol_error(tool, exc) from None
            except ValidationError as exc:
                set_error_type(span, "invalid_answer")
                raise results.invalid_answer(tool, exc) from None
            except RuntimeError as exc:
                # The SDK checks structuredContent against the outputSchema it listed (and says so).
                set_error_type(span, type(exc).__qualname__)
                if "structured content" not in str(exc) and "schema" not in str(exc):
                    raise
                raise results.invalid_answer(tool, exc) from None
            except BaseException as exc:
                set_error_type(span, type(exc).__qualname__)
                raise
            if answer.is_error:
                set_error_type(span, "tool_error")  # the MCP conventions' name for an isError result
        return await results.produced(tool, answer, self.payloads, call.session_id)


def _span_attributes(connection: McpConnection, tool: str) -> dict[str, Any]:
    """The MCP conventions' attributes of a `tools/call` CLIENT span."""
    server = connection.settings
    attributes: dict[str, Any] = {
        "mcp.method.name": "tools/call",
        GEN_AI_TOOL_NAME: tool,
        GEN_AI_OPERATION_NAME: "execute_tool",
        "network.transport": "pipe" if server.transport == "stdio" else "tcp",
    }
    if server.transport == "http":
        parts = urlsplit(server.url)
        attributes["server.address"] = parts.hostname or ""
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        if port is not None:
            attributes["server.port"] = port
    return attributes
