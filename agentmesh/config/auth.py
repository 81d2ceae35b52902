"""The `auth:` and `audit:` sections: who may call, how tokens are checked, what is recorded."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from agentmesh.config.base import _Section

JwtAlgorithm = Literal["RS256", "ES256", "EdDSA"]
JWT_ALGORITHMS: tuple[JwtAlgorithm, ...] = ("RS256", "ES256", "EdDSA")
"""Signature algorithms accepted from OIDC issuers: asymmetric only (an HMAC JWT would need a shared secret)."""


class OidcClaimSettings(_Section):
    """Which claims of an issuer's JWTs say who the caller is (docs/design.md §9)."""

    subject: str = "sub"
    roles: str = "roles"
    """Claim holding role or group names: a list of strings or one space-separated string."""
    agent: str = "agentmesh_agent"
    """Claim naming the agent the caller acts as; when present the token also holds the role agent."""
    permissions: str = "agentmesh_permissions"
    """Claim holding grants "env:group:access" (a list, or a space-separated string like `scope`)."""
    environment: str = ""
    """Claim naming the environment the token acts in; "" uses the issuer's `environment`."""


class OidcIssuerSettings(_Section):
    """One trusted OpenID Connect issuer: JWTs it signs are verified against its JWKS."""

    issuer: str = Field(min_length=1)
    """The exact `iss` of its tokens."""
    audience: list[str] = Field(min_length=1)
    """Accepted `aud` values: the token must name at least one."""
    jwks_url: str = Field(min_length=1)
    """Where its signing keys are published: https, or http on a loopback host (tests, a local IdP)."""
    algorithms: list[JwtAlgorithm] = list(JWT_ALGORITHMS)
    environment: Literal["dev", "staging", "prod"] | None = None
    """The environment its tokens act in (None: the service's own); a claim may say instead."""
    claims: OidcClaimSettings = OidcClaimSettings()
    role_map: dict[str, list[Literal["agent", "operator", "admin"]]] = {}
    """Values of the roles claim (IdP groups) -> agentmesh roles: the only way a role is granted (an IdP
    group named `admin` grants nothing unless mapped here)."""
    permission_map: dict[str, list[str]] = {}
    """Values of the roles claim -> grants the token also holds."""
    subject_prefix: str | None = None
    """Prefixed to the subject, so no IdP user can take the name of a locally minted one (or of another
    issuer's): None (the default) derives it from the issuer (`https://idp.example.com/x` ->
    `idp.example.com/x:`); "" only on purpose, for subjects known not to collide."""

    @property
    def effective_subject_prefix(self) -> str:
        """`subject_prefix`, or the one derived from the issuer."""
        if self.subject_prefix is not None:
            return self.subject_prefix
        parsed = urlsplit(self.issuer)
        bare = (parsed.netloc + parsed.path) if parsed.netloc else self.issuer
        return bare.rstrip("/") + ":"

    jwks_cache_s: float = Field(300.0, gt=0)
    """How long fetched keys are used before they are fetched again."""
    jwks_refetch_min_s: float = Field(60.0, ge=0)
    """An unknown `kid` triggers a fetch at most this often: forged kids cannot make us hammer the IdP."""
    jwks_timeout_s: float = Field(5.0, gt=0)

    @field_validator("audience", mode="before")
    @classmethod
    def _one_audience(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("jwks_url")
    @classmethod
    def _https_unless_loopback(cls, url: str) -> str:
        parsed = urlsplit(url)
        loopback = parsed.hostname in ("127.0.0.1", "::1", "localhost")
        if parsed.scheme != "https" and not (parsed.scheme == "http" and loopback):
            raise ValueError(f"must be an https URL (http only on a loopback host), got {url!r}")
        return url

    @field_validator("permission_map")
    @classmethod
    def _grant_format(cls, mapping: dict[str, list[str]]) -> dict[str, list[str]]:
        for group, grants in mapping.items():
            for grant in grants:
                if len(grant.split(":")) != 3:
                    raise ValueError(f"{group}: grant {grant!r} is not env:group:access")
        return mapping


class AuthSettings(_Section):
    """Signed identity tokens (docs/design.md §9)."""

    mode: Literal["enabled", "disabled"] = "enabled"
    key: SecretStr | None = None
    """HMAC-SHA256 key; required when mode is enabled."""
    token_ttl_s: int = Field(3600, gt=0)
    clock_skew_s: int = Field(30, ge=0)
    separation_of_duties: bool = True
    """Neither the creator of a task nor its agent may resolve the task's approvals or settlements."""
    oidc: list[OidcIssuerSettings] = []
    """Issuers whose JWTs (`authorization: Bearer`) are accepted besides our own HMAC tokens."""
    api_key_cache_s: float = Field(5.0, ge=0)
    """How long a replica trusts a verified API key (`agentmesh keys`) before reading it again: a revoked
    key stops other RPCs within this; model calls check revocation in their reservation, at once."""

    @model_validator(mode="after")
    def _issuers_unique(self) -> AuthSettings:
        issuers = [entry.issuer for entry in self.oidc]
        doubled = sorted({name for name in issuers if issuers.count(name) > 1})
        if doubled:
            raise ValueError(f"oidc: issuer {doubled[0]!r} is configured twice")
        return self


class AuditSettings(_Section):
    """The audit stream `am:audit` (agentmesh/audit.py, docs/design.md §9)."""

    max_len: int = Field(100_000, ge=100)
    """Entries kept (approximate): the oldest go first."""
    max_age_days: int = Field(90, gt=0)
    """Entries older than this are trimmed."""
