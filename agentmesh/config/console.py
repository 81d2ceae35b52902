"""The `console:` section: the browser console and its sign-in."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from agentmesh.config.base import _Section


def _browser_url(url: str, *, empty_ok: bool) -> str:
    """An http(s) URL without credentials, a query or a fragment ("" when allowed)."""
    if not url:
        if empty_ok:
            return url
        raise ValueError("is required")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL, got {url!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"must not carry credentials, a query or a fragment: {url!r}")
    return url


def _https_unless_loopback_url(url: str) -> str:
    parts = urlsplit(url)
    loopback = parts.hostname in ("127.0.0.1", "::1", "localhost")
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise ValueError(f"must be an https URL (http only on a loopback host), got {url!r}")
    if parts.username or parts.password or parts.fragment:
        raise ValueError(f"must not carry credentials or a fragment: {url!r}")
    return url


class ConsoleOidcSettings(_Section):
    """The console's OIDC login: the authorization code flow with PKCE, as a public client (no secret)
    registered at the IdP with the redirect URI `<console origin>/console/`. The token it gets must
    verify as one of `auth.oidc`'s issuers (same `issuer`), like any other caller's."""

    issuer: str = Field(min_length=1)
    """One of `auth.oidc[].issuer`."""
    client_id: str = Field(min_length=1)
    authorization_endpoint: str = Field(min_length=1)
    """The IdP's authorization endpoint (its discovery document's `authorization_endpoint`)."""
    token_endpoint: str = Field(min_length=1)
    """The IdP's token endpoint; it must allow the console's origin (CORS), as IdPs do for SPA clients."""
    scopes: list[str] = ["openid", "profile"]
    token: Literal["access_token", "id_token"] = "access_token"
    """Which token of the IdP's answer the console sends to the services (whose `aud` `auth.oidc` accepts)."""
    audience: str = ""
    """Sent as `audience` to the authorization endpoint, for IdPs that need it to mint a JWT access token."""

    @field_validator("authorization_endpoint", "token_endpoint")
    @classmethod
    def _endpoint(cls, url: str) -> str:
        return _https_unless_loopback_url(url)


class ConsoleSettings(_Section):
    """The web console at `/console` on the dispatcher's HTTP listener (agentmesh/rpc/console.py,
    docs/design.md §17). It calls the services through their Connect edges with its user's token."""

    enabled: bool = True
    """Serve it (needs the dispatcher's `http_port` and `server.connect`)."""
    tool_url: str = ""
    """tool_svc's Connect edge as browsers reach it, e.g. `https://tools.example.com`; "" means the
    console's own host on `services.tool.http_port`. Its `server.cors_allowed_origins` must list the
    console's origin."""
    provider_url: str = ""
    """provider_svc's Connect edge as browsers reach it (the Spend page: GetSpendSummary, ListBudgets); ""
    means the console's own host on `services.provider.http_port`. Its `server.cors_allowed_origins` must
    list the console's origin."""
    jaeger_url: str = ""
    """The Jaeger UI, e.g. `http://localhost:16686`: the Task page links each request's trace there."""
    oidc: ConsoleOidcSettings | None = None
    """The OIDC login; without it the console asks for a pasted token only."""

    @field_validator("tool_url", "provider_url", "jaeger_url")
    @classmethod
    def _url(cls, url: str) -> str:
        return _browser_url(url.rstrip("/"), empty_ok=True)
