"""JWTs from configured OpenID Connect issuers, verified against their JWKS (docs/design.md §9).

Clients in any language get an identity from their organisation's identity provider and send it as
`authorization: Bearer <jwt>`; agentmesh's own HMAC tokens (`agentmesh.tokens`) stay for what the
dispatcher mints per task and for `agentmesh token`. A JWT is accepted when:
- its `iss` is a configured issuer (`auth.oidc`) and its `alg` one that issuer allows (RS256, ES256,
  EdDSA: asymmetric only, so `alg: none` and HMAC-with-the-public-key confusions are refused);
- its signature verifies with the key its `kid` names in the issuer's JWKS;
- `aud` names one of the issuer's audiences, and `exp`/`nbf`/`iat` hold (with `auth.clock_skew_s`);
- its claims map to at least one agentmesh role (`OidcIssuerSettings.claims`, `role_map`).

Keys are fetched over HTTP (httpx) and cached for `jwks_cache_s`; a `kid` not in the cache triggers
at most one fetch per `jwks_refetch_min_s` per issuer (single-flight), so a flood of forged kids
costs the identity provider nothing. When the identity provider cannot be reached, the cached keys
are used; with none, the call is UNAVAILABLE (retryable), not UNAUTHENTICATED: the token may be fine.

Domain code: no grpc, no stubs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from agentmesh.config import OidcIssuerSettings
from agentmesh.errors import UnauthenticatedError, UnavailableError

__all__ = ["MAX_JWKS_BYTES", "JwksCache", "OidcVerifier", "VerifiedJwt", "looks_like_jwt", "token_id"]

log = logging.getLogger(__name__)

MAX_JWKS_BYTES = 1024 * 1024
"""A JWKS larger than this is refused: a few keys are a few KiB."""

Fetch = Callable[[str, float], Awaitable[bytes]]
"""Fetches a URL's body within a timeout (seconds); raises on any failure."""


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer token has a JWS compact serialization's shape (our HMAC tokens have two parts)."""
    return token.count(".") == 2


class _Refused(UnauthenticatedError):
    """A JWT was refused; the message says why and never contains the token."""


@dataclass(frozen=True)
class VerifiedJwt:
    """A JWT whose signature and registered claims were checked."""

    issuer: OidcIssuerSettings
    kid: str
    claims: Mapping[str, Any]


async def _httpx_fetch(url: str, timeout_s: float) -> bytes:
    async with (
        httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client,
        client.stream("GET", url, headers={"accept": "application/json"}) as response,
    ):
        response.raise_for_status()
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_JWKS_BYTES:
                raise ValueError(f"JWKS larger than {MAX_JWKS_BYTES} bytes")
        return bytes(body)


