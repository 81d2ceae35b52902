"""`read_payload`: read part of an offloaded output of the caller's own session.

The session is the call's `session_id` (set by the dispatcher), never an argument, so one session can
never read another's payloads. Selectors: an RFC 9535 JSONPath, a 1-based inclusive line range or a
0-based half-open byte range. The answer is capped and never offloaded again.
"""

from __future__ import annotations

from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, Violation
from agentmesh.payload_select import check_selectors, select
from agentmesh.payloads import PayloadStore
from tool_svc.cpu import CpuPool
from tool_svc.model import Invocation, Produced

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ref_id": {
            "type": "string",
            "pattern": "^pl_[0-9a-f]{64}$",
            "description": "The ref_id of an offloaded output, from an earlier tool result",
        },
        "json_path": {
            "type": "string",
            "minLength": 1,
            "maxLength": 500,
            "description": "RFC 9535 JSONPath into a JSON payload",
            "examples": ["$.items[10:20]", "$.items[?@.status == 'failed']"],
        },
        "line_start": {"type": "integer", "minimum": 1, "description": "First line (1-based, inclusive)"},
        "line_end": {"type": "integer", "minimum": 1, "description": "Last line (inclusive)"},
        "byte_start": {"type": "integer", "minimum": 0, "description": "First byte (0-based)"},
        "byte_end": {"type": "integer", "minimum": 1, "description": "End byte (exclusive)"},
    },
    "required": ["ref_id"],
    "additionalProperties": False,
    "dependentRequired": {"line_end": ["line_start"], "byte_end": ["byte_start"]},
}


def _violation(exc: InvalidRequestError) -> AgentmeshError:
    field = exc.field.split(".", 1)[0]
    path = {"line_range": "$.line_start", "byte_range": "$.byte_start"}.get(field, f"$.{field}")
    return AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        f"read_payload: {exc.message}",
        violations=[Violation(path=path, rule="selector", hint=exc.message)],
    )


def _cut_utf8(content: bytes, limit: int) -> bytes:
    cut = content[:limit]
    # Do not end inside a multi-byte character.
    return cut.decode("utf-8", "ignore").encode("utf-8") if cut != content else cut


def make(payloads: PayloadStore | None, max_bytes: int, cpu: CpuPool) -> Any:
    async def run(call: Invocation) -> Produced:
        if payloads is None:
            raise AgentmeshError(ErrorCode.FAILED_PRECONDITION, "read_payload: this tool_svc has no payload store")
        args = call.arguments
        line_range = None
        byte_range = None
        if "line_start" in args:
            start = int(args["line_start"])
            line_range = (start, int(args.get("line_end", start + 199)))
        if "byte_start" in args:
            start = int(args["byte_start"])
            byte_range = (start, int(args.get("byte_end", start + max_bytes)))
        json_path = args.get("json_path")
        try:
            check_selectors(json_path, line_range, byte_range)  # before the Redis round trip
            meta, whole = await payloads.get(call.session_id, args["ref_id"])
            if cpu.inline(len(whole)) or (json_path is None and line_range is None):
                # Small content, or a byte range (a slice): cheaper here than a process hop.
                content, partial = select(
                    whole, meta.ref_id, json_path=json_path, line_range=line_range, byte_range=byte_range
                )
            else:
                # Parsing megabytes of JSON for a JSONPath, or splitting them into lines, is CPU-bound.
                content, partial = await cpu.run(
                    select,
                    whole,
                    meta.ref_id,
                    json_path=json_path,
                    line_range=line_range,
                    byte_range=byte_range,
                    timeout_s=call.timeout_s,
                    what="read_payload",
                    fallback_tool=call.tool.fallback_tool,
                )
        except InvalidRequestError as exc:
            raise _violation(exc) from None
        truncated = len(content) > max_bytes
        if truncated:
            content = _cut_utf8(content, max_bytes)
        text = content.decode("utf-8", "replace")
        value: dict[str, Any] = {
            "ref_id": meta.ref_id,
            "media_type": meta.media_type,
            "size_bytes": meta.size_bytes,
            "partial": partial or truncated,
            "content": text,
        }
        if truncated:
            value["truncated"] = (
                f"the selection exceeds {max_bytes} bytes and was cut; narrow it with line_start/line_end, "
                "json_path or byte_start/byte_end"
            )
        return Produced("structured", value=value)

    return run
