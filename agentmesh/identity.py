"""Signed identity tokens: who is calling, proven (docs/design.md §9).

Identity is never a request field: the dispatcher mints a token per task (agent, instance,
environment, roles, permissions, task id, expiry) signed with HMAC-SHA256 under `auth.key`, and
every downstream call carries it in the `x-agentmesh-identity` metadata. Services verify it at the
RPC edge (`agentmesh.rpc.auth.AuthInterceptor`); code serving a call reads the result with
`current_identity()` / `require_identity()`. This module imports neither grpc nor the stubs.

Token format (v1): ``base64url(claims JSON) "." base64url(HMAC-SHA256(key, first part))``,
unpadded. The signature covers the exact ASCII text of the first part, so nothing is parsed
before the signature is checked.

Roles: "agent", "operator", "admin". `Identity.has_role` treats admin as a superset of operator
(an admin may do whatever an operator may); "agent" is separate and implied by nothing. Check
roles with `has_role`, never with ``role in identity.roles``.

A token is a bearer credential: never log it, never put it in an error message.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import getpass
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from agentmesh import callctx
from agentmesh.config import AuthSettings, ConfigError, OidcIssuerSettings, Settings
from agentmesh.errors import UnauthenticatedError
from agentmesh.identity_value import KNOWN_ROLES, Identity
from agentmesh.oidc import Fetch, OidcVerifier, VerifiedJwt, looks_like_jwt, token_id

if TYPE_CHECKING:
    from agentmesh.apikeys import KeyAuthenticator

__all__ = [
    "KEY_PREFIX",
    "KNOWN_ROLES",
    "TOKEN_VERSION",
    "Authenticator",
    "Identity",
    "TokenError",
    "current_identity",
    "identity_var",
    "is_api_key",
    "mint_token",
    "require_identity",
    "token_command",
    "verify_token",
]

logger = logging.getLogger(__name__)

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


# --- tokens ---------------------------------------------------------------------------------------


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


# --- JWTs of OIDC issuers ---------------------------------------------------------------------------


def _names(value: Any) -> list[str]:
    """A claim holding names: a list of strings, or one space-separated string (like `scope`)."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []


def identity_from_jwt(verified: VerifiedJwt, token: str, service_environment: str) -> Identity:
    """The Identity a verified JWT's claims map to under its issuer's configuration.

    Roles come from the roles claim through `role_map` only (a value named like a role grants nothing
    unless mapped); the subject gets the issuer's prefix (`effective_subject_prefix`); an agent claim
    adds the role agent; grants come from the permissions claim and from
    `permission_map` for each roles-claim value. A token that maps to no role is refused.
    """
    issuer: OidcIssuerSettings = verified.issuer
    claims = verified.claims
    mapping = issuer.claims
    subject = claims.get(mapping.subject)
    if not isinstance(subject, str) or not subject:
        raise TokenError(f"JWT claim {mapping.subject!r} (the subject) is missing or not a string")
    groups = _names(claims.get(mapping.roles))
    roles: set[str] = set()
    permissions: list[str] = _names(claims.get(mapping.permissions))
    for group in groups:
        roles.update(issuer.role_map.get(group, []))  # only mapped groups grant roles (issue 39)
        permissions.extend(issuer.permission_map.get(group, []))
    agent = claims.get(mapping.agent)
    agent_id = agent if isinstance(agent, str) else ""
    if agent_id:
        roles.add("agent")
    if not roles:
        raise TokenError(f"JWT of issuer {issuer.issuer!r} maps to no agentmesh role (claim {mapping.roles!r})")
    environment = issuer.environment or service_environment
    if mapping.environment:
        claimed = claims.get(mapping.environment)
        if not isinstance(claimed, str) or not claimed:
            raise TokenError(f"JWT claim {mapping.environment!r} (the environment) is missing")
        environment = claimed
    expires = claims["exp"]
    issued = claims.get("iat")
    if not isinstance(issued, int) or isinstance(issued, bool):
        issued = int(time.time())
    return Identity(
        subject=issuer.effective_subject_prefix + subject,
        agent_id=agent_id,
        instance="",
        environment=environment,
        roles=frozenset(roles),
        permissions=tuple(dict.fromkeys(permissions)),
        task_id="",
        issued_at=min(issued, int(expires) - 1),
        expires_at=int(expires),
        token_id=token_id(token, claims),
    )


# --- the configured authenticator -----------------------------------------------------------------


_VERIFIED_CACHE_SIZE = 4096