class JwksCache:
    """One issuer's signing keys: fetched on demand, cached, refetched on an unknown kid at most once a
    `jwks_refetch_min_s`."""

    def __init__(
        self, issuer: OidcIssuerSettings, *, fetch: Fetch = _httpx_fetch, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.issuer = issuer
        self._fetch = fetch
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._kid_refetch_at: float | None = None
        self._failed_at: float | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0
        """Fetch attempts so far (tests and the refetch limit read it)."""

    def has(self, kid: str) -> bool:
        """Whether `kid` is among the keys last fetched (a key the JWKS dropped is no longer trusted)."""
        return kid in self._keys

    async def key(self, kid: str, alg: str) -> jwt.PyJWK:
        """The key `kid` names for `alg`; fetches when the cache is stale or lacks it (rate-limited)."""
        now = self._clock()
        stale = self._fetched_at is None or now - self._fetched_at >= self.issuer.jwks_cache_s
        if stale or kid not in self._keys:
            # Before the first load a kid is not "unknown": the keys were simply never fetched.
            await self._refresh(force_unknown=kid not in self._keys and self._fetched_at is not None)
        found = self._keys.get(kid)
        if found is None:
            raise _Refused(f"unknown key id {kid[:64]!r} for issuer {self.issuer.issuer!r}")
        if found.algorithm_name != alg:
            raise _Refused(f"key {kid[:64]!r} is for {found.algorithm_name}, token says {alg}")
        return found

    async def ensure_loaded(self) -> None:
        """Fetches the keys unless a fresh set is cached."""
        now = self._clock()
        if self._fetched_at is None or now - self._fetched_at >= self.issuer.jwks_cache_s:
            await self._refresh(force_unknown=False)

    def sole_key(self, alg: str) -> str | None:
        """The kid of the only key for `alg`, for tokens without a kid; None when there is not exactly one."""
        kids = [kid for kid, key in self._keys.items() if key.algorithm_name == alg]
        return kids[0] if len(kids) == 1 else None

    async def _refresh(self, *, force_unknown: bool) -> None:
        async with self._lock:
            now = self._clock()
            fresh = self._fetched_at is not None and now - self._fetched_at < self.issuer.jwks_cache_s
            if force_unknown:
                # An unknown kid refetches at most once a jwks_refetch_min_s, whoever sends it.
                if self._kid_refetch_at is not None and now - self._kid_refetch_at < self.issuer.jwks_refetch_min_s:
                    return
                self._kid_refetch_at = now
            elif fresh:
                return  # another caller refreshed while this one waited
            elif self._keys and self._failed_at is not None and now - self._failed_at < self.issuer.jwks_refetch_min_s:
                return  # the IdP failed lately: keep using the cached keys rather than ask it on every call
            self.fetches += 1
            try:
                body = await self._fetch(self.issuer.jwks_url, self.issuer.jwks_timeout_s)
                keys = _parse_jwks(body)
            except (httpx.HTTPError, OSError, ValueError, jwt.PyJWKSetError) as exc:
                self._failed_at = now
                reason = f"{type(exc).__name__}: {exc}"[:200]
                if self._keys:
                    log.warning("JWKS of %s not refreshed (using cached keys): %s", self.issuer.issuer, reason)
                    return
                raise UnavailableError(
                    f"cannot fetch the signing keys of issuer {self.issuer.issuer!r}: {reason}", retry_after=1.0
                ) from None
            self._keys = keys
            self._fetched_at = now
            self._failed_at = None


def _parse_jwks(body: bytes) -> dict[str, jwt.PyJWK]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("JWKS is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError('JWKS is not an object with a "keys" list')
    keys: dict[str, jwt.PyJWK] = {}
    for entry in data["keys"]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or not isinstance(entry.get("kid"), str):
            continue  # encryption keys and keys without a kid are of no use for verifying
        try:
            keys[entry["kid"]] = jwt.PyJWK.from_dict(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue  # an algorithm we do not support; other keys may still be good
    if not keys:
        raise ValueError("JWKS holds no usable signing key")
    return keys


class OidcVerifier:
    """Verifies JWTs of the configured issuers; one JwksCache per issuer."""

    def __init__(
        self, issuers: list[OidcIssuerSettings], *, clock_skew_s: int = 30, fetch: Fetch = _httpx_fetch
    ) -> None:
        self.clock_skew_s = clock_skew_s
        self.caches: dict[str, JwksCache] = {issuer.issuer: JwksCache(issuer, fetch=fetch) for issuer in issuers}

    def still_trusted(self, issuer: str, kid: str) -> bool:
        """Whether a key is still in its issuer's JWKS as last fetched (for tokens verified earlier)."""
        cache = self.caches.get(issuer)
        return cache is not None and cache.has(kid)

    async def verify(self, token: str, *, now: float | None = None) -> VerifiedJwt:
        """The checked claims of `token`; UnauthenticatedError with the reason, or UnavailableError when
        the issuer's keys cannot be fetched at all."""
        try:
            header = jwt.get_unverified_header(token)
            # Read only to choose the issuer's keys; nothing here is trusted before the signature is.
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise _Refused("malformed JWT") from None
        issuer_name = unverified.get("iss")
        cache = self.caches.get(issuer_name) if isinstance(issuer_name, str) else None
        if cache is None:
            shown = issuer_name[:80] if isinstance(issuer_name, str) else "none"
            raise _Refused(f"JWT issuer {shown!r} is not trusted")
        issuer = cache.issuer
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in issuer.algorithms:
            raise _Refused(f"JWT algorithm {str(alg)[:16]!r} not accepted from {issuer.issuer!r}")
        kid = header.get("kid")
        if kid is None:
            await cache.ensure_loaded()
            kid = cache.sole_key(alg)
            if kid is None:
                raise _Refused("JWT has no kid and its issuer has not exactly one key for its algorithm")
        if not isinstance(kid, str):
            raise _Refused("JWT kid is not a string")
        key = await cache.key(kid, alg)
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[alg],
                audience=issuer.audience,
                issuer=issuer.issuer,
                leeway=self.clock_skew_s,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise _Refused("JWT expired") from None
        except jwt.ImmatureSignatureError:
            raise _Refused("JWT not valid yet") from None
        except jwt.InvalidAudienceError:
            raise _Refused(f"JWT audience is not one of {issuer.audience}") from None
        except jwt.InvalidSignatureError:
            raise _Refused("JWT bad signature") from None
        except jwt.PyJWTError as exc:
            raise _Refused(f"JWT refused: {str(exc)[:120]}") from None
        if now is not None and now >= claims["exp"] + self.clock_skew_s:
            raise _Refused("JWT expired")
        return VerifiedJwt(issuer=issuer, kid=kid, claims=claims)


def token_id(token: str, claims: Mapping[str, Any]) -> str:
    """The token's `jti`, else a digest of it (never the token itself)."""
    jti = claims.get("jti")
    return jti[:128] if isinstance(jti, str) and jti else hashlib.sha256(token.encode()).hexdigest()[:32]
