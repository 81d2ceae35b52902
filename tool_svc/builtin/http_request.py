"""`http_request`: a read-only GET/HEAD of an allowlisted URL, size-capped and time-limited.

Writes over HTTP are registered tools of their own (with permissions, approvals and an impact
statement), so this generic tool never changes anything: it only offers GET and HEAD, and it sends only
harmless request headers (DEFAULT_HEADERS, plus those the tool's `headers_allowed` configuration names).
Any other header (credentials, Proxy-*, method overrides, Host, Forwarded, X-Forwarded-*, ...) is
dropped, never sent, and named in the result's `headers_dropped`, so an allowlisted URL (which may be
the endpoint of an approval-gated write tool) never sees a credential or an override from a model.
`Idempotency-Key` is tool_svc's alone (derived from the call's idempotency key, `tool_svc.http`): one
in the arguments is always dropped, even when `headers_allowed` names it (the registry refuses that).
"""

from __future__ import annotations

from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode
from tool_svc.http import IDEMPOTENCY_KEY_HEADER, HttpTransport, body_output, decode_text, status_error
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
            "description": "Extra request headers; only Accept, Accept-Language, Content-Type, User-Agent, "
            "If-None-Match, If-Modified-Since and Range (and those the configuration allows) are sent, "
            "others are dropped and listed in headers_dropped; Idempotency-Key is always dropped "
            "(agentmesh sets it itself)",
        },
    },
    "required": ["url"],
    "additionalProperties": False,
}

# What a model may send to any allowlisted URL: content negotiation and conditional/partial reads.
DEFAULT_HEADERS = frozenset(
    {"accept", "accept-language", "content-type", "user-agent", "if-none-match", "if-modified-since", "range"}
)
# Message framing is httpx's: never sent from arguments, not even when configured (the registry refuses it).
FRAMING_HEADERS = frozenset(
    {"content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer", "keep-alive", "expect"}
)
# Never sent from arguments and never configurable: framing, and the Idempotency-Key that tool_svc derives
# from the call's key (a model choosing it could make an upstream replay or merge another call's effect).
NEVER_FROM_ARGUMENTS = FRAMING_HEADERS | {IDEMPOTENCY_KEY_HEADER}


def allowed_headers(configured: tuple[str, ...]) -> frozenset[str]:
    """The lower-cased header names a tool may send: the defaults plus its `headers_allowed`."""
    return (DEFAULT_HEADERS | {h.lower() for h in configured}) - NEVER_FROM_ARGUMENTS


def split_headers(headers: dict[str, str], allowed: frozenset[str]) -> tuple[dict[str, str], list[str]]:
    """(the headers to send, the names dropped, sorted)."""
    sent = {name: value for name, value in headers.items() if name.lower() in allowed}
    return sent, sorted(name for name in headers if name.lower() not in allowed)


def make(transport: HttpTransport) -> Any:
    async def run(call: Invocation) -> Produced:
        args = call.arguments
        headers, dropped = split_headers(dict(args.get("headers") or {}), allowed_headers(call.tool.headers_allowed))
        extra: dict[str, Any] = {"headers_dropped": dropped} if dropped else {}
        method = args.get("method", "GET")
        body = await transport.request(
            call.tool,
            method,
            args["url"],
            timeout_s=call.timeout_s,
            headers=headers,
            idempotency_key=call.idempotency_key,
        )
        if not 200 <= body.status < 300:
            raise status_error(call.tool, body)
        content_type = body.headers.get("content-type", "")
        if method == "HEAD":
            return Produced(
                "structured", value={"status": body.status, "content_type": content_type, "body": None, **extra}
            )
        try:
            produced = body_output(call.tool, body)
            payload: Any = produced.value if produced.result_type == "structured" else produced.text
        except AgentmeshError as exc:
            if exc.code != ErrorCode.OUTPUT_INVALID:
                raise
            # A generic reader returns whatever text came back; undecodable bytes are replaced.
            payload, _ = decode_text(body.content)
        return Produced(
            "structured", value={"status": body.status, "content_type": content_type, "body": payload, **extra}
        )

    return run
