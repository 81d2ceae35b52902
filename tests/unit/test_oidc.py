"""JWTs of configured OIDC issuers (issue 22, docs/design.md §9): keys the tests make, a JWKS served
over real HTTP on localhost. Accepted and mapped; refused for a bad signature, a wrong audience, an
expired or not-yet-valid token, an unknown kid (after exactly one refetch), an untrusted issuer, a
forbidden algorithm; a rotation is picked up; an unreachable identity provider is UNAVAILABLE."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest

from agentmesh import authenticator as authenticator_module
from agentmesh.authenticator import Authenticator
from agentmesh.config import AuthSettings, OidcIssuerSettings
from agentmesh.errors import ErrorCode, UnauthenticatedError, UnavailableError
from agentmesh.oidc import MAX_JWKS_BYTES, JwksCache, OidcVerifier, _httpx_fetch, _parse_jwks, token_id
from agentmesh.tokens import _MAX_TOKEN_CHARS
from tests.jwks import AUDIENCE, ISSUER, Issuer, SigningKey, new_key

KEY = "unit-test-hmac-key-" + "x" * 32


@pytest.fixture
def idp() -> Iterator[Issuer]:
    with Issuer() as issuer:
        yield issuer


def authenticator(idp: Issuer, environment: str = "dev", **extra: Any) -> Authenticator:
    entry = idp.settings(
        role_map={"sre": ["operator"], "platform": ["admin"], "operator": ["operator"]},
        permission_map={"sre": ["dev:ops.*:read"]},
        **extra,
    )
    return Authenticator(AuthSettings(key=KEY, oidc=[OidcIssuerSettings.model_validate(entry)]), environment)


async def refused(auth: Authenticator, token: str, reason: str) -> None:
    with pytest.raises(UnauthenticatedError) as info:
        await auth.authenticate(token)
    assert reason in info.value.message, info.value.message
    assert token not in info.value.message


def auth_prefix(issuer: str) -> str:
    return issuer.split("://", 1)[1].rstrip("/") + ":"


async def test_a_jwt_is_accepted_and_its_claims_mapped(idp: Issuer) -> None:
    auth = authenticator(idp)
    token = idp.token(sub="alice", roles=["sre", "unknown-group"], agentmesh_permissions="dev:k8s:write", jti="j-1")
    identity = await auth.authenticate(token)
    assert identity.subject == f"{auth_prefix(ISSUER)}alice"
    assert identity.roles == frozenset({"operator"})
    assert set(identity.permissions) == {"dev:k8s:write", "dev:ops.*:read"}
    assert identity.environment == "dev" and identity.token_id == "j-1" and identity.agent_id == ""
    agent = await auth.authenticate(
        idp.token(sub="svc-ops", agentmesh_agent="ops", agentmesh_permissions=["dev:ops.*:read"])
    )
    assert agent.agent_id == "ops" and agent.has_role("agent") and agent.permissions == ("dev:ops.*:read",)
    admin = await auth.authenticate(idp.token(roles="platform"))
    assert admin.has_role("admin") and admin.has_role("operator")


@pytest.mark.parametrize("alg", ["ES256", "EdDSA"])
async def test_ec_and_eddsa_keys_verify(idp: Issuer, alg: str) -> None:
    key = new_key(alg)
    idp.keys.append(key)
    identity = await authenticator(idp).authenticate(idp.token(key, roles=["operator"]))
    assert identity.has_role("operator")


async def test_refusals(idp: Issuer) -> None:
    auth = authenticator(idp)
    now = int(time.time())
    impostor = new_key("RS256", kid=idp.keys[0].kid)  # same kid, another private key
    await refused(auth, idp.token(impostor, roles=["operator"]), "bad signature")
    await refused(auth, idp.token(roles=["operator"], aud="someone-else"), "audience")
    await refused(auth, idp.token(roles=["operator"], iat=now - 7200, exp=now - 3600), "expired")
    await refused(auth, idp.token(roles=["operator"], nbf=now + 3600), "not valid yet")
    await refused(auth, idp.token(roles=["operator"], iss="https://evil.example/"), "not trusted")
    await refused(auth, idp.token(roles=["nobody"]), "maps to no agentmesh role")
    await refused(auth, idp.token(roles=["operator"], exp=None), "exp")
    await refused(auth, idp.token(roles=["operator"], sub=None), "subject")
    # alg none, and HS256 keyed with the public key (the classic confusion): never accepted.
    unsigned = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": now + 60}, None, algorithm="none")  # type: ignore[arg-type]
    await refused(auth, unsigned, "algorithm")
    hs = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": now + 60, "roles": ["admin"]}, "k" * 32, "HS256"
    )
    await refused(auth, hs, "algorithm")
    await refused(auth, "a.b.c", "malformed")


async def test_an_issuer_for_another_environment_is_refused(idp: Issuer) -> None:
    entry = OidcIssuerSettings.model_validate(idp.settings(environment="prod", role_map={"operator": ["operator"]}))
    auth = Authenticator(AuthSettings(key=KEY, oidc=[entry]), "dev")
    await refused(auth, idp.token(roles=["operator"]), "environment 'prod'")


async def test_an_unknown_kid_is_refused_after_exactly_one_refetch(idp: Issuer) -> None:
    auth = authenticator(idp)
    await auth.authenticate(idp.token(roles=["operator"]))
    assert idp.fetches == 1
    stranger = new_key("RS256")
    await refused(auth, idp.token(stranger, roles=["operator"]), "unknown key id")
    assert idp.fetches == 2, "one refetch for the unknown kid"
    for _ in range(5):  # a flood of forged kids within the minute costs the IdP nothing more
        await refused(auth, idp.token(new_key("RS256"), roles=["operator"]), "unknown key id")
    assert idp.fetches == 2


async def test_a_rotation_is_picked_up(idp: Issuer) -> None:
    auth = authenticator(idp, jwks_refetch_min_s=0, jwks_cache_s=0.2)
    old = idp.keys[0]
    old_token = idp.token(old, roles=["operator"])
    await auth.authenticate(old_token)
    # The IdP publishes a new key and signs with it: the unknown kid triggers a refetch that finds it.
    fresh = new_key("ES256")
    idp.keys = [old, fresh]
    assert (await auth.authenticate(idp.token(fresh, roles=["operator"]))).has_role("operator")
    # Then it retires the old key: once the cache is refreshed, tokens signed by it (even ones verified
    # before and remembered) are refused.
    idp.keys = [fresh]
    await asyncio.sleep(0.25)
    await auth.authenticate(idp.token(fresh, roles=["operator"]))
    await refused(auth, old_token, "unknown key id")


async def test_an_unreachable_identity_provider(idp: Issuer) -> None:
    auth = authenticator(idp, jwks_cache_s=0.1, jwks_refetch_min_s=0)
    token = idp.token(roles=["operator"])
    await auth.authenticate(token)
    idp.status = 503
    await asyncio.sleep(0.15)
    # Keys already fetched keep working while the IdP is down (a fresh token, so no cached identity).
    assert (await auth.authenticate(idp.token(roles=["operator"], jti="second"))).has_role("operator")
    cold = authenticator(idp)
    with pytest.raises(UnavailableError) as info:
        await cold.authenticate(token)
    assert info.value.code is ErrorCode.UNAVAILABLE and ISSUER in info.value.message
    idp.status, idp.body = 200, b"<html>not json</html>"
    with pytest.raises(UnavailableError, match="not JSON"):
        await authenticator(idp).authenticate(token)


async def test_jwts_without_configured_issuers_and_hmac_tokens_alongside(idp: Issuer) -> None:
    plain = Authenticator(AuthSettings(key=KEY), "dev")
    await refused(plain, idp.token(roles=["operator"]), "no OIDC issuer is configured")
    auth = authenticator(idp)
    hmac_token = auth.mint(subject="bob", roles=("operator",))
    assert (await auth.authenticate(hmac_token)).subject == "bob"


def test_issuer_settings_are_checked() -> None:
    base = {"issuer": ISSUER, "audience": AUDIENCE}
    with pytest.raises(ValueError, match="https"):
        OidcIssuerSettings.model_validate({**base, "jwks_url": "http://idp.example.com/jwks"})
    with pytest.raises(ValueError, match="env:group:access"):
        OidcIssuerSettings.model_validate(
            {**base, "jwks_url": "https://idp.example.com/jwks", "permission_map": {"g": ["bad"]}}
        )
    entry = OidcIssuerSettings.model_validate({**base, "jwks_url": "https://idp.example.com/jwks"})
    assert entry.audience == [AUDIENCE] and entry.algorithms == ["RS256", "ES256", "EdDSA"]
    with pytest.raises(ValueError, match="configured twice"):
        AuthSettings(key=KEY, oidc=[entry, entry])


async def test_roles_only_through_role_map_and_subjects_prefixed_by_the_issuer(idp: Issuer) -> None:
    """Issue 39: an IdP group named `admin` granted admin unless mapped; an IdP `sub` equal to a locally
    minted subject read that subject's tasks (the default prefix was empty)."""
    auth = authenticator(idp)
    await refused(auth, idp.token(sub="x", roles=["admin"]), "maps to no agentmesh role")
    mapped = await auth.authenticate(idp.token(sub="operator", roles=["sre"]))
    assert mapped.subject != "operator" and mapped.subject.endswith(":operator")
    assert mapped.subject.startswith(auth_prefix(ISSUER))
    chosen = await authenticator(idp, subject_prefix="idp:").authenticate(idp.token(sub="bob", roles=["sre"]))
    assert chosen.subject == "idp:bob"
    bare = await authenticator(idp, subject_prefix="").authenticate(idp.token(sub="bob", roles=["sre"]))
    assert bare.subject == "bob"  # only when configured so


