"""Upstream failures normalized to the agentmesh error vocabulary (docs/design.md §3).

Every adapter turns what its provider answered into one of these, so every provider's failures
look the same to the dispatcher:

| upstream                                   | ErrorCode               | gRPC status          |
|--------------------------------------------|-------------------------|----------------------|
| 429 (Retry-After read)                     | RATE_LIMITED            | RESOURCE_EXHAUSTED   |
| 5xx, Anthropic 529 (overloaded)            | UPSTREAM_UNAVAILABLE    | UNAVAILABLE          |
| connect error, reset, protocol error       | UPSTREAM_UNAVAILABLE    | UNAVAILABLE          |
| timeout (connect/read/total)               | UPSTREAM_TIMEOUT        | DEADLINE_EXCEEDED    |
| 400 "context length" / "too long"          | CONTEXT_LENGTH_EXCEEDED | INVALID_ARGUMENT     |
| 400 content policy / filter                | CONTENT_FILTERED        | INVALID_ARGUMENT     |
| other 400, 409, 413, 422                   | UPSTREAM_REJECTED       | INVALID_ARGUMENT     |
| 401, 403                                   | PROVIDER_AUTH_FAILED    | FAILED_PRECONDITION  |
| 404 (unknown model or path)                | UPSTREAM_NOT_FOUND      | NOT_FOUND            |
| 2xx body that is not the expected shape    | UPSTREAM_UNAVAILABLE    | UNAVAILABLE (not retried) |

Messages quote at most a short excerpt of the upstream's error text and never a request header,
so an API key can never reach an error (the adapters never put it anywhere but the header).
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode

__all__ = [
    "ERROR_BODY_LIMIT",
    "MalformedResponseError",
    "UpstreamError",
    "error_from_status",
    "malformed",
    "parse_retry_after",
]

ERROR_BODY_LIMIT = 300
"""Characters of an upstream error message kept in ours."""

_CONTEXT_LENGTH = re.compile(
    r"context[ _-]?length|context window|maximum context|too many tokens|prompt is too long|"
    r"input is too long|max_tokens.*exceed|reduce the length|string_above_max_length",
    re.IGNORECASE,
)
_CONTENT_FILTER = re.compile(r"content[ _-]?(?:management|filter|policy)|safety system|flagged", re.IGNORECASE)


class UpstreamError(AgentmeshError):
    """A normalized upstream failure; `http_status` is 0 when none was received."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        provider: str,
        http_status: int = 0,
        retryable: bool | None = None,
        retry_after: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        meta = {"provider": provider, **({"http_status": str(http_status)} if http_status else {}), **(metadata or {})}
        super().__init__(code, message, retryable=retryable, retry_after=retry_after, metadata=meta)
        self.http_status = http_status
        self.provider = provider


class MalformedResponseError(UpstreamError):
    """The upstream answered 2xx with a body we cannot read (never surfaced as a KeyError)."""


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_BODY_LIMIT else text[: ERROR_BODY_LIMIT - 3] + "..."


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from `retry-after` (seconds or HTTP date) or `retry-after-ms`; None when absent/bad."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _upstream_message(body: bytes | str) -> tuple[str, str]:
    """(message, type/code) from an OpenAI- or Anthropic-style error body, or the raw text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        data: Any = json.loads(text)
    except ValueError:
        return _clip(text), ""
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        kind = " ".join(str(err.get(k, "")) for k in ("type", "code") if err.get(k))
        return _clip(str(err.get("message", ""))), kind
    if isinstance(err, str):
        return _clip(err), ""
    return _clip(text), ""


def error_from_status(
    provider: str, status: int, body: bytes | str, headers: Mapping[str, str] | None = None
) -> UpstreamError:
    """The typed error for a non-2xx upstream answer."""
    message, kind = _upstream_message(body)
    detail = f"{provider} answered HTTP {status}" + (f" ({kind})" if kind else "") + (f": {message}" if message else "")
    meta = {"upstream_error_type": kind} if kind else {}
    haystack = f"{kind} {message}"
    if status == 429:
        retry_after = parse_retry_after(headers or {})
        return UpstreamError(
            ErrorCode.RATE_LIMITED,
            detail,
            provider=provider,
            http_status=status,
            retry_after=retry_after,
            metadata=meta,
        )
    if status >= 500:  # 500-599, including Anthropic's 529 "overloaded"
        retry_after = parse_retry_after(headers or {})
        return UpstreamError(
            ErrorCode.UPSTREAM_UNAVAILABLE,
            detail,
            provider=provider,
            http_status=status,
            retryable=True,
            retry_after=retry_after,
            metadata=meta,
        )
    if status in (401, 403):
        return UpstreamError(
            ErrorCode.PROVIDER_AUTH_FAILED,
            f"{provider} refused agentmesh's credentials (HTTP {status})" + (f": {message}" if message else ""),
            provider=provider,
            http_status=status,
            metadata=meta,
        )
    if status == 404:
        return UpstreamError(ErrorCode.UPSTREAM_NOT_FOUND, detail, provider=provider, http_status=status, metadata=meta)
    if _CONTEXT_LENGTH.search(haystack):
        return UpstreamError(
            ErrorCode.CONTEXT_LENGTH_EXCEEDED, detail, provider=provider, http_status=status, metadata=meta
        )
    if _CONTENT_FILTER.search(haystack):
        return UpstreamError(ErrorCode.CONTENT_FILTERED, detail, provider=provider, http_status=status, metadata=meta)
    return UpstreamError(ErrorCode.UPSTREAM_REJECTED, detail, provider=provider, http_status=status, metadata=meta)


def malformed(provider: str, what: str, http_status: int = 200) -> MalformedResponseError:
    """A 2xx body that is not what the protocol promises; not retried (the call may have been billed)."""
    return MalformedResponseError(
        ErrorCode.UPSTREAM_UNAVAILABLE,
        f"{provider} sent a malformed response: {what}",
        provider=provider,
        http_status=http_status,
        retryable=False,
        metadata={"reason": "malformed_response"},
    )
