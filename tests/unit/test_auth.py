"""Identity tokens: minting, verification and every way a token can be rejected (docs/design.md §9)."""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import json
import logging
import time
from typing import Any

import pytest
from pydantic import SecretStr

from agentmesh import authenticator as authenticator_module
from agentmesh.authenticator import Authenticator, identity_from_jwt
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.cli.token_mint import token_command
from agentmesh.config import AuthSettings, ConfigError, OidcIssuerSettings, Settings
from agentmesh.errors import AgentmeshError, ErrorCode, UnauthenticatedError
from agentmesh.identity_value import Identity, current_identity, identity_var, require_identity
from agentmesh.oidc import VerifiedJwt
from agentmesh.tokens import TokenError, mint_token, verify_token

KEY = b"unit-test-key-0123456789abcdef0123"
NOW = 1_700_000_000


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed(payload: str, key: bytes = KEY) -> str:
    """A token whose signature is right for an arbitrary first part (written independently of auth)."""
    return payload + "." + b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def claims_token(claims: Any) -> str:
    return signed(b64(json.dumps(claims).encode()))


def good_claims(**changes: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "v": 1,
        "sub": "sre-bot",
        "agent_id": "sre-bot",
        "instance": "sre-bot/t-1",
        "env": "prod",
        "roles": ["agent"],
        "perms": ["prod:ops.read:read"],
        "task_id": "t-1",
        "iat": NOW,
        "exp": NOW + 60,
        "jti": "abc",
    }
    claims.update(changes)
    return claims


def mint(**changes: Any) -> str:
    kwargs: dict[str, Any] = {
        "subject": "sre-bot",
        "roles": ("agent",),
        "ttl_s": 60,
        "agent_id": "sre-bot",
        "instance": "sre-bot/t-1",
        "environment": "prod",
        "permissions": ("prod:ops.read:read", "*:k8s:write"),
        "task_id": "t-1",
        "now": NOW,
    }
    kwargs.update(changes)
    return mint_token(KEY, **kwargs)


def test_round_trip_keeps_every_claim() -> None:
    identity = verify_token(KEY, mint(), now=NOW + 1)
    assert identity == Identity(
        subject="sre-bot",
        agent_id="sre-bot",
        instance="sre-bot/t-1",
        environment="prod",
        roles=frozenset({"agent"}),
        permissions=("prod:ops.read:read", "*:k8s:write"),
        task_id="t-1",
        issued_at=NOW,
        expires_at=NOW + 60,
        token_id=identity.token_id,
    )
    assert len(identity.token_id) == 32


def test_format_is_two_unpadded_base64url_parts() -> None:
    token = mint()
    payload, _signature = token.split(".")
    assert "=" not in token
    assert json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sub"] == "sre-bot"
    assert signed(payload) == token


def test_token_ids_are_unique() -> None:
    assert verify_token(KEY, mint(), now=NOW).token_id != verify_token(KEY, mint(), now=NOW).token_id


def test_tampered_claims_are_rejected() -> None:
    payload, signature = mint().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["roles"] = ["admin"]
    forged = b64(json.dumps(claims).encode()) + "." + signature
    with pytest.raises(TokenError, match="bad signature"):
        verify_token(KEY, forged, now=NOW)


def test_tampered_signature_is_rejected() -> None:
    payload, signature = mint().split(".")
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    with pytest.raises(TokenError, match="bad signature"):
        verify_token(KEY, f"{payload}.{flipped}", now=NOW)


