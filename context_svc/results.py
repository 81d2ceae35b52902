"""A tool result as the session log keeps it, and read back (GetToolResult, issue 39).

An appended result is the truth a resumed run continues with: the dispatcher reads it back instead
of running the call again (a second run could end otherwise, e.g. RATE_LIMITED then OK, and its
append would conflict with the first for good). The log keeps the rendered content plus the typed
parts (error, correction, pending approval, result type, redaction), so the result comes back typed;
an output context_svc offloaded comes back as its ref and digest.
"""

from __future__ import annotations

from agentmesh.payloads import StoredPayload
from context_svc.model import Message, ToolOutcome

__all__ = ["offload_header", "outcome_of", "output_header"]

_REDACTED = " (secrets redacted)"


def offload_header(what: str, ref: StoredPayload) -> str:
    """The first line of offloaded content: where the whole is and how to read it."""
    return (
        f"[{what} stored as {ref.ref_id} ({ref.size_bytes} bytes, {ref.media_type}); this is a digest, "
        f"read more with read_payload(ref_id, json_path | line_range)]"
    )


def output_header(name: str, *, redacted: bool) -> str:
    """What precedes an inline output in the log (its own line)."""
    return f"[tool {name} ok{_REDACTED if redacted else ''}]\n"


def outcome_of(message: Message) -> ToolOutcome:
    """The tool result a ROLE_TOOL message records, typed as it was appended."""
    call_id, name = message.tool_call_id, message.name
    if message.error is not None:
        return ToolOutcome(call_id, name, error=message.error, correction=message.correction)
    if message.pending is not None:
        return ToolOutcome(call_id, name, pending=message.pending)
    content, flags, kept = message.content, _REDACTED if message.redacted else "", message.structured
    if message.ref is not None:
        header = offload_header(f"tool {name} ok{flags}; output", message.ref) + "\n"
        digest = content[len(header) :] if content.startswith(header) else content
        return ToolOutcome(call_id, name, ref=message.ref, digest=digest, structured=kept, redacted=message.redacted)
    header = output_header(name, redacted=message.redacted)
    inline = content[len(header) :] if content.startswith(header) else content
    return ToolOutcome(call_id, name, inline=inline, structured=kept, redacted=message.redacted)