# -- the key cache and the JWKS parser on their own (a fake identity provider, a fake clock) ------------


class FakeIdp:
    """Serves its keys' JWKS to JwksCache's fetch, counting fetches; `fail` makes it unreachable."""

    def __init__(self, *keys: SigningKey) -> None:
        self.keys = list(keys)
        self.fetches: list[tuple[str, float]] = []
        self.fail = False

    async def __call__(self, url: str, timeout_s: float) -> bytes:
        self.fetches.append((url, timeout_s))
        if self.fail:
            raise httpx.ConnectError("identity provider down")
        return json.dumps({"keys": [k.jwk() for k in self.keys]}).encode()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cache_for(idp: FakeIdp, clock: Clock) -> JwksCache:
    settings = OidcIssuerSettings(
        issuer=ISSUER,
        audience=AUDIENCE,
        jwks_url="https://idp.test.example/jwks.json",
        jwks_cache_s=300,
        jwks_refetch_min_s=60,
        jwks_timeout_s=5,
    )
    return JwksCache(settings, fetch=idp, clock=clock)


async def test_keys_are_cached_for_jwks_cache_s_then_fetched_again() -> None:
    key = new_key("RS256")
    idp, clock = FakeIdp(key), Clock()
    cache = cache_for(idp, clock)
    assert not cache.has(key.kid)
    assert (await cache.key(key.kid, "RS256")).algorithm_name == "RS256"
    assert idp.fetches == [("https://idp.test.example/jwks.json", 5.0)]
    clock.now += 299.9
    await cache.key(key.kid, "RS256")
    await cache.ensure_loaded()
    assert len(idp.fetches) == 1 and cache.fetches == 1
    clock.now += 0.1  # exactly jwks_cache_s later: stale
    await cache.key(key.kid, "RS256")
    assert len(idp.fetches) == 2
    clock.now += 300
    await cache.ensure_loaded()
    assert len(idp.fetches) == 3 and cache.has(key.kid)