def test_non_canonical_signature_encoding_is_rejected() -> None:
    # 32 bytes -> 43 chars whose last char carries 2 unused bits; changing them decodes the same.
    payload, signature = mint().split(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(signature[-1])
    twin = signature[:-1] + alphabet[last ^ 1]
    assert base64.urlsafe_b64decode(twin + "=") == base64.urlsafe_b64decode(signature + "=")
    with pytest.raises(TokenError, match="bad signature"):
        verify_token(KEY, f"{payload}.{twin}", now=NOW)


def test_token_signed_with_another_key_is_rejected() -> None:
    token = mint_token(b"another-key", subject="x", roles=("admin",), ttl_s=60, now=NOW)
    with pytest.raises(TokenError, match="bad signature"):
        verify_token(KEY, token, now=NOW)


def test_expired_token_is_rejected_after_the_skew() -> None:
    token = mint(ttl_s=60)
    verify_token(KEY, token, now=NOW + 60 + 29, clock_skew_s=30)
    with pytest.raises(TokenError, match=r"token expired at 2023-11-14T22:14:20Z"):
        verify_token(KEY, token, now=NOW + 60 + 30, clock_skew_s=30)
    with pytest.raises(TokenError, match="token expired"):
        verify_token(KEY, token, now=NOW + 60, clock_skew_s=0)


def test_not_yet_valid_token_is_rejected_beyond_the_skew() -> None:
    token = mint()
    verify_token(KEY, token, now=NOW - 30, clock_skew_s=30)
    with pytest.raises(TokenError, match="not valid before"):
        verify_token(KEY, token, now=NOW - 31, clock_skew_s=30)


def test_token_error_is_an_unauthenticated_agentmesh_error() -> None:
    with pytest.raises(UnauthenticatedError) as info:
        verify_token(KEY, "nope", now=NOW)
    assert isinstance(info.value, AgentmeshError)
    assert info.value.code == ErrorCode.UNAUTHENTICATED
    assert info.value.reason.startswith("malformed token")  # type: ignore[attr-defined]


MALFORMED: dict[str, str] = {
    "empty": "",
    "one part": "a",
    "three parts": "a.b.c",
    "empty parts": ".",
    "not base64": "a$b.c%d",
    "padded": b64(b"{}") + "==." + "A" * 43,
    "impossible base64 length": "abcde." + "A" * 43,
    "huge": "A" * 20_000 + "." + "A" * 43,
    "non-JSON": signed(b64(b"not json")),
    "non-UTF-8": signed(b64(b"\xff\xfe")),
    "JSON array": claims_token([1, 2]),
    "JSON string": claims_token("hi"),
    "missing sub": claims_token({k: v for k, v in good_claims().items() if k != "sub"}),
    "missing exp": claims_token({k: v for k, v in good_claims().items() if k != "exp"}),
    "missing v": claims_token({k: v for k, v in good_claims().items() if k != "v"}),
    "empty object": claims_token({}),
    "unknown version": claims_token(good_claims(v=2)),
    "version as string": claims_token(good_claims(v="1")),
    "exp as string": claims_token(good_claims(exp=str(NOW + 60))),
    "exp as float": claims_token(good_claims(exp=NOW + 60.5)),
    "exp as bool": claims_token(good_claims(exp=True)),
    "roles as string": claims_token(good_claims(roles="agent")),
    "roles with a number": claims_token(good_claims(roles=["agent", 1])),
    "no roles": claims_token(good_claims(roles=[])),
    "perms as dict": claims_token(good_claims(perms={"a": 1})),
    "sub as null": claims_token(good_claims(sub=None)),
    "empty sub": claims_token(good_claims(sub="")),
    "exp before iat": claims_token(good_claims(exp=NOW - 1)),
    # Within the size cap but past json's recursion limit: RecursionError must not leak.
    "deeply nested": signed(b64(b"[" * 5000 + b"]" * 5000)),
}


@pytest.mark.parametrize("token", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_tokens_raise_only_token_error(token: str) -> None:
    with pytest.raises(TokenError) as info:
        verify_token(KEY, token, now=NOW)
    # A typed reason a human can act on; never the token itself.
    assert info.value.reason.startswith("malformed token")
    if len(token) > 8:
        assert token not in str(info.value)


def test_signature_is_checked_before_the_claims_are_parsed() -> None:
    # Garbage claims with a wrong signature read as "bad signature": nothing unsigned is parsed.
    with pytest.raises(TokenError, match="bad signature"):
        verify_token(KEY, b64(b"not json") + "." + "A" * 43, now=NOW)


def test_non_string_token_is_malformed() -> None:
    with pytest.raises(TokenError, match="malformed"):
        verify_token(KEY, None, now=NOW)  # type: ignore[arg-type]


def test_unknown_claims_are_ignored() -> None:
    identity = verify_token(KEY, claims_token(good_claims(extra="x")), now=NOW)
    assert identity.subject == "sre-bot"


@pytest.mark.parametrize("key", [b"", ""])
def test_empty_key_is_refused(key: Any) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        mint_token(key, subject="x", roles=("agent",), ttl_s=60)
    with pytest.raises(ValueError, match="non-empty"):
        verify_token(key, mint())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"subject": ""}, "subject"),
        ({"roles": ()}, "at least one role"),
        ({"roles": ("agent", "root")}, "unknown roles"),
        ({"ttl_s": 0}, "ttl_s"),
    ],
)
def test_mint_refuses_bad_claims(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mint(**changes)


def test_admin_implies_operator_but_not_agent() -> None:
    admin = verify_token(KEY, mint(roles=("admin",)), now=NOW)
    assert admin.has_role("admin")
    assert admin.has_role("operator")
    assert not admin.has_role("agent")
    operator = verify_token(KEY, mint(roles=("operator",)), now=NOW)
    assert operator.has_role("operator")
    assert not operator.has_role("admin")
    agent = verify_token(KEY, mint(roles=("agent",)), now=NOW)
    assert not agent.has_any_role({"operator", "admin"})
    assert agent.has_any_role({"agent", "operator"})


def test_identity_repr_holds_no_token() -> None:
    token = mint()
    identity = verify_token(KEY, token, now=NOW)
    assert token not in repr(identity)
    assert token.split(".")[1] not in repr(identity)


# --- Authenticator ---------------------------------------------------------------------------------


def enabled(**changes: Any) -> AuthSettings:
    return AuthSettings(mode="enabled", key=SecretStr(KEY.decode()), **changes)


def test_authenticator_mints_with_configured_ttl_and_environment() -> None:
    authenticator = Authenticator(enabled(token_ttl_s=120), environment="staging")
    identity = authenticator.verify(authenticator.mint(subject="alice", roles={"operator"}, now=NOW), now=NOW)
    assert identity.expires_at == NOW + 120
    assert identity.environment == "staging"
    # The module function agrees: the configured key is the secret's UTF-8 bytes.
    assert verify_token(KEY, authenticator.mint(subject="a", roles={"agent"}))


def test_authenticator_uses_configured_clock_skew() -> None:
    authenticator = Authenticator(enabled(clock_skew_s=0))
    token = authenticator.mint(subject="a", roles={"agent"}, ttl_s=10, now=NOW)
    with pytest.raises(TokenError, match="expired"):
        authenticator.verify(token, now=NOW + 10)


def test_a_remembered_token_still_expires_and_forged_ones_are_never_remembered() -> None:
    authenticator = Authenticator(enabled(clock_skew_s=0))
    token = authenticator.mint(subject="a", roles={"agent"}, ttl_s=10, now=NOW)
    assert authenticator.verify(token, now=NOW).subject == "a"
    assert authenticator.verify(token, now=NOW + 5).subject == "a"  # served from the cache
    with pytest.raises(TokenError, match="expired"):
        authenticator.verify(token, now=NOW + 10)
    payload, _ = token.split(".")
    forged = payload + "." + "A" * 43
    for _ in range(2):
        with pytest.raises(TokenError, match="signature"):
            authenticator.verify(forged, now=NOW)


def test_a_token_of_another_environment_is_refused_naming_both() -> None:
    # One key signs for every environment: only the token's `env` claim tells them apart.
    prod = Authenticator(enabled(), environment="prod")
    dev_token = Authenticator(enabled(), environment="dev").mint(subject="ops", roles={"admin"}, now=NOW)
    for _ in range(2):  # a refusal is never remembered as a success
        with pytest.raises(TokenError) as info:
            prod.verify(dev_token, now=NOW)
        assert info.value.reason == "token for environment 'dev' used on a service of environment 'prod'"
        assert info.value.code == ErrorCode.UNAUTHENTICATED
    with pytest.raises(TokenError, match="environment 'dev'"):
        prod.identify(dev_token, now=NOW)
    # Minting for another environment explicitly changes nothing.
    with pytest.raises(TokenError, match="environment 'staging'"):
        prod.verify(prod.mint(subject="ops", roles={"admin"}, environment="staging", now=NOW), now=NOW)
    assert prod.verify(prod.mint(subject="ops", roles={"admin"}, now=NOW), now=NOW).environment == "prod"


def test_the_verified_token_cache_cannot_bypass_the_environment() -> None:
    dev = Authenticator(enabled(), environment="dev")
    prod = Authenticator(enabled(), environment="prod")
    dev_token = dev.mint(subject="ops", roles={"admin"}, now=NOW)
    # Remembered by the dev service (same key), yet refused by the prod one: caches are per service.
    assert dev.verify(dev_token, now=NOW).environment == "dev"
    assert dev.verify(dev_token, now=NOW + 1).environment == "dev"
    with pytest.raises(TokenError, match="environment 'dev'"):
        prod.verify(dev_token, now=NOW + 1)
    # A remembered token is checked against the service's environment on every call, not only the first.
    dev.environment = "prod"
    with pytest.raises(TokenError, match="environment 'dev'"):
        dev.verify(dev_token, now=NOW + 2)


def test_enabled_authenticator_needs_a_key() -> None:
    with pytest.raises(ConfigError, match=r"auth\.key is required"):
        Authenticator(AuthSettings(mode="enabled", key=None))
    with pytest.raises(ConfigError, match=r"auth\.key is required"):
        Authenticator(AuthSettings(mode="enabled", key=SecretStr("")))


def test_enabled_identify_requires_a_valid_token() -> None:
    authenticator = Authenticator(enabled())
    with pytest.raises(TokenError, match="missing identity token"):
        authenticator.identify(None)
    with pytest.raises(TokenError, match="missing identity token"):
        authenticator.identify("")
    with pytest.raises(TokenError, match="malformed"):
        authenticator.identify("garbage")
    assert authenticator.identify(authenticator.mint(subject="a", roles={"agent"})).subject == "a"


def test_disabled_mode_warns_loudly_and_trusts_everyone(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="agentmesh.authenticator"):
        authenticator = Authenticator(AuthSettings(mode="disabled"), environment="dev")
    assert any(
        r.levelno == logging.WARNING and "auth is DISABLED" in r.getMessage() and "dev only" in r.getMessage()
        for r in caplog.records
    )
    for token in (None, "", "garbage", mint_token(b"other", subject="x", roles={"agent"}, ttl_s=60)):
        identity = authenticator.identify(token)
        assert identity.subject == "dev"
        assert identity.roles == frozenset({"agent", "operator", "admin"})
        assert identity.environment == "dev"


def test_disabled_mode_honours_a_token_signed_with_the_configured_key() -> None:
    authenticator = Authenticator(AuthSettings(mode="disabled", key=SecretStr("k")))
    token = authenticator.mint(subject="sre-bot", roles={"agent"}, agent_id="sre-bot")
    assert authenticator.identify(token).subject == "sre-bot"


def test_disabled_mode_without_key_still_mints_tokens_it_can_verify() -> None:
    authenticator = Authenticator(AuthSettings(mode="disabled"))
    token = authenticator.mint(subject="sre-bot", roles={"agent"})
    assert authenticator.verify(token).subject == "sre-bot"


@pytest.mark.parametrize("environment", ["staging", "prod"])
def test_disabled_mode_is_refused_outside_dev(environment: str) -> None:
    with pytest.raises(ConfigError, match=f"disabled but environment is '{environment}'"):
        Authenticator(AuthSettings(mode="disabled"), environment=environment)


def test_from_settings_refuses_disabled_in_prod() -> None:
    # Settings validation refuses this too; the Authenticator must not rely on it.
    settings = Settings.model_construct(environment="prod", auth=AuthSettings(mode="disabled"))
    with pytest.raises(ConfigError):
        Authenticator.from_settings(settings)


# --- the current identity --------------------------------------------------------------------------


def test_require_identity_outside_a_call_is_unauthenticated() -> None:
    assert current_identity() is None
    with pytest.raises(UnauthenticatedError):
        require_identity()


def test_require_identity_returns_the_identity_set_for_the_call() -> None:
    identity = Identity.dev()
    reset = identity_var.set(identity)
    try:
        assert current_identity() is identity
        assert require_identity() is identity
    finally:
        identity_var.reset(reset)


def test_the_dev_identity_holds_every_role_and_permission_for_a_year() -> None:
    year = 365 * 24 * 3600
    assert Identity.dev("staging", now=1_000) == Identity(
        subject="dev",
        agent_id="",
        instance="",
        environment="staging",
        roles=frozenset({"agent", "operator", "admin"}),
        permissions=("*:*:*",),
        task_id="",
        issued_at=1_000,
        expires_at=1_000 + year,
        token_id="",
    )
    assert Identity.dev(now=0).issued_at == 0  # a given time is used even when it is 0
    before = int(time.time())
    default = Identity.dev()
    assert default.environment == "dev" and default.subject == "dev"
    assert before <= default.issued_at <= int(time.time()) and default.expires_at == default.issued_at + year


# --- agentmesh token ------------------------------------------------------------------------------


def test_token_command_mints_an_operator_token() -> None:
    settings = Settings(environment="staging", auth=enabled(token_ttl_s=900))
    token = token_command(settings, "operator", "alice", None)
    identity = verify_token(KEY, token)
    assert identity.subject == "alice"
    assert identity.roles == frozenset({"operator"})
    assert identity.environment == "staging"
    assert identity.expires_at - identity.issued_at == 900


def test_token_command_admin_with_ttl_and_default_subject() -> None:
    token = token_command(Settings(auth=enabled()), "admin", None, 30)
    identity = verify_token(KEY, token)
    assert identity.has_role("operator")
    assert identity.subject
    assert identity.expires_at - identity.issued_at == 30


def test_token_command_for_an_agent_carries_its_id_and_grants_and_each_refusal_says_why_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(environment="staging", auth=enabled())
    agent = verify_token(KEY, token_command(settings, None, None, None, agent_id="ops", permissions=["a:b:c"]))
    assert (agent.subject, agent.agent_id, agent.roles) == ("ops", "ops", frozenset({"agent"}))
    assert agent.permissions == ("a:b:c",) and agent.environment == "staging"

    def no_login_name() -> str:
        raise KeyError("no passwd entry")

    monkeypatch.setattr(getpass, "getuser", no_login_name)
    assert verify_token(KEY, token_command(settings, "admin", None, None)).subject == "admin"
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"role": None}, "--role must be one of admin, agent, operator (or name an --agent), got None"),
        ({"role": "agent"}, "an agent token needs --agent"),
    ]
    for grant in ("a:b", "a:b:c:d", "a::c", ":b:c"):
        refusals.append(
            (
                {"role": "operator", "permissions": [grant]},
                f"--permission {grant!r} is not env:group:access (e.g. dev:ops.*:read)",
            )
        )
    for kwargs, message in refusals:
        role = kwargs.pop("role")
        with pytest.raises(ValueError) as info:
            token_command(settings, role, "x", None, **kwargs)
        assert str(info.value) == message
    with pytest.raises(ConfigError) as config:  # Settings refuses auth enabled without a key: only disabled gets here
        token_command(Settings(auth=AuthSettings(mode="disabled")), "operator", "x", None)
    assert str(config.value) == (
        "auth.key is not set (AGENTMESH_AUTH_KEY): cannot sign a token; while auth is disabled no token is needed"
    )


