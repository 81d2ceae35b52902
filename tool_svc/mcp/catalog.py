"""A server's tool listing as registry entries (docs/design.md §16).

The server's `inputSchema` (and `outputSchema`) is the contract the gateway validates. Its annotations
are hints from a party we do not control: only with `trust_annotations: true` does readOnlyHint make a
tool read, idempotentHint idempotent and destructiveHint (default true) decide the approval; otherwise
every MCP tool is a non-idempotent write that needs approval. The operator's per-tool overrides win over
both. Every tool needs the permission group `mcp.<server>`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmesh.chat import json_depth_exceeds
from agentmesh.config import McpServerSettings, McpToolOverride, ToolRetrySettings
from agentmesh.redact import redact_str
from tool_svc.mcp.names import Collision, assign
from tool_svc.model import Access, Permission, RetryPolicy, ToolDef

MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_BYTES = 256 * 1024
MAX_SCHEMA_DEPTH = 64
MAX_TOOL_NAME = 128
"""MCP: a tool name SHOULD be 1-128 characters; a longer one is not mounted."""


@dataclass(frozen=True)
class ListedTool:
    """One tool as its server lists it (plain data: the SDK's types stay in connection.py)."""

    name: str
    description: str = ""
    title: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    output_schema: Mapping[str, Any] | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None


@dataclass(frozen=True)
class Catalog:
    """A server's listing as ToolDefs, and what could not be mounted (with the reason)."""

    tools: tuple[ToolDef, ...]
    collisions: tuple[Collision, ...] = ()
    skipped: tuple[str, ...] = ()


def group(server: str) -> str:
    """The permission group of a server's tools."""
    return f"mcp.{server}"


def _policy(tool: ListedTool, server: McpServerSettings, override: McpToolOverride) -> tuple[Access, bool, bool]:
    """(access, idempotent, requires_approval) from the override, else the trusted hints, else the safe default."""
    trusted = server.trust_annotations
    access: Access = override.access or ("read" if trusted and tool.read_only_hint is True else "write")
    idempotent = override.idempotent if override.idempotent is not None else trusted and tool.idempotent_hint is True
    if override.requires_approval is not None:
        approval = override.requires_approval
    elif access == "read":
        approval = False
    else:
        # MCP: destructiveHint defaults to true; untrusted, every write is gated.
        approval = tool.destructive_hint is not False if trusted else True
    return access, idempotent, approval


def _schema(value: Mapping[str, Any] | None, what: str) -> Mapping[str, Any] | None:
    """The schema if it is small and shallow enough to check and compile; ValueError otherwise."""
    if value is None:
        return None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"{what} is not plain JSON") from None
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SCHEMA_BYTES:
        raise ValueError(f"{what} is larger than {MAX_SCHEMA_BYTES} bytes")
    if json_depth_exceeds(text, MAX_SCHEMA_DEPTH):
        raise ValueError(f"{what} nests deeper than {MAX_SCHEMA_DEPTH} levels")
    return dict(value)


def _description(tool: ListedTool, server: str, override: McpToolOverride) -> str:
    text = override.description if override.description is not None else (tool.description or tool.title)
    text = " ".join(text.split()) or f"{tool.name} (a tool of MCP server {server})"
    # Shown to the model: nothing secret-shaped, and within the registry's limit.
    text = redact_str(text)
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[: MAX_DESCRIPTION_CHARS - 1] + "…"


def tool_def(
    tool: ListedTool, name: str, server: McpServerSettings, retry: ToolRetrySettings, override: McpToolOverride
) -> ToolDef:
    """The registry entry of one listed tool; ValueError naming what is wrong with it."""
    access, idempotent, approval = _policy(tool, server, override)
    input_schema = _schema(tool.input_schema, "inputSchema")
    output_schema = _schema(tool.output_schema, "outputSchema")
    assert input_schema is not None
    return ToolDef(
        name=name,
        description=_description(tool, server.name, override),
        input_schema=input_schema,
        examples=tuple(override.examples),
        output_schema=output_schema,
        result_type="structured" if output_schema is not None else "text",
        permission=Permission("*", group(server.name), access),
        impact=override.impact or f"calls {tool.name!r} on MCP server {server.name}",
        timeout_s=override.timeout_s or server.timeout_s,
        retry=RetryPolicy(retry.max_attempts, retry.initial_backoff_s, retry.max_backoff_s, retry.max_jitter_s),
        idempotent=idempotent,
        requires_approval=approval,
        fallback_tool=override.fallback_tool,
        executor="mcp",
        mcp_server=server.name,
        mcp_tool=tool.name,
    )


def catalog(listed: Sequence[ListedTool], server: McpServerSettings, retry: ToolRetrySettings) -> Catalog:
    """The registry entries of a listing: disabled tools left out, collisions and bad schemas reported."""
    defaults = McpToolOverride()
    skipped = [
        f"a tool name of {len(t.name)} characters (at most {MAX_TOOL_NAME})"
        for t in listed
        if len(t.name) > MAX_TOOL_NAME
    ]
    enabled = [t for t in listed if 0 < len(t.name) <= MAX_TOOL_NAME and server.tools.get(t.name, defaults).enabled]
    if len(enabled) > server.max_tools:
        skipped.append(f"{len(enabled) - server.max_tools} tools beyond max_tools {server.max_tools} not mounted")
        enabled = enabled[: server.max_tools]
    by_name = {t.name: t for t in enabled}
    overrides = {n: server.tools[n].name for n in by_name if n in server.tools}
    names, collisions = assign(server.tool_prefix, list(by_name), overrides)
    tools: list[ToolDef] = []
    for name, original in sorted(names.items()):
        try:
            tools.append(tool_def(by_name[original], name, server, retry, server.tools.get(original, defaults)))
        except ValueError as exc:
            skipped.append(f"{original!r}: {exc}")
    # A collided name stays listed (as its first tool), unavailable with the reason naming both: the
    # operator sees it in ListTools; neither tool runs (registry.ResolveTool).
    for collision in collisions:
        try:
            first = by_name[collision.first]
            tools.append(tool_def(first, collision.name, server, retry, server.tools.get(first.name, defaults)))
        except ValueError as exc:
            skipped.append(f"{collision.first!r}: {exc}")
    return Catalog(tuple(tools), tuple(collisions), tuple(skipped))
