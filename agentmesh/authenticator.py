"""The configured authenticator: who an incoming call's credential proves it is (docs/design.md §9).

`Authenticator` holds `auth.key` and verifies each kind of credential a call may carry: one of our
signed tokens (`agentmesh.tokens`), an API key (`agentmesh.apikeys`, set by the service host), or a
JWT of a configured OIDC issuer (verified by `agentmesh.oidc`, mapped to an Identity here by
`identity_from_jwt`). Imports go one way: this module imports oidc.py and tokens.py, neither imports it.
Services verify at the RPC edge (`agentmesh.rpc.auth.AuthInterceptor`); code serving a call reads the
result with `current_identity()` / `require_identity()` (`agentmesh.identity_value`). This module
imports neither grpc nor the stubs.

Roles: "agent", "operator", "admin". `Identity.has_role` treats admin as a superset of operator
(an admin may do whatever an operator may); "agent" is separate and implied by nothing. Check
roles with `has_role`, never with ``role in identity.roles``.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentmesh import callctx
from agentmesh.config import AuthSettings, ConfigError, OidcIssuerSettings, Settings
from agentmesh.errors import UnauthenticatedError
from agentmesh.identity_value import Identity
from agentmesh.oidc import Fetch, OidcVerifier, VerifiedJwt, looks_like_jwt, token_id
from agentmesh.tokens import _MAX_TOKEN_CHARS, TokenError, _check_times, is_api_key, mint_token, verify_token

if TYPE_CHECKING:
    from agentmesh.apikeys import KeyAuthenticator

__all__ = ["Authenticator", "identity_from_jwt"]

logger = logging.getLogger(__name__)


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