def test_require_identity_outside_a_call_says_what_is_missing() -> None:
    with pytest.raises(UnauthenticatedError) as info:
        require_identity()
    assert info.value.message == "no caller identity (is the RPC edge's AuthInterceptor installed?)"


def test_from_settings_uses_the_services_environment() -> None:
    authenticator = Authenticator.from_settings(Settings(environment="staging", auth=enabled()))
    assert verify_token(KEY, authenticator.mint(subject="bob", roles=("operator",))).environment == "staging"


def test_a_minted_token_defaults_to_no_agent_instance_or_task_in_dev() -> None:
    identity = verify_token(KEY, mint_token(KEY, subject="s", roles=("operator",), ttl_s=60))
    assert (identity.agent_id, identity.instance, identity.task_id, identity.environment) == ("", "", "", "dev")


def test_token_command_refuses_an_agent_role_without_agent_and_missing_key() -> None:
    with pytest.raises(ValueError, match="needs --agent"):
        token_command(Settings(auth=enabled()), "agent", "x", None)
    with pytest.raises(ValueError, match="must be one of"):
        token_command(Settings(auth=enabled()), None, "x", None)
    with pytest.raises(ValueError, match="env:group:access"):
        token_command(Settings(auth=enabled()), None, None, None, agent_id="ops", permissions=["ops.read"])
    with pytest.raises(ConfigError, match="no token is needed"):
        token_command(Settings(auth=AuthSettings(mode="disabled")), "operator", "x", None)