async def test_an_unknown_kid_refetches_at_most_once_a_jwks_refetch_min_s() -> None:
    key = new_key("RS256")
    idp, clock = FakeIdp(key), Clock()
    cache = cache_for(idp, clock)
    await cache.key(key.kid, "RS256")
    forged = "f" * 100
    with pytest.raises(UnauthenticatedError) as info:
        await cache.key(forged, "RS256")
    assert "f" * 64 in info.value.message and "f" * 65 not in info.value.message
    assert len(idp.fetches) == 2  # the unknown kid refetched once
    clock.now += 59.9
    for _ in range(3):
        with pytest.raises(UnauthenticatedError):
            await cache.key(forged, "RS256")
    assert len(idp.fetches) == 2
    rotated = new_key("RS256")
    idp.keys.append(rotated)
    clock.now += 0.1  # a jwks_refetch_min_s after the last: the rotation is picked up
    assert (await cache.key(rotated.kid, "RS256")).algorithm_name == "RS256"
    assert len(idp.fetches) == 3


async def test_a_key_is_refused_for_another_algorithm_than_its_own() -> None:
    key = new_key("RS256")
    cache = cache_for(FakeIdp(key), Clock())
    with pytest.raises(UnauthenticatedError) as info:
        await cache.key(key.kid, "ES256")
    assert "is for RS256, token says ES256" in info.value.message


