"""agentmesh's own signed tokens: mint and verify, and the shape of an API key (docs/design.md §9).

Identity is never a request field: the dispatcher mints a token per task (agent, instance,
environment, roles, permissions, task id, expiry) signed with HMAC-SHA256 under `auth.key`, and
every downstream call carries it in the `x-agentmesh-identity` metadata. The configured key and the
other kinds of credential (API keys, OIDC JWTs) are `agentmesh.authenticator`'s; this module is the
token format alone and imports neither grpc, the stubs nor the configuration.

Token format (v1): ``base64url(claims JSON) "." base64url(HMAC-SHA256(key, first part))``,
unpadded. The signature covers the exact ASCII text of the first part, so nothing is parsed
before the signature is checked.

A token is a bearer credential: never log it, never put it in an error message.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

from agentmesh.errors import UnauthenticatedError
from agentmesh.identity_value import KNOWN_ROLES, Identity

__all__ = ["KEY_PREFIX", "TOKEN_VERSION", "TokenError", "is_api_key", "mint_token", "verify_token"]

TOKEN_VERSION = 1

# A token is a few hundred bytes; refusing huge ones bounds the work an unauthenticated caller causes.
_MAX_TOKEN_CHARS = 16 * 1024
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
# A key's shape is here, below agentmesh.apikeys (which imports this module): no import back.
KEY_PREFIX = "amk_"


def is_api_key(token: str) -> bool:
    """Whether `token` has the shape of an API key (cheap: checked before any lookup)."""
    return token.startswith(KEY_PREFIX)


class TokenError(UnauthenticatedError):
    """A token was rejected; `reason` says why (never contains the token itself)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str, what: str) -> bytes:
    # Strict: urlsafe_b64decode alone silently drops characters outside the alphabet.
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise TokenError(f"malformed token: {what} is not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise TokenError(f"malformed token: {what} is not unpadded base64url") from None


def _signature(key: bytes, signed_part: str) -> str:
    return _b64encode(hmac.new(key, signed_part.encode("ascii"), hashlib.sha256).digest())


def _check_key(key: bytes) -> None:
    # An empty key is a configuration error, not the caller's fault: it must not read as UNAUTHENTICATED.
    if not isinstance(key, bytes | bytearray) or not key:
        raise ValueError("the auth key must be non-empty bytes")


def _iso(ts: int | float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def mint_token(
    key: bytes,
    *,
    subject: str,
    roles: Iterable[str],
    ttl_s: int,
    agent_id: str = "",
    instance: str = "",
    environment: str = "dev",
    permissions: Iterable[str] = (),
    task_id: str = "",
    creator: str = "",
    now: int | float | None = None,
) -> str:
    """A signed token for these claims, valid from `now` for `ttl_s` seconds.

    Raises ValueError for an empty key, an empty subject, no or unknown roles, or ttl_s <= 0:
    these are bugs of the minting code, caught here rather than at some verifier.
    """
    _check_key(key)
    role_set = frozenset(roles)
    if not subject:
        raise ValueError("a token needs a subject")
    if not role_set:
        raise ValueError("a token needs at least one role")
    unknown = role_set - KNOWN_ROLES
    if unknown:
        raise ValueError(f"unknown roles {sorted(unknown)}; known: {sorted(KNOWN_ROLES)}")
    if ttl_s <= 0:
        raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
    issued = int(time.time() if now is None else now)
    claims = {
        "v": TOKEN_VERSION,
        "sub": subject,
        "agent_id": agent_id,
        "instance": instance,
        "env": environment,
        "roles": sorted(role_set),
        "perms": list(permissions),
        "task_id": task_id,
        "iat": issued,
        "exp": issued + int(ttl_s),
        "jti": secrets.token_hex(16),
    }
    if creator:
        claims["creator"] = creator
    payload = _b64encode(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    return f"{payload}.{_signature(key, payload)}"


def verify_token(key: bytes, token: str, *, now: int | float | None = None, clock_skew_s: int = 30) -> Identity:
    """The Identity a token proves; raises TokenError (and nothing else) for any bad token.

    `clock_skew_s` tolerates clocks that disagree: a token is accepted until exp + skew and from
    iat - skew. ValueError only for an empty key (a configuration error).
    """
    _check_key(key)
    if not isinstance(token, str) or not token:
        raise TokenError("malformed token: empty")
    if len(token) > _MAX_TOKEN_CHARS:
        raise TokenError(f"malformed token: longer than {_MAX_TOKEN_CHARS} characters")
    parts = token.split(".")
    if len(parts) != 2:
        raise TokenError(f"malformed token: expected 2 dot-separated parts, got {len(parts)}")
    payload, signature = parts
    # Shape checks on both parts first, then the signature, and only then is the payload parsed.
    _b64decode(payload, "claims")
    _b64decode(signature, "signature")
    # Comparing the canonical encodings also rejects non-canonical base64 of a right signature.
    if not hmac.compare_digest(_signature(key, payload), signature):
        raise TokenError("bad signature")
    claims = _parse_claims(_b64decode(payload, "claims"))
    return _check_times(_identity_from_claims(claims), now=now, clock_skew_s=clock_skew_s)


def _parse_claims(raw: bytes) -> dict[str, Any]:
    try:
        claims = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors.
        raise TokenError("malformed token: claims are not JSON") from None
    if not isinstance(claims, dict):
        raise TokenError("malformed token: claims are not a JSON object")
    return claims


def _claim(claims: Mapping[str, Any], name: str, kind: type) -> Any:
    if name not in claims:
        raise TokenError(f"malformed token: missing claim {name!r}")
    value = claims[name]
    # bool is an int in Python; a boolean timestamp is still ill-typed.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TokenError(f"malformed token: claim {name!r} must be {kind.__name__}")
    return value


def _str_list(claims: Mapping[str, Any], name: str) -> tuple[str, ...]:
    values = _claim(claims, name, list)
    if not all(isinstance(v, str) for v in values):
        raise TokenError(f"malformed token: claim {name!r} must be a list of strings")
    return tuple(values)


def _identity_from_claims(claims: Mapping[str, Any]) -> Identity:
    version = _claim(claims, "v", int)
    if version != TOKEN_VERSION:
        raise TokenError(f"malformed token: unknown version {version}")
    identity = Identity(
        subject=_claim(claims, "sub", str),
        agent_id=_claim(claims, "agent_id", str),
        instance=_claim(claims, "instance", str),
        environment=_claim(claims, "env", str),
        # Roles a newer minter knows are kept (signed by our key); has_role ignores them.
        roles=frozenset(_str_list(claims, "roles")),
        permissions=_str_list(claims, "perms"),
        task_id=_claim(claims, "task_id", str),
        issued_at=_claim(claims, "iat", int),
        expires_at=_claim(claims, "exp", int),
        token_id=_claim(claims, "jti", str),
        creator=_claim(claims, "creator", str) if "creator" in claims else "",
    )
    if not identity.subject:
        raise TokenError("malformed token: empty subject")
    if not identity.roles:
        raise TokenError("malformed token: no roles")
    if identity.expires_at <= identity.issued_at:
        raise TokenError("malformed token: expires before it is issued")
    return identity


def _check_times(identity: Identity, *, now: int | float | None, clock_skew_s: int) -> Identity:
    current = time.time() if now is None else now
    if current >= identity.expires_at + clock_skew_s:
        raise TokenError(f"token expired at {_iso(identity.expires_at)} (now {_iso(current)})")
    if current < identity.issued_at - clock_skew_s:
        raise TokenError(f"token not valid before {_iso(identity.issued_at)} (now {_iso(current)})")
    return identity