def test_authenticator_mint_carries_every_claim_and_defaults_to_none() -> None:
    authenticator = Authenticator(enabled(), environment="dev")
    full = authenticator.verify(
        authenticator.mint(
            subject="ops",
            roles=("agent",),
            agent_id="ops",
            instance="ops-1",
            permissions=("dev:k8s:read",),
            task_id="t-1",
            creator="alice",
        )
    )
    assert (full.agent_id, full.instance, full.task_id, full.creator) == ("ops", "ops-1", "t-1", "alice")
    assert full.permissions == ("dev:k8s:read",)
    bare = authenticator.verify(authenticator.mint(subject="bob", roles=("operator",)))
    assert (bare.agent_id, bare.instance, bare.task_id, bare.creator, bare.permissions) == ("", "", "", "", ())


def test_a_verified_token_is_remembered() -> None:
    authenticator = Authenticator(enabled(), environment="dev")
    token = authenticator.mint(subject="bob", roles=("operator",))
    first = authenticator.verify(token)
    assert authenticator.verify(token) is first  # answered from the cache, not verified again


async def test_api_keys_without_a_store_are_refused_with_the_reason() -> None:
    with pytest.raises(TokenError) as info:
        await Authenticator(enabled(), environment="dev").verify_key("amk_whatever")
    assert info.value.message == "API keys are not accepted here (the service has no store)"


