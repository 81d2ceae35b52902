"""`http_request`: a read-only GET/HEAD of an allowlisted URL, size-capped and time-limited.

Writes over HTTP are registered tools of their own (with permissions, approvals and an impact
statement), so this generic tool never changes anything: it only offers GET and HEAD.
"""

from __future__ import annotations

from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from tool_svc.http import HttpTransport, body_output, decode_text, status_error
from tool_svc.model import Invocation, Produced

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {
            "type": "string",
            "pattern": "^https?://",
            "maxLength": 2048,
            "description": "The http(s) URL to read; it must be on the configured allowlist",
            "examples": ["http://127.0.0.1:8080/health"],
        },
        "method": {"type": "string", "enum": ["GET", "HEAD"], "default": "GET"},
        "headers": {
            "type": "object",
            "maxProperties": 20,
            "propertyNames": {"pattern": "^[A-Za-z0-9-]{1,64}$"},
            "additionalProperties": {"type": "string", "maxLength": 1024},
            "description": "Extra request headers",
        },
    },
    "required": ["url"],
    "additionalProperties": False,
}

# Headers a model must not set: they would confuse routing or smuggle credentials of ours.
_FORBIDDEN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "upgrade", "te"})


def make(transport: HttpTransport) -> Any:
    async def run(call: Invocation) -> Produced:
        args = call.arguments
        headers: dict[str, str] = dict(args.get("headers") or {})
        bad = sorted(h for h in headers if h.lower() in _FORBIDDEN_HEADERS)
        if bad:
            raise AgentmeshError(
                ErrorCode.SCHEMA_INVALID,
                f"http_request: header {bad[0]} may not be set",
                violations=[Violation(path=f"$.headers.{bad[0]}", rule="forbidden", hint="remove transport headers")],
            )
        method = args.get("method", "GET")
        body = await transport.request(call.tool, method, args["url"], timeout_s=call.timeout_s, headers=headers)
        if not 200 <= body.status < 300:
            raise status_error(call.tool, body)
        content_type = body.headers.get("content-type", "")
        if method == "HEAD":
            return Produced("structured", value={"status": body.status, "content_type": content_type, "body": None})
        try:
            produced = body_output(call.tool, body)
            payload: Any = produced.value if produced.result_type == "structured" else produced.text
        except AgentmeshError as exc:
            if exc.code != ErrorCode.OUTPUT_INVALID:
                raise
            # A generic reader returns whatever text came back; undecodable bytes are replaced.
            payload, _ = decode_text(body.content)
        return Produced("structured", value={"status": body.status, "content_type": content_type, "body": payload})

    return run