async def test_an_unreachable_idp_leaves_the_cached_keys_in_use_and_is_not_asked_on_every_call() -> None:
    key = new_key("RS256")
    idp, clock = FakeIdp(key), Clock()
    cache = cache_for(idp, clock)
    await cache.key(key.kid, "RS256")
    idp.fail = True
    clock.now += 300  # stale: a fetch is tried, fails, the cached key still verifies
    assert (await cache.key(key.kid, "RS256")).algorithm_name == "RS256"
    assert len(idp.fetches) == 2
    clock.now += 59.9  # failed lately: not asked again
    await cache.key(key.kid, "RS256")
    await cache.ensure_loaded()
    assert len(idp.fetches) == 2
    idp.fail = False
    clock.now += 0.1
    await cache.key(key.kid, "RS256")
    assert len(idp.fetches) == 3
    clock.now += 299.9  # that fetch made the keys fresh again (and cleared the failure)
    await cache.key(key.kid, "RS256")
    assert len(idp.fetches) == 3


async def test_an_unreachable_idp_without_cached_keys_is_unavailable_and_retryable() -> None:
    idp, clock = FakeIdp(new_key("RS256")), Clock()
    idp.fail = True
    cache = cache_for(idp, clock)
    with pytest.raises(UnavailableError) as info:
        await cache.key("any", "RS256")
    assert info.value.code == ErrorCode.UNAVAILABLE and info.value.retry_after == 1.0
    assert ISSUER in info.value.message and "ConnectError: identity provider down" in info.value.message
    with pytest.raises(UnavailableError):  # no keys to fall back on: asked again at once
        await cache.ensure_loaded()
    assert len(idp.fetches) == 2


async def test_a_token_without_kid_takes_the_only_key_for_its_algorithm() -> None:
    rsa_key, ec_key = new_key("RS256"), new_key("ES256")
    idp = FakeIdp(rsa_key, ec_key)
    cache = cache_for(idp, Clock())
    await cache.ensure_loaded()
    await cache.ensure_loaded()
    assert len(idp.fetches) == 1
    assert cache.sole_key("RS256") == rsa_key.kid and cache.sole_key("ES256") == ec_key.kid
    assert cache.sole_key("EdDSA") is None
    two = cache_for(FakeIdp(rsa_key, new_key("RS256")), Clock())
    await two.ensure_loaded()
    assert two.sole_key("RS256") is None


def test_the_jwks_parser_keeps_only_usable_signing_keys() -> None:
    good, enc, unnamed, other = new_key("RS256"), new_key("ES256"), new_key("EdDSA"), new_key("RS256")
    no_use = {k: v for k, v in other.jwk().items() if k != "use"}  # "use" absent means a signing key
    entries = [
        good.jwk(),
        {**enc.jwk(), "use": "enc"},
        {k: v for k, v in unnamed.jwk().items() if k != "kid"},
        {**new_key("RS256").jwk(), "kid": 7},
        {"kty": "unknown", "kid": "strange", "use": "sig"},
        "not an object",
        no_use,
    ]
    keys = _parse_jwks(json.dumps({"keys": entries}).encode())
    assert sorted(keys) == sorted([good.kid, other.kid])
    assert keys[good.kid].algorithm_name == "RS256"
    for body, reason in [
        (b"{not json", "JWKS is not JSON"),
        (b"[]", 'JWKS is not an object with a "keys" list'),
        (b'{"keys": {}}', 'JWKS is not an object with a "keys" list'),
        (b'{"keys": [{"kty": "unknown", "kid": "x"}]}', "JWKS holds no usable signing key"),
        (b"[" * 100_000 + b"]" * 100_000, "JWKS is not JSON"),  # nested past the recursion limit
    ]:
        with pytest.raises(ValueError) as info:
            _parse_jwks(body)
        assert str(info.value) == reason


