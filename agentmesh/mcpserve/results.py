"""tool_svc's messages as what an MCP client reads: tool specs as MCP tools, outcomes (output, pending
approval, error) as `CallToolResult`s (docs/design.md §16)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import mcp_types as types

from agentmesh.errors import AgentmeshError, model_text
from agentmesh.v1 import common_pb2

APPROVAL_META = "agentmesh_approval_id"


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