def _signed(payload: bytes) -> str:
    """A token of these raw claims bytes, correctly signed with KEY (to reach the checks after the signature)."""
    part = base64.urlsafe_b64encode(payload).rstrip(b"=").decode()
    digest = hmac.new(KEY, part.encode(), hashlib.sha256).digest()
    return f"{part}.{base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"


def _claims_of(token: str) -> dict[str, Any]:
    part = token.split(".", maxsplit=1)[0]
    loaded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return loaded


def test_each_malformed_token_is_refused_with_its_exact_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    good = mint_token(KEY, subject="s", roles=("operator",), ttl_s=60, now=1_000)
    same_times = {**_claims_of(good), "exp": 1_000}
    for token, reason in [
        (123, "malformed token: empty"),
        ("a!.abcd", "malformed token: claims is not unpadded base64url"),
        ("abcd.a!", "malformed token: signature is not unpadded base64url"),
        ("abcde.abcd", "malformed token: claims is not unpadded base64url"),  # 5 characters: no base64 is
        ("a" * (16 * 1024), "malformed token: expected 2 dot-separated parts, got 1"),  # at the limit: read
        (good.split(".")[0] + ".abcd", "bad signature"),
        (_signed(b"not json"), "malformed token: claims are not JSON"),
        (_signed(b"[1]"), "malformed token: claims are not a JSON object"),
        (_signed(json.dumps(same_times).encode()), "malformed token: expires before it is issued"),
        (_signed(json.dumps({**same_times, "exp": True}).encode()), "malformed token: claim 'exp' must be int"),
    ]:
        with pytest.raises(TokenError) as info:
            verify_token(KEY, token, now=1_010)  # type: ignore[arg-type]
        assert info.value.message == reason, token
    with pytest.raises(ValueError) as key_error:
        verify_token(b"", good)
    assert str(key_error.value) == "the auth key must be non-empty bytes"
    # Times are shown in UTC whatever the host's zone.
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        with pytest.raises(TokenError) as expired:
            verify_token(KEY, good, now=2_000, clock_skew_s=0)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert expired.value.message == "token expired at 1970-01-01T00:17:40Z (now 1970-01-01T00:33:20Z)"


