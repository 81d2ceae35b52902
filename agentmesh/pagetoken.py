"""AIP-158 page tokens of the List RPCs (ListTasks, ListApprovals, GetSpendSummary, ListBudgets): opaque,
signed, bound to the filters, expiring. Shared by the services (each list has its own `kind`).

A token is `base64url(json).base64url(hmac)`: the JSON holds the list it pages (`kind`), the keyset
cursor (ms, id) of the last entry served, a hash of the request's filters and an expiry (unix s); the
HMAC-SHA256 is keyed by a key derived from `auth.key` (every replica derives the same one), so a
client can neither forge nor edit a cursor. Every bad token is INVALID_REQUEST (gRPC INVALID_ARGUMENT)
naming `page_token`, with ErrorInfo metadata `reason`:

- `page_token.malformed`: not a token of this list (garbage, truncated, another list's);
- `page_token.signature`: the signature does not match (tampered with, or signed with another key);
- `page_token.filter`: the token was issued for other filters (AIP-158: they must not change);
- `page_token.expired`: older than TOKEN_TTL_S: list again from the first page.

Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

from agentmesh.errors import AgentmeshError, ErrorCode, Violation

__all__ = ["MAX_TOKEN_CHARS", "REASONS", "TOKEN_TTL_S", "PageCursor", "PageTokens", "filter_hash", "page_token_error"]

TOKEN_TTL_S = 3600
MAX_TOKEN_CHARS = 1024
REASONS = ("page_token.malformed", "page_token.signature", "page_token.filter", "page_token.expired")
_DEV_KEY = b"agentmesh page tokens without auth.key"


@dataclass(frozen=True, slots=True)
class PageCursor:
    """Where the next page starts: after the entry (ms, id)."""

    ms: int
    id: str


def page_token_error(reason: str, message: str) -> AgentmeshError:
    """INVALID_REQUEST on `page_token` with ErrorInfo metadata reason = `reason` (one of REASONS)."""
    return AgentmeshError(
        ErrorCode.INVALID_REQUEST,
        f"page_token: {message}",
        violations=[Violation(path="page_token", rule=reason, hint=message)],
        metadata={"field": "page_token", "reason": reason},
    )


def filter_hash(filters: Mapping[str, str | int]) -> str:
    """A short digest of the request's filters (order-independent)."""
    text = json.dumps(dict(sorted(filters.items())), separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class PageTokens:
    """Issues and checks the page tokens of one list (`kind`: "tasks", "approvals", "spend", "budgets")."""

    def __init__(self, secret: str | None, kind: str, ttl_s: int = TOKEN_TTL_S) -> None:
        base = secret.encode() if secret else _DEV_KEY
        self.key = hmac.new(base, b"agentmesh.v1 list page tokens", hashlib.sha256).digest()
        self.kind = kind
        self.ttl_s = ttl_s

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self.key, body, hashlib.sha256).digest()

    def issue(self, cursor: PageCursor, filters: str, *, now: float | None = None) -> str:
        """A token continuing after `cursor` for the filters whose `filter_hash` is `filters`."""
        expires = int((time.time() if now is None else now) + self.ttl_s)
        body = json.dumps(
            {"k": self.kind, "m": cursor.ms, "i": cursor.id, "f": filters, "e": expires},
            separators=(",", ":"),
            ensure_ascii=True,
        ).encode()
        return f"{_b64(body)}.{_b64(self._sign(body))}"

    def parse(self, token: str, filters: str, *, now: float | None = None) -> PageCursor:
        """The cursor of a token issued by `issue` for the same filters; a typed error otherwise."""
        if len(token) > MAX_TOKEN_CHARS:
            raise page_token_error("page_token.malformed", f"too long ({len(token)} characters)")
        body_text, dot, mac_text = token.partition(".")
        try:
            if not dot or not body_text or not mac_text:
                raise ValueError("not two parts")
            body, mac = _unb64(body_text), _unb64(mac_text)
        except (ValueError, binascii.Error):
            raise page_token_error("page_token.malformed", "not a page token of this list") from None
        if not hmac.compare_digest(mac, self._sign(body)):
            raise page_token_error("page_token.signature", "the signature does not match: not issued by agentmesh")
        try:
            data = json.loads(body)
            kind, ms, ident, bound, expires = data["k"], data["m"], data["i"], data["f"], data["e"]
            if not (
                isinstance(kind, str)
                and isinstance(ms, int)
                and isinstance(ident, str)
                and isinstance(bound, str)
                and isinstance(expires, int)
            ):
                raise TypeError("field types")
        except (ValueError, KeyError, TypeError):
            raise page_token_error("page_token.malformed", "not a page token of this list") from None
        if kind != self.kind:
            raise page_token_error("page_token.malformed", f"a token of {kind}, not of {self.kind}")
        if bound != filters:
            raise page_token_error(
                "page_token.filter", "issued for other filters: send the filters of the first page with it"
            )
        if expires < (time.time() if now is None else now):
            raise page_token_error("page_token.expired", "expired: list again from the first page")
        return PageCursor(ms, ident)