async def test_a_key_is_still_trusted_only_while_its_issuers_jwks_holds_it() -> None:
    key, dropped = new_key("RS256"), new_key("RS256")
    idp, clock = FakeIdp(key, dropped), Clock()
    verifier = OidcVerifier(
        [OidcIssuerSettings(issuer=ISSUER, audience=AUDIENCE, jwks_url="https://idp.test.example/jwks.json")],
        fetch=idp,
    )
    cache = verifier.caches[ISSUER]
    cache._clock = clock
    assert not verifier.still_trusted(ISSUER, key.kid)  # nothing fetched yet
    await cache.ensure_loaded()
    assert verifier.still_trusted(ISSUER, key.kid) and verifier.still_trusted(ISSUER, dropped.kid)
    assert not verifier.still_trusted("https://other.example/", key.kid)
    idp.keys.remove(dropped)
    clock.now += 300
    await cache.ensure_loaded()
    assert verifier.still_trusted(ISSUER, key.kid) and not verifier.still_trusted(ISSUER, dropped.kid)


def test_a_token_id_is_its_jti_or_a_digest_never_the_token() -> None:
    assert token_id("a.b.c", {"jti": "j" * 200}) == "j" * 128
    digest = hashlib.sha256(b"a.b.c").hexdigest()[:32]
    assert token_id("a.b.c", {"jti": ""}) == digest
    assert token_id("a.b.c", {"jti": 42}) == digest
    assert token_id("a.b.c", {}) == digest


async def test_a_jwks_is_fetched_without_redirects_and_within_the_size_limit(idp: Issuer) -> None:
    idp.body = b" " * MAX_JWKS_BYTES  # at the limit: read whole
    assert await _httpx_fetch(idp.jwks_url, 5.0) == idp.body
    idp.body = b" " * (MAX_JWKS_BYTES + 1)
    with pytest.raises(ValueError, match="JWKS larger than"):
        await _httpx_fetch(idp.jwks_url, 5.0)
    idp.body = b"{}"
    for status in (302, 500):
        idp.status = status
        with pytest.raises(httpx.HTTPStatusError):
            await _httpx_fetch(idp.jwks_url, 5.0)


def verifier_for(idp: FakeIdp, **extra: Any) -> OidcVerifier:
    settings = OidcIssuerSettings(
        issuer=ISSUER, audience=AUDIENCE, jwks_url="https://idp.test.example/jwks.json", **extra
    )
    return OidcVerifier([settings], clock_skew_s=30, fetch=idp)


def signed(key: SigningKey, headers: dict[str, Any] | None = None, **claims: Any) -> str:
    now = int(time.time())
    body: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600, **claims}
    body = {k: v for k, v in body.items() if v is not None}  # None: the claim is left out
    return jwt.encode(body, key.private, algorithm=key.alg, headers=headers)


async def verify_refused(verifier: OidcVerifier, token: str, message: str) -> None:
    with pytest.raises(UnauthenticatedError) as info:
        await verifier.verify(token)
    assert info.value.message == message


async def test_a_verified_jwt_names_its_issuer_key_and_claims_and_a_later_check_sees_it_expire() -> None:
    key = new_key("RS256")
    verifier = verifier_for(FakeIdp(key))
    exp = int(time.time()) + 600
    token = signed(key, headers={"kid": key.kid}, exp=exp)
    verified = await verifier.verify(token)
    assert verified.issuer is verifier.caches[ISSUER].issuer and verified.kid == key.kid
    assert verified.claims["sub"] == "alice" and verified.claims["exp"] == exp
    assert (await verifier.verify(token, now=exp + 29.9)).kid == key.kid  # within the clock skew
    await verify_refused_at(verifier, token, exp + 30)


async def verify_refused_at(verifier: OidcVerifier, token: str, now: float) -> None:
    with pytest.raises(UnauthenticatedError) as info:
        await verifier.verify(token, now=now)
    assert info.value.message == "JWT expired"