class _FakeKeys:
    """Stands in for agentmesh.apikeys.KeyAuthenticator: answers one Identity and records what it was asked."""

    def __init__(self, identity: Identity) -> None:
        self.answer = identity
        self.asked: list[tuple[str, int | float | None]] = []

    async def identity(self, key: str, *, now: int | float | None = None) -> Identity:
        self.asked.append((key, now))
        return self.answer


async def test_an_api_key_is_asked_of_the_store_with_its_time_and_must_be_for_this_environment() -> None:
    authenticator = Authenticator(enabled(), environment="dev")
    keys = _FakeKeys(Identity.dev("dev", now=NOW))
    authenticator.api_keys = keys  # type: ignore[assignment]
    assert await authenticator.verify_key("amk_1", now=NOW + 5) is keys.answer
    assert keys.asked == [("amk_1", NOW + 5)]
    keys.answer = Identity.dev("prod", now=NOW)
    with pytest.raises(TokenError) as info:
        await authenticator.verify_key("amk_2")
    assert info.value.message == "token for environment 'prod' used on a service of environment 'dev'"


def test_identify_checks_a_token_at_the_given_time_and_auth_disabled_falls_back_to_dev(
    caplog: pytest.LogCaptureFixture,
) -> None:
    enabled_auth = Authenticator(enabled(), environment="dev")
    token = enabled_auth.mint(subject="bob", roles=("operator",), ttl_s=60, now=NOW)
    assert enabled_auth.identify(token, now=NOW + 10).subject == "bob"
    with pytest.raises(TokenError, match="token expired"):
        enabled_auth.identify(token, now=NOW + 1_000)
    disabled = Authenticator(AuthSettings(mode="disabled", key=SecretStr(KEY.decode())), environment="dev")
    assert disabled.identify(token, now=NOW + 10).subject == "bob"
    with caplog.at_level(logging.DEBUG, logger="agentmesh.authenticator"):
        assert disabled.identify(token, now=NOW + 1_000).subject == "dev"
    ignored = [r.getMessage() for r in caplog.records if "unverifiable" in r.getMessage()]
    assert len(ignored) == 1
    assert ignored[0].startswith("auth disabled: ignoring an unverifiable token: token expired at "), ignored


