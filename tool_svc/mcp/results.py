"""A `tools/call` answer as the executor's Produced, and every failure as a typed error (docs/design.md §16).

- structuredContent -> structured output (the gateway checks it against the outputSchema);
- text blocks only -> text output;
- image, audio and embedded-resource blocks -> stored as session payloads with their media types (a
  text resource, or a blob whose bytes are UTF-8 text, is redacted first), listed in a structured
  output beside the text blocks;
- `isError: true` -> UPSTREAM_REJECTED (ENGINEERING) with the server's text;
- a JSON-RPC error: INVALID_PARAMS -> SCHEMA_INVALID (CONTRACT) with the server's message as the hint;
  METHOD_NOT_FOUND -> UPSTREAM_NOT_FOUND; anything else the server answered -> UPSTREAM_UNAVAILABLE or
  UPSTREAM_REJECTED. Each carries `mcp_error_code`: the server answered, so the outcome is known;
- a closed connection, a timeout, a broken transport -> UPSTREAM_UNAVAILABLE / UPSTREAM_TIMEOUT without
  it: a write that may have reached the server has an unknown outcome (tool_svc.idempotency);
- a result the SDK finds outside the outputSchema -> OUTPUT_INVALID.
Every text quoting the server is redacted before it becomes part of an error.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import mcp_types as types
from mcp import MCPError
from pydantic import ValidationError

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from agentmesh.payloads import PayloadStore
from agentmesh.redact import redact_str, redact_text
from tool_svc.model import Produced, ToolDef

_MAX_ERROR_CHARS = 1000
SERVER_ANSWERED = "mcp_error_code"
"""Metadata key on errors the server itself answered (its JSON-RPC error code, or "is_error")."""


def _clip(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _texts(blocks: list[types.ContentBlock]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, types.TextContent))


def tool_error(tool: ToolDef, result: types.CallToolResult) -> AgentmeshError:
    """`isError: true`: the tool ran and failed; ENGINEERING, with the server's text."""
    said = _clip(redact_str(_texts(result.content))) or "no text"
    return AgentmeshError(
        ErrorCode.UPSTREAM_REJECTED,
        f"{tool.name}: MCP server {tool.mcp_server} reported an error: {said}",
        fallback_tool=tool.fallback_tool,
        metadata={SERVER_ANSWERED: "is_error"},
    )


def protocol_error(tool: ToolDef, exc: MCPError) -> AgentmeshError:
    """A JSON-RPC error: the server's (it answered) or the SDK's own (connection closed, timed out)."""
    said = _clip(redact_str(exc.message or ""), 500)
    fallback = tool.fallback_tool
    code = exc.code
    if code == types.CONNECTION_CLOSED:
        return AgentmeshError(
            ErrorCode.UPSTREAM_UNAVAILABLE,
            f"{tool.name}: the connection to MCP server {tool.mcp_server} closed during the call",
            fallback_tool=fallback,
        )
    if code == types.REQUEST_TIMEOUT:
        return AgentmeshError(
            ErrorCode.UPSTREAM_TIMEOUT,
            f"{tool.name}: MCP server {tool.mcp_server} did not answer in time",
            fallback_tool=fallback,
        )
    answered = {SERVER_ANSWERED: str(code)}
    if code == types.INVALID_PARAMS:
        return AgentmeshError(
            ErrorCode.SCHEMA_INVALID,
            f"{tool.name}: the MCP server rejected the arguments: {said}",
            violations=[Violation(path="$", rule="server", expected="arguments the server accepts", hint=said)],
            metadata=answered,
        )
    if code == types.METHOD_NOT_FOUND:
        return AgentmeshError(
            ErrorCode.UPSTREAM_NOT_FOUND,
            f"{tool.name}: MCP server {tool.mcp_server} does not know the call: {said}",
            fallback_tool=fallback,
            metadata=answered,
        )
    transient = code == types.INTERNAL_ERROR or -32099 <= code <= -32000
    return AgentmeshError(
        ErrorCode.UPSTREAM_UNAVAILABLE if transient else ErrorCode.UPSTREAM_REJECTED,
        f"{tool.name}: MCP server {tool.mcp_server} answered error {code}: {said}",
        fallback_tool=fallback,
        metadata=answered,
    )