async def test_a_jwt_without_kid_needs_exactly_one_key_for_its_algorithm() -> None:
    key = new_key("ES256")
    verified = await verifier_for(FakeIdp(key, new_key("RS256"))).verify(signed(key))
    assert verified.kid == key.kid
    two = verifier_for(FakeIdp(key, new_key("ES256")))
    await verify_refused(two, signed(key), "JWT has no kid and its issuer has not exactly one key for its algorithm")


async def test_each_refusal_says_why_exactly() -> None:
    key = new_key("RS256")
    verifier = verifier_for(FakeIdp(key))
    kid = {"kid": key.kid}
    now = int(time.time())
    await verify_refused(verifier, "a.b.c", "malformed JWT")
    await verify_refused(verifier, signed(key, kid, iss=None), "JWT issuer 'none' is not trusted")
    long_issuer = "https://" + "i" * 200
    await verify_refused(verifier, signed(key, kid, iss=long_issuer), f"JWT issuer {long_issuer[:80]!r} is not trusted")
    await verify_refused(verifier, signed(key, kid, exp=now - 100), "JWT expired")
    await verify_refused(verifier, signed(key, kid, nbf=now + 100), "JWT not valid yet")
    await verify_refused(verifier, signed(new_key("RS256", kid=key.kid), kid), "JWT bad signature")
    await verify_refused(verifier, signed(key, kid, aud="other"), f"JWT audience is not one of {[AUDIENCE]}")
    es_only = verifier_for(FakeIdp(key), algorithms=["ES256"])
    await verify_refused(es_only, signed(key, kid), f"JWT algorithm 'RS256' not accepted from {ISSUER!r}")


async def test_a_jwks_is_asked_for_as_json_not_followed_through_a_redirect_and_not_waited_on_forever(
    idp: Issuer,
) -> None:
    assert await _httpx_fetch(idp.jwks_url, 5.0)
    assert idp.accepts == ["application/json"]
    # A redirect (with somewhere to go, here back to itself) is an error, not a second request.
    idp.status, idp.location = 302, idp.jwks_url
    with pytest.raises(httpx.HTTPStatusError):
        await _httpx_fetch(idp.jwks_url, 5.0)
    assert idp.fetches == 2
    # An identity provider that does not answer: the fetch gives up after its timeout, not the client's
    # default (5 s) nor never (the outer bound only keeps a broken fetch from hanging the suite).
    idp.status, idp.location, idp.stall_s = 200, None, 4.0
    with pytest.raises(httpx.TimeoutException):
        await asyncio.wait_for(_httpx_fetch(idp.jwks_url, 0.2), timeout=3.0)


async def test_an_issuer_claim_that_is_not_a_string_is_untrusted_and_a_long_algorithm_is_cut() -> None:
    key = new_key("RS256")
    verifier = verifier_for(FakeIdp(key))
    kid = {"kid": key.kid}
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 600}
    for iss in ([ISSUER], {"name": ISSUER}):  # PyJWT's encode refuses these: signed as raw JWS payloads
        token = jwt.PyJWS().encode(json.dumps({**claims, "iss": iss}).encode(), key.private, "RS256", kid)
        await verify_refused(verifier, token, "JWT issuer 'none' is not trusted")
    header = {"alg": "X" * 40, "typ": "JWT", "kid": key.kid}
    parts = [base64.urlsafe_b64encode(json.dumps(p).encode()).rstrip(b"=").decode() for p in (header, claims)]
    forged = ".".join([*parts, "c2ln"])
    await verify_refused(verifier, forged, f"JWT algorithm {'X' * 16!r} not accepted from {ISSUER!r}")


async def test_the_clock_skew_lets_a_just_expired_or_nearly_valid_jwt_through_and_no_further() -> None:
    key = new_key("RS256")
    kid = {"kid": key.kid}
    now = int(time.time())
    verifier = verifier_for(FakeIdp(key))  # clock_skew_s=30
    assert (await verifier.verify(signed(key, kid, exp=now - 10))).kid == key.kid
    assert (await verifier.verify(signed(key, kid, nbf=now + 10))).kid == key.kid
    await verify_refused(verifier, signed(key, kid, exp=now - 120), "JWT expired")
    await verify_refused(verifier, signed(key, kid, nbf=now + 120), "JWT not valid yet")
    strict = OidcVerifier([c.issuer for c in verifier.caches.values()], clock_skew_s=0, fetch=FakeIdp(key))
    await verify_refused(strict, signed(key, kid, exp=now - 10), "JWT expired")