class Authenticator:
    """Mints and verifies tokens with the configured key; knows whether auth is disabled."""

    def __init__(self, auth: AuthSettings, environment: str = "dev", *, jwks_fetch: Fetch | None = None) -> None:
        self.settings = auth
        self.environment = environment
        self.enabled = auth.mode == "enabled"
        secret = auth.key.get_secret_value().encode("utf-8") if auth.key is not None else b""
        if self.enabled:
            if not secret:
                raise ConfigError("auth.key is required when auth.mode is enabled (set AGENTMESH_AUTH_KEY)")
            self._key = secret
        else:
            if environment != "dev":
                raise ConfigError(
                    f"auth.mode is disabled but environment is {environment!r}: refusing to run "
                    "unauthenticated outside dev (set auth.mode: enabled and AGENTMESH_AUTH_KEY)"
                )
            logger.warning("auth is DISABLED: every caller is trusted; dev only")
            # Without a key, a per-process key still lets this process mint well-formed tokens
            # (the dispatcher always sends one); other processes fall back to the dev identity.
            self._key = secret or secrets.token_bytes(32)
        # Tokens whose signature already verified: a task's token comes with each of its calls, and
        # HMAC + base64 + JSON per call was a measurable share of a hop. Times are still checked on
        # every call; the map is bounded by clearing it when full.
        self._verified: dict[str, Identity] = {}
        # JWTs: the identity, and the issuer and kid whose key verified it (a key the JWKS drops is distrusted).
        self._verified_jwts: dict[str, tuple[Identity, str, str]] = {}
        kwargs = {"fetch": jwks_fetch} if jwks_fetch is not None else {}
        self.oidc = OidcVerifier(list(auth.oidc), clock_skew_s=auth.clock_skew_s, **kwargs) if auth.oidc else None
        self.api_keys: KeyAuthenticator | None = None
        """API keys (`agentmesh keys`; set by the service host, which has Redis); without it keys are refused."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        return cls(settings.auth, settings.environment)

    def mint(
        self,
        *,
        subject: str,
        roles: Iterable[str],
        ttl_s: int | None = None,
        agent_id: str = "",
        instance: str = "",
        environment: str | None = None,
        permissions: Iterable[str] = (),
        task_id: str = "",
        creator: str = "",
        now: int | float | None = None,
    ) -> str:
        """A token signed with the configured key; ttl and environment default to the settings."""
        return mint_token(
            self._key,
            subject=subject,
            roles=roles,
            ttl_s=self.settings.token_ttl_s if ttl_s is None else ttl_s,
            agent_id=agent_id,
            instance=instance,
            environment=self.environment if environment is None else environment,
            permissions=permissions,
            task_id=task_id,
            creator=creator,
            now=now,
        )

    def verify(self, token: str, *, now: int | float | None = None) -> Identity:
        """The Identity of a token signed with the configured key; TokenError otherwise."""
        known = self._verified.get(token)
        if known is not None:
            # The environment too, not only the times: a remembered token is never a way around it.
            self._check_environment(known)
            return _check_times(known, now=now, clock_skew_s=self.settings.clock_skew_s)
        identity = verify_token(self._key, token, now=now, clock_skew_s=self.settings.clock_skew_s)
        self._check_environment(identity)
        if len(self._verified) >= _VERIFIED_CACHE_SIZE:
            self._verified.clear()
        self._verified[token] = identity
        return identity

    def _check_environment(self, identity: Identity) -> None:
        if identity.environment != self.environment:
            # One key may sign for several environments: a dev token must not act on prod.
            raise TokenError(
                f"token for environment {identity.environment!r} used on a service of environment {self.environment!r}"
            )

    async def verify_key(self, key: str, *, now: int | float | None = None) -> Identity:
        """The Identity an API key stands for (agentmesh/apikeys.py); TokenError when it does not verify."""
        if self.api_keys is None:
            raise TokenError("API keys are not accepted here (the service has no store)")
        identity = await self.api_keys.identity(key, now=now)
        self._check_environment(identity)
        return identity

    async def verify_any(self, token: str, *, now: int | float | None = None) -> Identity:
        """The Identity of one of our HMAC tokens, an API key, or a JWT from a configured OIDC issuer."""
        if is_api_key(token):
            return await self.verify_key(token, now=now)
        if not looks_like_jwt(token):
            return self.verify(token, now=now)
        if self.oidc is None:
            raise TokenError("a JWT was sent but no OIDC issuer is configured (auth.oidc)")
        known = self._verified_jwts.get(token)
        if known is not None and self.oidc.still_trusted(known[1], known[2]):
            self._check_environment(known[0])
            return _check_times(known[0], now=now, clock_skew_s=self.settings.clock_skew_s)
        if len(token) > _MAX_TOKEN_CHARS:
            raise TokenError(f"malformed token: longer than {_MAX_TOKEN_CHARS} characters")
        verified = await self.oidc.verify(token, now=now)
        identity = identity_from_jwt(verified, token, self.environment)
        self._check_environment(identity)
        if len(self._verified_jwts) >= _VERIFIED_CACHE_SIZE:
            self._verified_jwts.clear()
        self._verified_jwts[token] = (identity, verified.issuer.issuer, verified.kid)
        return identity

    async def authenticate(self, token: str | None, *, now: int | float | None = None) -> Identity:
        """`identify` for an incoming call, JWTs of the configured issuers included."""
        if self.enabled:
            if not token:
                raise TokenError(
                    f"missing identity token ({callctx.IDENTITY_HEADER} or authorization: Bearer metadata)"
                )
            return await self.verify_any(token, now=now)
        if token:
            if is_api_key(token):
                # Even with auth disabled: a key carries budgets, and a bad one must not spend as "dev".
                return await self.verify_key(token, now=now)
            try:
                return await self.verify_any(token, now=now)
            except UnauthenticatedError as exc:
                logger.debug("auth disabled: ignoring an unverifiable token: %s", exc.message)
        return Identity.dev(self.environment)

    def identify(self, token: str | None, *, now: int | float | None = None) -> Identity:
        """The caller's identity for an incoming call's token (None: no token sent).

        Enabled: the token must verify. Disabled: a token that verifies is honoured (so a shared
        dev key still shows which agent acts); anything else gets the dev identity.
        """
        if self.enabled:
            if not token:
                raise TokenError(f"missing identity token ({callctx.IDENTITY_HEADER} metadata)")
            return self.verify(token, now=now)
        if token:
            try:
                return self.verify(token, now=now)
            except TokenError as exc:
                logger.debug("auth disabled: ignoring an unverifiable token: %s", exc.reason)
        return Identity.dev(self.environment)


# --- the identity of the call being served --------------------------------------------------------

identity_var: ContextVar[Identity | None] = ContextVar("agentmesh_identity", default=None)
"""The verified identity of the incoming call; set by the RPC edge (agentmesh.rpc.auth)."""


def current_identity() -> Identity | None:
    """The identity of the call being served, or None outside an authenticated call."""
    return identity_var.get()


def require_identity() -> Identity:
    """The identity of the call being served; UnauthenticatedError when there is none."""
    identity = identity_var.get()
    if identity is None:
        raise UnauthenticatedError("no caller identity (is the RPC edge's AuthInterceptor installed?)")
    return identity


# --- CLI support -----------------------------------------------------------------------------------


def token_command(
    settings: Settings,
    role: str | None,
    subject: str | None = None,
    ttl_s: int | None = None,
    *,
    agent_id: str = "",
    permissions: Iterable[str] = (),
) -> str:
    """The token `agentmesh token [--role R] [--agent A] [--permission G ...] [--subject S] [--ttl N]` prints.

    Signed with `auth.key` for `settings.environment`. Role defaults to agent when an agent is named
    (its subject then defaults to the agent id), and is required otherwise; an operator's or admin's
    subject defaults to the login name. Grants are "env:group:access" (`dev:ops.*:read`,
    `dev:agent.ops:run`). Raises ValueError for a bad role or grant and ConfigError without a key.
    """
    role = role or ("agent" if agent_id else None)
    if role not in KNOWN_ROLES:
        raise ValueError(f"--role must be one of {', '.join(sorted(KNOWN_ROLES))} (or name an --agent), got {role!r}")
    if role == "agent" and not agent_id:
        raise ValueError("an agent token needs --agent")
    grants = list(permissions)
    for grant in grants:
        if len(grant.split(":")) != 3 or not all(grant.split(":")):
            raise ValueError(f"--permission {grant!r} is not env:group:access (e.g. dev:ops.*:read)")
    key = settings.auth.key.get_secret_value() if settings.auth.key is not None else ""
    if not key:
        raise ConfigError(
            "auth.key is not set (AGENTMESH_AUTH_KEY): cannot sign a token"
            + ("; while auth is disabled no token is needed" if settings.auth.mode == "disabled" else "")
        )
    if not subject:
        if agent_id:
            subject = agent_id
        else:
            try:
                subject = getpass.getuser()
            except (OSError, KeyError):  # No login name (e.g. a container without a passwd entry).
                subject = role
    return mint_token(
        key.encode("utf-8"),
        subject=subject,
        roles=(role,),
        ttl_s=settings.auth.token_ttl_s if ttl_s is None else ttl_s,
        agent_id=agent_id,
        environment=settings.environment,
        permissions=grants,
    )