def test_mint_token_writes_compact_sorted_claims_accepts_a_one_second_ttl_and_says_what_is_missing() -> None:
    token = mint_token(KEY, subject="s", roles=("operator",), ttl_s=1, creator="alice", now=NOW)
    raw = base64.urlsafe_b64decode(token.split(".", maxsplit=1)[0] + "==")
    claims = json.loads(raw)
    assert raw == json.dumps(claims, separators=(",", ":"), sort_keys=True).encode()  # canonical: compact, sorted
    assert claims["creator"] == "alice" and claims["exp"] == NOW + 1
    for kwargs, message in [
        ({"subject": "", "roles": ("operator",)}, "a token needs a subject"),
        ({"subject": "s", "roles": ()}, "a token needs at least one role"),
    ]:
        with pytest.raises(ValueError) as info:
            mint_token(KEY, ttl_s=60, **kwargs)  # type: ignore[arg-type]
        assert str(info.value) == message


def test_a_jwts_environment_claim_and_issue_time_are_read_when_configured() -> None:
    issuer = OidcIssuerSettings.model_validate(
        {
            "issuer": "https://idp.example/",
            "audience": "agentmesh",
            "jwks_url": "https://idp.example/jwks",
            "role_map": {"sre": ["operator"]},
            "claims": {"environment": "env"},
        }
    )
    base = {"sub": "bob", "roles": ["sre"], "exp": NOW + 600, "iat": NOW}

    def identity(**claims: Any) -> Identity:
        return identity_from_jwt(VerifiedJwt(issuer, "k", {**base, **claims}), "t.o.k", "dev")

    found = identity(env="staging")
    assert (found.environment, found.issued_at) == ("staging", NOW)
    for bad in ({}, {"env": ""}, {"env": 5}):
        with pytest.raises(TokenError) as info:
            identity(**bad)
        assert info.value.message == "JWT claim 'env' (the environment) is missing"
    before = int(time.time())
    for iat in (True, "yesterday", None):  # an ill-typed or missing iat: the time of verification
        assert identity(env="dev", iat=iat, exp=before + 600).issued_at >= before


def test_verify_token_tolerates_thirty_seconds_of_skew_by_default() -> None:
    token = mint_token(KEY, subject="s", roles=("agent",), ttl_s=60, now=NOW)
    assert verify_token(KEY, token, now=NOW + 60 + 29).subject == "s"
    with pytest.raises(TokenError, match="expired"):
        verify_token(KEY, token, now=NOW + 60 + 30)
    assert verify_token(KEY, token, now=NOW - 30).subject == "s"
    with pytest.raises(TokenError, match="not valid before"):
        verify_token(KEY, token, now=NOW - 31)


def test_the_verified_token_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(authenticator_module, "_VERIFIED_CACHE_SIZE", 3)
    authenticator = Authenticator(enabled(), environment="dev")
    tokens = [authenticator.mint(subject=f"s{i}", roles=("agent",), agent_id="a", now=NOW) for i in range(4)]
    first = authenticator.verify(tokens[0], now=NOW)
    for token in tokens[1:3]:
        authenticator.verify(token, now=NOW)
    assert authenticator.verify(tokens[0], now=NOW) is first  # three remembered: the map is full, not over
    authenticator.verify(tokens[3], now=NOW)  # a fourth: the full map is emptied first
    assert len(authenticator._verified) == 1
    again = authenticator.verify(tokens[0], now=NOW)
    assert again == first and again is not first  # verified afresh


async def test_verify_any_passes_the_time_to_api_keys_and_to_our_tokens() -> None:
    authenticator = Authenticator(enabled(clock_skew_s=0), environment="dev")
    keys = _FakeKeys(Identity.dev("dev", now=NOW))
    authenticator.api_keys = keys  # type: ignore[assignment]
    assert await authenticator.verify_any("amk_1", now=NOW + 5) is keys.answer
    assert keys.asked == [("amk_1", NOW + 5)]
    # A token of long ago, valid at the time given: the given time decides, not the clock.
    token = authenticator.mint(subject="bob", roles=("operator",), ttl_s=60, now=NOW)
    assert (await authenticator.verify_any(token, now=NOW + 10)).subject == "bob"
    with pytest.raises(TokenError, match="expired"):
        await authenticator.verify_any(token, now=NOW + 60)