async def test_a_long_kid_for_another_algorithm_is_cut_in_the_refusal() -> None:
    key = new_key("RS256", kid="k" * 100)
    cache = cache_for(FakeIdp(key), Clock())
    with pytest.raises(UnauthenticatedError) as info:
        await cache.key(key.kid, "ES256")
    assert info.value.message == f"key {'k' * 64!r} is for RS256, token says ES256"


async def test_a_verifier_tolerates_thirty_seconds_of_clock_skew_by_default() -> None:
    key = new_key("RS256")
    settings = OidcIssuerSettings(issuer=ISSUER, audience=AUDIENCE, jwks_url="https://idp.test.example/jwks.json")
    verifier = OidcVerifier([settings], fetch=FakeIdp(key))
    exp = int(time.time()) + 600
    token = signed(key, headers={"kid": key.kid}, exp=exp)
    assert (await verifier.verify(token, now=exp + 29.5)).kid == key.kid
    await verify_refused_at(verifier, token, exp + 30.5)


class GatedIdp(FakeIdp):
    """A FakeIdp whose answers wait for `gate`: callers pile up behind a fetch in flight."""

    def __init__(self, *keys: SigningKey) -> None:
        super().__init__(*keys)
        self.gate = asyncio.Event()

    async def __call__(self, url: str, timeout_s: float) -> bytes:
        await self.gate.wait()
        return await super().__call__(url, timeout_s)


async def test_callers_waiting_on_a_fetch_in_flight_use_its_keys_and_fetches_counts_every_attempt() -> None:
    key = new_key("RS256")
    idp, clock = GatedIdp(key), Clock()
    cache = cache_for(idp, clock)
    waiting = [asyncio.ensure_future(cache.key(key.kid, "RS256")) for _ in range(3)]
    loading = asyncio.ensure_future(cache.ensure_loaded())
    await asyncio.sleep(0.01)  # all four are queued on the first caller's fetch
    idp.gate.set()
    found = await asyncio.gather(*waiting)
    await loading
    assert [k.algorithm_name for k in found] == ["RS256"] * 3
    assert len(idp.fetches) == 1 and cache.fetches == 1
    for _ in range(2):  # each stale period: one more attempt, counted
        clock.now += 300
        await cache.ensure_loaded()
    assert len(idp.fetches) == 3 and cache.fetches == 3


class LongFailureIdp(FakeIdp):
    async def __call__(self, url: str, timeout_s: float) -> bytes:
        if self.fail:
            self.fetches.append((url, timeout_s))
            raise httpx.ConnectError("x" * 500)
        return await super().__call__(url, timeout_s)


async def test_a_failed_refresh_is_logged_with_its_issuer_and_reason_and_a_long_reason_is_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = new_key("RS256")
    idp, clock = LongFailureIdp(key), Clock()
    cache = cache_for(idp, clock)
    await cache.ensure_loaded()
    idp.fail, clock.now = True, clock.now + 300
    with caplog.at_level("WARNING", logger="agentmesh.oidc"):
        await cache.ensure_loaded()
    reason = "ConnectError: " + "x" * 186  # 200 characters
    assert [r.getMessage() for r in caplog.records if r.name == "agentmesh.oidc"] == [
        f"JWKS of {ISSUER} not refreshed (using cached keys): {reason}"
    ]
    cold = cache_for(idp, clock)
    with pytest.raises(UnavailableError) as info:
        await cold.ensure_loaded()
    assert info.value.message == f"cannot fetch the signing keys of issuer {ISSUER!r}: {reason}"