def invalid_answer(tool: ToolDef, exc: Exception) -> AgentmeshError:
    """The SDK refused the answer: structured content outside the outputSchema, or not a CallToolResult."""
    if isinstance(exc, ValidationError):
        detail = f"not a valid tools/call result ({exc.error_count()} problems)"
    else:
        detail = _clip(redact_str(str(exc)), 500)
    return AgentmeshError(
        ErrorCode.OUTPUT_INVALID,
        f"{tool.name}: MCP server {tool.mcp_server} answered {detail}",
        fallback_tool=tool.fallback_tool,
        metadata={SERVER_ANSWERED: "invalid_result"},
    )


def _decode(data: str, tool: ToolDef, what: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise AgentmeshError(
            ErrorCode.OUTPUT_INVALID,
            f"{tool.name}: MCP server {tool.mcp_server} sent {what} that is not base64",
            fallback_tool=tool.fallback_tool,
            metadata={SERVER_ANSWERED: "invalid_result"},
        ) from None


async def _stored(
    payloads: PayloadStore | None, session_id: str, content: bytes, media_type: str, tool: ToolDef
) -> dict[str, Any]:
    """A payload's reference for the output; without a store, what it was (the bytes are dropped)."""
    if payloads is None:
        return {"media_type": media_type, "size_bytes": len(content), "stored": False}
    try:
        ref = await payloads.put(session_id, content, media_type)
    except AgentmeshError as exc:
        if exc.code not in (ErrorCode.INVALID_REQUEST, ErrorCode.PAYLOAD_TOO_LARGE):
            raise
        raise AgentmeshError(
            ErrorCode.OUTPUT_INVALID if exc.code == ErrorCode.INVALID_REQUEST else ErrorCode.PAYLOAD_TOO_LARGE,
            f"{tool.name}: content from MCP server {tool.mcp_server} cannot be stored: {exc.message}",
            fallback_tool=tool.fallback_tool,
            metadata={SERVER_ANSWERED: "invalid_result"},
        ) from None
    return {"ref_id": ref.ref_id, "media_type": ref.media_type, "size_bytes": ref.size_bytes, "sha256": ref.sha256}


async def _block(
    block: types.ContentBlock, tool: ToolDef, payloads: PayloadStore | None, session_id: str
) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, types.ImageContent | types.AudioContent):
        content = _decode(block.data, tool, block.type)
        return {"type": block.type, **await _stored(payloads, session_id, content, block.mime_type, tool)}
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            # Stored as it is, it would bypass the redaction of outputs.
            text, redacted = redact_text(resource.text)
            media_type = resource.mime_type or "text/plain; charset=utf-8"
            entry = await _stored(payloads, session_id, text.encode("utf-8", "replace"), media_type, tool)
            return {"type": "resource", "uri": resource.uri, "redacted": redacted, **entry}
        content = _decode(resource.blob, tool, "a resource")
        media_type = resource.mime_type or "application/octet-stream"
        # A blob that is text (whatever its media type says) goes through the redactor too: issue 39
        # found a key in a base64 blob stored as is. Bytes that are not UTF-8 are binary: kept.
        try:
            decoded = content.decode("utf-8")
        except UnicodeDecodeError:
            decoded = None
        head: dict[str, Any] = {"type": "resource", "uri": resource.uri}
        if decoded is not None:
            cleaned, was_redacted = redact_text(decoded)
            content = cleaned.encode("utf-8", "replace")
            head["redacted"] = was_redacted
        return {**head, **await _stored(payloads, session_id, content, media_type, tool)}
    # A resource link: a pointer, kept as it is.
    link: dict[str, Any] = {"type": "resource_link", "uri": block.uri, "name": block.name}
    if block.mime_type:
        link["media_type"] = block.mime_type
    return link


async def produced(
    tool: ToolDef, result: types.CallToolResult, payloads: PayloadStore | None, session_id: str
) -> Produced:
    """The output of a successful call (raises the typed error of a failed one)."""
    if result.is_error:
        raise tool_error(tool, result)
    if result.structured_content is not None:
        return Produced("structured", value=result.structured_content)
    blocks = result.content
    if all(isinstance(b, types.TextContent) for b in blocks):
        return Produced("text", text=_texts(blocks))
    return Produced("structured", value={"content": [await _block(b, tool, payloads, session_id) for b in blocks]})