def test_a_jwts_identity_has_no_instance_or_task_and_is_issued_before_it_expires() -> None:
    issuer = OidcIssuerSettings.model_validate(
        {
            "issuer": "https://idp.example/",
            "audience": "agentmesh",
            "jwks_url": "https://idp.example/jwks",
            "role_map": {"sre": ["operator"]},
        }
    )

    def identity(**claims: Any) -> Identity:
        base = {"sub": "bob", "roles": ["sre"], "exp": NOW + 600, "iat": NOW}
        return identity_from_jwt(VerifiedJwt(issuer, "k", {**base, **claims}), "t.o.k", "dev")

    found = identity()
    assert (found.instance, found.task_id) == ("", "")
    assert (found.issued_at, found.expires_at) == (NOW, NOW + 600)
    # An iat at or after exp (a skewed issuer): issued one second before it expires.
    assert (identity(iat=NOW + 600).issued_at, identity(iat=NOW + 900).issued_at) == (NOW + 599, NOW + 599)
    assert identity(iat=NOW + 599).issued_at == NOW + 599
    for subject in ("", 5, None):
        with pytest.raises(TokenError) as info:
            identity(sub=subject)
        assert info.value.message == "JWT claim 'sub' (the subject) is missing or not a string"


async def test_authenticate_checks_at_the_given_time_and_names_the_missing_header() -> None:
    authenticator = Authenticator(enabled(clock_skew_s=0), environment="dev")
    with pytest.raises(TokenError) as info:
        await authenticator.authenticate(None)
    assert info.value.message == f"missing identity token ({IDENTITY_HEADER} or authorization: Bearer metadata)"
    token = authenticator.mint(subject="bob", roles=("operator",), ttl_s=60, now=NOW)
    assert (await authenticator.authenticate(token, now=NOW + 10)).subject == "bob"
    with pytest.raises(TokenError, match="expired"):
        await authenticator.authenticate(token, now=NOW + 60)


async def test_auth_disabled_still_asks_the_store_for_a_key_and_honours_a_token_at_the_given_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disabled = Authenticator(AuthSettings(mode="disabled", key=SecretStr(KEY.decode()), clock_skew_s=0), "dev")
    keys = _FakeKeys(Identity.dev("dev", now=NOW))
    disabled.api_keys = keys  # type: ignore[assignment]
    assert await disabled.authenticate("amk_1", now=NOW + 5) is keys.answer
    assert keys.asked == [("amk_1", NOW + 5)]
    token = disabled.mint(subject="bob", roles=("operator",), ttl_s=60, now=NOW)
    assert (await disabled.authenticate(token, now=NOW + 10)).subject == "bob"
    with caplog.at_level(logging.DEBUG, logger="agentmesh.authenticator"):
        fallback = await disabled.authenticate(token, now=NOW + 60)  # expired: the dev identity
    assert (fallback.subject, fallback.environment) == ("dev", "dev")
    ignored = [r.getMessage() for r in caplog.records if "unverifiable" in r.getMessage()]
    assert len(ignored) == 1
    assert ignored[0].startswith("auth disabled: ignoring an unverifiable token: token expired at "), ignored
    assert (await disabled.authenticate(None)).environment == "dev"


def test_config_errors_name_the_setting_and_the_variable_to_set(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError) as info:
        Authenticator(AuthSettings(mode="enabled", key=None))
    assert str(info.value) == "auth.key is required when auth.mode is enabled (set AGENTMESH_AUTH_KEY)"
    with pytest.raises(ConfigError) as info:
        Authenticator(AuthSettings(mode="disabled"), environment="prod")
    assert str(info.value) == (
        "auth.mode is disabled but environment is 'prod': refusing to run unauthenticated outside dev "
        "(set auth.mode: enabled and AGENTMESH_AUTH_KEY)"
    )
    with caplog.at_level(logging.WARNING, logger="agentmesh.authenticator"):
        Authenticator(AuthSettings(mode="disabled"), environment="dev")
    assert [r.getMessage() for r in caplog.records] == ["auth is DISABLED: every caller is trusted; dev only"]