async def test_a_verified_jwt_is_remembered_only_while_its_key_stays_in_the_jwks() -> None:
    key, other = new_key("RS256"), new_key("RS256")
    idp, clock = FakeIdp(key, other), Clock()
    settings = OidcIssuerSettings(
        issuer=ISSUER, audience=AUDIENCE, jwks_url="https://idp.test.example/jwks.json", role_map={"sre": ["operator"]}
    )
    auth = Authenticator(AuthSettings(key=KEY, oidc=[settings]), "dev", jwks_fetch=idp)
    assert auth.oidc is not None
    auth.oidc.caches[ISSUER]._clock = clock
    token = signed(key, headers={"kid": key.kid}, roles=["sre"])
    first = await auth.verify_any(token)
    assert first.roles == frozenset({"operator"})
    assert await auth.verify_any(token) is first  # remembered: not verified again
    # A remembered JWT is still checked against the time given: it expires.
    assert await auth.verify_any(token, now=first.expires_at) is first
    with pytest.raises(UnauthenticatedError, match="expired"):
        await auth.verify_any(token, now=first.expires_at + 3600)
    other_token = signed(other, headers={"kid": other.kid}, roles=["sre"])
    assert await auth.verify_any(other_token) is not first
    idp.keys.remove(key)
    clock.now += 300
    await auth.oidc.caches[ISSUER].ensure_loaded()
    assert (await auth.verify_any(other_token)).subject == first.subject  # its key is still there
    with pytest.raises(UnauthenticatedError):
        await auth.verify_any(token)  # its key is gone: verified again, and refused


async def test_a_jwt_where_no_issuer_is_configured_is_refused_saying_so() -> None:
    plain = Authenticator(AuthSettings(key=KEY), "dev")
    with pytest.raises(UnauthenticatedError) as info:
        await plain.verify_any(signed(new_key("RS256")))
    assert info.value.message == "a JWT was sent but no OIDC issuer is configured (auth.oidc)"


def _authenticator_for(idp: FakeIdp, **auth: Any) -> Authenticator:
    settings = OidcIssuerSettings(
        issuer=ISSUER, audience=AUDIENCE, jwks_url="https://idp.test.example/jwks.json", role_map={"sre": ["operator"]}
    )
    return Authenticator(AuthSettings(key=KEY, oidc=[settings], **auth), "dev", jwks_fetch=idp)


async def test_a_jwt_is_checked_at_the_given_time_with_the_configured_skew() -> None:
    key = new_key("RS256")
    exp = int(time.time()) + 600
    token = signed(key, headers={"kid": key.kid}, roles=["sre"], exp=exp)
    strict = _authenticator_for(FakeIdp(key), clock_skew_s=0)
    with pytest.raises(UnauthenticatedError, match="JWT expired"):
        await strict.verify_any(token, now=exp + 10)  # the skew of the settings (0), not the verifier's default 30
    lenient = _authenticator_for(FakeIdp(key), clock_skew_s=30)
    assert (await lenient.verify_any(token, now=exp + 10)).subject.endswith("alice")


async def test_a_jwt_longer_than_the_limit_is_refused_before_any_verification() -> None:
    idp = FakeIdp(new_key("RS256"))
    auth = _authenticator_for(idp)
    at_limit = "a" * (_MAX_TOKEN_CHARS - 4) + ".b.c"
    with pytest.raises(UnauthenticatedError) as info:
        await auth.verify_any(at_limit)
    assert "longer than" not in info.value.message  # at the limit: judged by the verifier
    with pytest.raises(UnauthenticatedError) as info:
        await auth.verify_any("a" + at_limit)
    assert info.value.message == f"malformed token: longer than {_MAX_TOKEN_CHARS} characters"


async def test_the_verified_jwt_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(authenticator_module, "_VERIFIED_CACHE_SIZE", 2)
    key = new_key("RS256")
    auth = _authenticator_for(FakeIdp(key))
    tokens = [signed(key, headers={"kid": key.kid}, roles=["sre"], jti=f"j{i}") for i in range(3)]
    first = await auth.verify_any(tokens[0])
    await auth.verify_any(tokens[1])
    assert await auth.verify_any(tokens[0]) is first  # two remembered: full, not over
    await auth.verify_any(tokens[2])  # a third: the full map is emptied first
    again = await auth.verify_any(tokens[0])
    assert again == first and again is not first
