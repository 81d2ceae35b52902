"""HTTP for tools: the allowlisted transport and the mapping of an answer (docs/design.md §5);
the executors are `http_tool.py` (registered tools, by their `method`) and `builtin/http_request.py`.

404 -> UPSTREAM_NOT_FOUND, timeout -> UPSTREAM_TIMEOUT, 5xx / refused -> UPSTREAM_UNAVAILABLE (transient),
429 -> RATE_LIMITED (with Retry-After), other non-2xx -> UPSTREAM_REJECTED; every ENGINEERING error names
the tool's fallback. Bodies are read up to a size cap; JSON bodies become structured output, other UTF-8
text becomes text output (structured tools answer OUTPUT_INVALID), undecodable bytes never crash anything.
Redirects are not followed: a redirect could leave the allowlist. Every text quoting an upstream goes
through agentmesh.redact before it becomes part of an error or an output. Every request of a call with
an idempotency key carries an `Idempotency-Key` header derived from it (`idempotency_key_value`), the
same on every retry; no caller-supplied header of that name is ever sent.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from opentelemetry import trace

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.httptrace import TracedTransport
from agentmesh.redact import redact_error, redact_str
from agentmesh.urlallow import Allowlist, safe_url
from tool_svc.model import Produced, ToolDef

_SNIPPET_CHARS = 300

# httpx logs every request at INFO with its full URL (queries may carry secrets); keep only problems.
logging.getLogger("httpx").setLevel(logging.WARNING)
USER_AGENT = "agentmesh-tool-svc/0.1"
IDEMPOTENCY_KEY_HEADER = "idempotency-key"
"""Set by the transport only (from the call's idempotency key), never from a tool's arguments."""


def idempotency_key_value(key: str) -> str:
    """The `Idempotency-Key` header value for a call's idempotency key; "" (no header) without one.

    IETF httpapi draft "The Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header):
    the field is an Item Structured Field whose value is a String (RFC 8941 sf-string), unique per
    operation and opaque to the server. The value is the first 40 hex digits of sha256(key), quoted: the
    same key gives the same value on every attempt, retry and replica, and the upstream learns nothing
    of the task, the call or its arguments from it.
    """
    if not key:
        return ""
    return '"' + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40] + '"'


# --- allowlist: agentmesh.urlallow (provider_svc's spend-alert webhook obeys the same list) ---------


# --- responses -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpBody:
    status: int
    headers: Mapping[str, str]
    content: bytes
    truncated: bool


def decode_text(content: bytes) -> tuple[str, bool]:
    """UTF-8 text, and whether bytes had to be replaced."""
    try:
        return content.decode("utf-8"), False
    except UnicodeDecodeError:
        return content.decode("utf-8", "replace"), True


def snippet(content: bytes) -> str:
    """The start of an upstream body for an error message, secrets masked (it reaches the model)."""
    window = _SNIPPET_CHARS * 4
    text, _ = decode_text(content[:window])
    if len(content) > window:
        # A secret cut at the window's edge would not be recognised: drop the cut token.
        text = text[: max(text.rfind(c) for c in " \t\r\n") + 1] if any(c in text for c in " \t\r\n") else ""
    text = redact_str(text)
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET_CHARS else text[: _SNIPPET_CHARS - 3] + "..."


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return None if parsed is None else max(0.0, parsed.timestamp() - time.time())


def status_error(tool: ToolDef, body: HttpBody) -> AgentmeshError:
    """The typed error of a non-2xx answer (its text redacted of secrets: the body is the upstream's)."""
    return redact_error(_status_error(tool, body))


def _status_error(tool: ToolDef, body: HttpBody) -> AgentmeshError:
    status = body.status
    detail = snippet(body.content)
    said = f": {detail}" if detail else ""
    fallback = tool.fallback_tool
    meta = {"http_status": str(status)}
    if status == 404:
        return AgentmeshError(
            ErrorCode.UPSTREAM_NOT_FOUND,
            f"{tool.name}: upstream answered 404 Not Found{said}",
            fallback_tool=fallback,
            metadata=meta,
        )
    if status == 429:
        return AgentmeshError(
            ErrorCode.RATE_LIMITED,
            f"{tool.name}: upstream answered 429 Too Many Requests{said}",
            retry_after=_retry_after(body.headers),
            fallback_tool=fallback,
            metadata=meta,
        )
    if status >= 500:
        return AgentmeshError(
            ErrorCode.UPSTREAM_UNAVAILABLE,
            f"{tool.name}: upstream answered {status}{said}",
            fallback_tool=fallback,
            metadata=meta,
        )
    if 300 <= status < 400:
        return AgentmeshError(
            ErrorCode.UPSTREAM_REJECTED,
            f"{tool.name}: upstream answered a {status} redirect, which is not followed",
            fallback_tool=fallback,
            metadata=meta,
        )
    return AgentmeshError(
        ErrorCode.UPSTREAM_REJECTED,
        f"{tool.name}: upstream answered {status}{said}",
        fallback_tool=fallback,
        metadata=meta,
    )


def body_output(tool: ToolDef, body: HttpBody) -> Produced:
    """A 2xx body as output: JSON -> structured; text -> text (or OUTPUT_INVALID for structured tools)."""
    if body.truncated:
        raise AgentmeshError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"{tool.name}: upstream answer exceeds the {len(body.content)} byte limit",
            fallback_tool=tool.fallback_tool,
        )
    text, replaced = decode_text(body.content)
    if not replaced:
        try:
            value = json.loads(text, parse_constant=_reject) if text.strip() else None
            return Produced("structured", value=value)
        except ValueError:
            pass
    if tool.result_type == "text":
        return Produced("text", text=text, notes={"invalid_utf8": "true"} if replaced else None)
    kind = "non-UTF-8 bytes" if replaced else "non-JSON text"
    content_type = body.headers.get("content-type", "unknown")
    raise redact_error(
        AgentmeshError(
            ErrorCode.OUTPUT_INVALID,
            f"{tool.name}: upstream answered {body.status} with {kind} (content-type {content_type[:200]}) "
            f"where JSON was expected: {snippet(body.content)!r}",
            fallback_tool=tool.fallback_tool,
            metadata={"http_status": str(body.status)},
        )
    )


def _reject(name: str) -> Any:
    raise ValueError(name)


# --- transport -------------------------------------------------------------------------------------


class HttpTransport:
    """One shared httpx client: no proxies from the environment, no redirects, bounded bodies."""

    def __init__(self, allowlist: Allowlist, max_response_bytes: int, tracer: trace.Tracer | None = None) -> None:
        self.allowlist = allowlist
        self.max_response_bytes = max_response_bytes
        # Every request in a CLIENT span of its own, carrying traceparent and x-request-id (agentmesh.httptrace).
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        self.client = httpx.AsyncClient(
            transport=TracedTransport(httpx.AsyncHTTPTransport(limits=limits), tracer),
            trust_env=False,
            follow_redirects=False,
            headers={"user-agent": USER_AGENT},
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def request(
        self,
        tool: ToolDef,
        method: str,
        url: str,
        *,
        timeout_s: float,
        json_body: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str = "",
    ) -> HttpBody:
        """One request; transport faults become typed errors (the caller's timeout still applies).

        `idempotency_key` is the call's: the request carries the `Idempotency-Key` derived from it (none
        without one); an `Idempotency-Key` among `headers` is never sent."""
        self.allowlist.check(url, tool.name)
        fallback = tool.fallback_tool
        sent = {name: value for name, value in (headers or {}).items() if name.lower() != IDEMPOTENCY_KEY_HEADER}
        derived = idempotency_key_value(idempotency_key)
        if derived:
            sent["Idempotency-Key"] = derived
        try:
            request = self.client.build_request(
                method, url, json=json_body, content=content, headers=sent, timeout=timeout_s
            )
            response = await self.client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Nothing reached the upstream: a write failing here did not run (tool_svc.idempotency).
            code = ErrorCode.UPSTREAM_UNAVAILABLE if isinstance(exc, httpx.ConnectError) else ErrorCode.UPSTREAM_TIMEOUT
            raise AgentmeshError(
                code,
                f"{tool.name}: cannot connect to {safe_url(url)} ({type(exc).__name__})",
                fallback_tool=fallback,
                metadata={"sent": "no"},
            ) from None
        except httpx.TimeoutException:
            raise AgentmeshError(
                ErrorCode.UPSTREAM_TIMEOUT,
                f"{tool.name}: {safe_url(url)} did not answer in time",
                fallback_tool=fallback,
            ) from None
        except (httpx.TransportError, OSError) as exc:
            raise AgentmeshError(
                ErrorCode.UPSTREAM_UNAVAILABLE,
                f"{tool.name}: cannot reach {safe_url(url)} ({type(exc).__name__})",
                fallback_tool=fallback,
            ) from None
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
            raise AgentmeshError(
                ErrorCode.UPSTREAM_REJECTED,
                f"{tool.name}: invalid request: {redact_str(str(exc))}",
                fallback_tool=fallback,
            ) from None
        try:
            chunks: list[bytes] = []
            size = 0
            truncated = False
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size > self.max_response_bytes:
                    chunks.append(chunk[: self.max_response_bytes - (size - len(chunk))])
                    truncated = True
                    break
                chunks.append(chunk)
        except httpx.TimeoutException:
            raise AgentmeshError(
                ErrorCode.UPSTREAM_TIMEOUT, f"{tool.name}: {safe_url(url)} stalled mid-answer", fallback_tool=fallback
            ) from None
        except (httpx.TransportError, OSError) as exc:
            raise AgentmeshError(
                ErrorCode.UPSTREAM_UNAVAILABLE,
                f"{tool.name}: {safe_url(url)} broke off its answer ({type(exc).__name__})",
                fallback_tool=fallback,
            ) from None
        finally:
            await response.aclose()
        headers_out = {k.lower(): v for k, v in response.headers.items()}
        return HttpBody(response.status_code, headers_out, b"".join(chunks), truncated)
