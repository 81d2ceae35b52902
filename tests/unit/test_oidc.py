"""JWTs of configured OIDC issuers (issue 22, docs/architecture.md §9): keys the tests make, a JWKS served
over real HTTP on localhost. Accepted and mapped; refused for a bad signature, a wrong audience, an
expired or not-yet-valid token, an unknown kid (after exactly one refetch), an untrusted issuer, a
forbidden algorithm; a rotation is picked up; an unreachable identity provider is UNAVAILABLE."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest

from agentmesh.config import AuthSettings, OidcIssuerSettings
from agentmesh.errors import ErrorCode, UnauthenticatedError, UnavailableError
from agentmesh.identity import Authenticator
from tests.jwks import AUDIENCE, ISSUER, Issuer, new_key

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
