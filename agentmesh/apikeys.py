"""API keys: long-lived bearer credentials bound to an identity, with quotas and budgets (docs/design.md §9).

`agentmesh keys create --agent A --budget-usd 5/day --rpm 60 --models 'openai/*'` mints one: the key is
shown once and only its SHA-256 is stored, with the identity it stands for (subject, agent, grants,
environment) and its limits. It is accepted wherever an identity token is: `authorization: Bearer` on
gRPC, Connect and the OpenAI/Anthropic-compatible endpoints (`x-api-key` too), by every service's
`Authenticator`. Its limits are enforced by provider_svc on every model call (provider_svc/quotas.py).

Format: `amk_<id>_<secret>`: `id` 12 lowercase hex digits (not secret: it names the key in listings,
usage and audit entries), `secret` 32 base64url characters (192 bits). Redis layout (one hash tag per
key, so the quota scripts read the record in the same slot as the key's counters):
- `am:apikey:{<id>}`: hash of the record (`hash` is the hex SHA-256 of the whole key);
- `am:apikeys`: sorted set of every id by creation time (listing).

A key verifies when its record exists, its hash matches (constant-time), it is not revoked and not
expired, and its environment is the service's. Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentmesh.config import QuotaLimits
from agentmesh.errors import InvalidRequestError, NotFoundError
from agentmesh.identity_value import Identity
from agentmesh.store import Store
from agentmesh.tokens import KEY_PREFIX, TokenError, is_api_key

__all__ = [
    "KEY_PREFIX",
    "ApiKeyRecord",
    "ApiKeys",
    "KeyAuthenticator",
    "KeyRejected",
    "identity_from_key",
    "is_api_key",
    "new_key",
    "parse_budget",
]

_ID_HEX = 12
_KEY = re.compile(r"amk_([0-9a-f]{12})_([A-Za-z0-9_-]{32})")
_NANO = 1_000_000_000
_FOREVER_S = 100 * 365 * 86400
_AGENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")


class KeyRejected(Exception):
    """A key that does not verify; `reason` never contains the key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def new_key() -> tuple[str, str]:
    """A fresh (key id, whole key)."""
    key_id = secrets.token_hex(_ID_HEX // 2)
    secret = secrets.token_urlsafe(24)
    return key_id, f"{KEY_PREFIX}{key_id}_{secret}"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_budget(text: str) -> tuple[str, float]:
    """`5/day`, `100/month`, `0.5/d` -> ("day", 5.0); ValueError naming the form otherwise."""
    amount, sep, period = text.strip().partition("/")
    period = {"day": "day", "d": "day", "daily": "day", "month": "month", "m": "month", "monthly": "month"}.get(
        period.strip().lower(), ""
    )
    try:
        value = float(amount.strip().lstrip("$"))
    except ValueError:
        value = -1.0
    if not sep or not period or value < 0:
        raise ValueError(f"budget {text!r}: expected USD/period, e.g. 5/day or 100/month")
    return period, value


def _nusd(value: float | None) -> str:
    return "" if value is None else str(round(value * _NANO))


def _usd(text: str) -> float | None:
    return None if text in ("", "-1") else int(text) / _NANO


def _int_or_none(text: str) -> int | None:
    return None if text in ("", "-1") else int(text)


@dataclass(frozen=True)
class ApiKeyRecord:
    """What a key stands for and what it may spend (never the key itself)."""

    key_id: str
    subject: str
    agent_id: str
    environment: str
    name: str = ""
    permissions: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    """Model patterns the key may call (fnmatch on `<backend>/<model>` and aliases); empty: any."""
    limits: QuotaLimits = field(default_factory=QuotaLimits)
    """The key's own limits; a None field falls back to `gateway.key_defaults`."""
    created_ms: int = 0
    expires_ms: int = 0
    """0: never."""
    revoked_ms: int = 0
    """0: not revoked."""
    created_by: str = ""
    last_used_ms: int = 0

    def fields(self, digest: str) -> dict[str, str]:
        """The Redis hash of this record."""
        return {
            "hash": digest,
            "id": self.key_id,
            "name": self.name,
            "subject": self.subject,
            "agent_id": self.agent_id,
            "env": self.environment,
            "perms": json.dumps(list(self.permissions)),
            "models": json.dumps(list(self.models)),
            "rpm": "" if self.limits.rpm is None else str(self.limits.rpm),
            "tpm": "" if self.limits.tpm is None else str(self.limits.tpm),
            "budget_day_nusd": _nusd(self.limits.budget_usd_day),
            "budget_month_nusd": _nusd(self.limits.budget_usd_month),
            "created_ms": str(self.created_ms),
            "expires_ms": str(self.expires_ms),
            "revoked_ms": str(self.revoked_ms),
            "created_by": self.created_by,
        }

    @classmethod
    def from_fields(cls, raw: Mapping[Any, Any]) -> ApiKeyRecord:
        f = {_text(k): _text(v) for k, v in raw.items()}
        return cls(
            key_id=f.get("id", ""),
            subject=f.get("subject", ""),
            agent_id=f.get("agent_id", ""),
            environment=f.get("env", ""),
            name=f.get("name", ""),
            permissions=tuple(json.loads(f.get("perms") or "[]")),
            models=tuple(json.loads(f.get("models") or "[]")),
            limits=QuotaLimits(
                rpm=_int_or_none(f.get("rpm", "")),
                tpm=_int_or_none(f.get("tpm", "")),
                budget_usd_day=_usd(f.get("budget_day_nusd", "")),
                budget_usd_month=_usd(f.get("budget_month_nusd", "")),
            ),
            created_ms=int(f.get("created_ms") or 0),
            expires_ms=int(f.get("expires_ms") or 0),
            revoked_ms=int(f.get("revoked_ms") or 0),
            created_by=f.get("created_by", ""),
            last_used_ms=int(f.get("last_used_ms") or 0),
        )

    @property
    def issued_at_s(self) -> int:
        return self.created_ms // 1000

    @property
    def expires_at_s(self) -> int:
        return self.expires_ms // 1000 if self.expires_ms else self.issued_at_s + _FOREVER_S


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


class ApiKeys:
    """The key store on Redis: create, list, revoke, verify."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def record_key(self, key_id: str) -> str:
        """`am:apikey:{<id>}` (its quota counters share the tag: provider_svc/quotas.py)."""
        return f"{self.store.keys.prefix}:apikey:{{{_checked_id(key_id)}}}"

    @property
    def index_key(self) -> str:
        return f"{self.store.keys.prefix}:apikeys"

    async def create(
        self,
        *,
        agent_id: str,
        environment: str,
        subject: str = "",
        name: str = "",
        permissions: Iterable[str] = (),
        models: Iterable[str] = (),
        limits: QuotaLimits | None = None,
        ttl_s: int | None = None,
        created_by: str = "",
    ) -> tuple[str, ApiKeyRecord]:
        """Mints a key for agent `agent_id` (subject defaults to it); returns (the key, shown once, and its record)."""
        if not _AGENT.match(agent_id):
            raise InvalidRequestError("agent", f"{agent_id[:64]!r} is not an agent id")
        subject = subject or agent_id
        if not _AGENT.match(subject):
            raise InvalidRequestError("subject", f"{subject[:64]!r} is not a subject")
        if ttl_s is not None and ttl_s <= 0:
            raise InvalidRequestError("expires", "must be in the future")
        grants = tuple(permissions)
        for grant in grants:
            if len(grant.split(":")) != 3 or not all(grant.split(":")):
                raise InvalidRequestError("permission", f"{grant!r} is not env:group:access")
        now_ms = int(time.time() * 1000)
        key_id, key = new_key()
        record = ApiKeyRecord(
            key_id=key_id,
            subject=subject,
            agent_id=agent_id,
            environment=environment,
            name=name,
            permissions=grants,
            models=tuple(models),
            limits=limits or QuotaLimits(),
            created_ms=now_ms,
            expires_ms=now_ms + ttl_s * 1000 if ttl_s else 0,
            created_by=created_by,
        )
        async with self.store.guard("create api key"):
            # Two slots (the record's and the index's): record first, so a listed id always has a record.
            await self.store.redis.hset(self.record_key(key_id), mapping=record.fields(_digest(key)))  # type: ignore[arg-type]
            await self.store.redis.zadd(self.index_key, {key_id: now_ms})
        return key, record

    async def get(self, key_id: str) -> ApiKeyRecord:
        """The record of `key_id`; NotFoundError when there is none."""
        async with self.store.guard("read api key"):
            raw = await self.store.redis.hgetall(self.record_key(key_id))
        if not raw:
            raise NotFoundError(f"no API key {key_id[:64]!r}")
        return ApiKeyRecord.from_fields(raw)

    async def list(self) -> list[ApiKeyRecord]:
        """Every key, oldest first (revoked ones included, marked)."""
        async with self.store.guard("list api keys"):
            ids = [_text(i) for i in await self.store.redis.zrange(self.index_key, 0, -1)]
            if not ids:
                return []
            pipe = self.store.redis.pipeline(transaction=False)
            for key_id in ids:
                pipe.hgetall(self.record_key(key_id))
            rows = await pipe.execute()
        return [ApiKeyRecord.from_fields(raw) for raw in rows if raw]

    async def revoke(self, key_id: str) -> ApiKeyRecord:
        """Marks `key_id` revoked (kept for listings and audit); NotFoundError for an unknown id."""
        record = await self.get(key_id)
        if record.revoked_ms:
            return record
        now_ms = int(time.time() * 1000)
        async with self.store.guard("revoke api key"):
            await self.store.redis.hset(self.record_key(key_id), "revoked_ms", str(now_ms))
        return await self.get(key_id)

    async def verify(self, key: str, *, now: float | None = None) -> ApiKeyRecord:
        """The record of a presented key; KeyRejected (reason only) when it does not verify."""
        match = _KEY.fullmatch(key)
        if match is None:
            raise KeyRejected("malformed API key")
        key_id = match.group(1)
        async with self.store.guard("verify api key"):
            raw = await self.store.redis.hgetall(self.record_key(key_id))
        if not raw:
            raise KeyRejected(f"unknown API key {key_id}")
        stored = _text(raw.get(b"hash", raw.get("hash", b"")))
        if not hmac.compare_digest(stored, _digest(key)):
            raise KeyRejected(f"unknown API key {key_id}")
        record = ApiKeyRecord.from_fields(raw)
        now_ms = int((time.time() if now is None else now) * 1000)
        if record.revoked_ms:
            raise KeyRejected(f"API key {key_id} was revoked at {_iso(record.revoked_ms)}")
        if record.expires_ms and now_ms >= record.expires_ms:
            raise KeyRejected(f"API key {key_id} expired at {_iso(record.expires_ms)}")
        return record


def identity_from_key(record: ApiKeyRecord) -> Identity:
    """The Identity an API key stands for: its subject and agent (role agent), grants, key id, models."""
    return Identity(
        subject=record.subject,
        agent_id=record.agent_id,
        instance="",
        environment=record.environment,
        roles=frozenset({"agent"}),
        permissions=record.permissions,
        task_id="",
        issued_at=record.issued_at_s,
        expires_at=record.expires_at_s,
        token_id=f"key:{record.key_id}",
        api_key_id=record.key_id,
        model_patterns=record.models,
    )


_MAX_KEY_CHARS = 256
_CACHE_ENTRIES = 4096


class KeyAuthenticator:
    """API keys for `Authenticator` (agentmesh/authenticator.py): a verified key is trusted for `cache_s`, so
    a revocation reaches a replica's other RPCs within that, and its model calls at once (provider_svc's
    reservation reads the record in the same script)."""

    def __init__(self, keys: ApiKeys, cache_s: float = 5.0) -> None:
        self.keys = keys
        self.cache_s = cache_s
        self._verified: dict[str, tuple[Identity, float]] = {}

    async def identity(self, key: str, *, now: float | None = None) -> Identity:
        """The key's Identity; TokenError (the reason only, never the key) when it does not verify."""
        current = time.time() if now is None else now
        known = self._verified.get(key)
        if known is not None and time.monotonic() - known[1] < self.cache_s:
            if current >= known[0].expires_at:
                self._verified.pop(key, None)
                raise TokenError(f"API key {known[0].api_key_id} expired at {_iso(known[0].expires_at * 1000)}")
            return known[0]
        if len(key) > _MAX_KEY_CHARS:
            raise TokenError("malformed API key")
        try:
            record = await self.keys.verify(key, now=now)
        except KeyRejected as exc:
            self._verified.pop(key, None)
            raise TokenError(exc.reason) from None
        identity = identity_from_key(record)
        if len(self._verified) >= _CACHE_ENTRIES:
            self._verified.clear()
        self._verified[key] = (identity, time.monotonic())
        return identity


def _checked_id(key_id: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{12}", key_id or ""):
        raise InvalidRequestError("key_id", f"{key_id[:64]!r} is not an API key id (12 hex digits)")
    return key_id
