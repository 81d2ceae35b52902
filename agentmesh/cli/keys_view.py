"""`agentmesh keys create|list|revoke`: API keys with quotas and budgets (docs/architecture.md §9, §6).

    agentmesh keys create --agent support-bot --budget-usd 5/day --rpm 60 --tpm 100000 --models 'openai/*'
    agentmesh keys list [--json]
    agentmesh keys revoke <key id>

The key is printed once, by `create`; only its SHA-256 is stored (agentmesh/apikeys.py). Like `agentmesh
audit`, these read and write Redis directly (`redis.url`, or the Redis of a running `agentmesh up`): who
may run them is who may reach the deployment's Redis. Each create and revoke is audited (`key.create`,
`key.revoke`, subject `cli:<login>`).
"""

from __future__ import annotations

import asyncio
import getpass
import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from agentmesh.apikeys import ApiKeyRecord, ApiKeys, parse_budget
from agentmesh.audit import AuditLog
from agentmesh.config import QuotaLimits, Settings
from agentmesh.errors import AgentmeshError
from agentmesh.store import Store

__all__ = ["create_command", "format_keys", "list_command", "parse_ttl", "revoke_command"]

_TTL = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
HEADER = ("id", "name", "agent", "subject", "rpm", "tpm", "USD/day", "USD/month", "models", "state", "last used")


def parse_ttl(text: str) -> int:
    """`30d`, `12h`, `90m` -> seconds; ValueError otherwise."""
    match = _TTL.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise ValueError(f"--expires {text!r}: expected a duration such as 30d, 12h or 90m")
    return int(match.group(1)) * _UNIT_S[match.group(2).lower()]


def _who() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):
        return "cli"


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000)) if ms else "-"


def _state(record: ApiKeyRecord, now_ms: int) -> str:
    if record.revoked_ms:
        return f"revoked {_iso(record.revoked_ms)}"
    if record.expires_ms and now_ms >= record.expires_ms:
        return f"expired {_iso(record.expires_ms)}"
    return f"active until {_iso(record.expires_ms)}" if record.expires_ms else "active"


def _limit(value: float | int | None, default: float | int | None) -> str:
    if value is not None:
        return f"{value:g}"
    return f"{default:g} (default)" if default is not None else "-"


def key_json(record: ApiKeyRecord, defaults: QuotaLimits, now_ms: int) -> dict[str, Any]:
    limits = record.limits
    return {
        "id": record.key_id,
        "name": record.name,
        "agent_id": record.agent_id,
        "subject": record.subject,
        "environment": record.environment,
        "rpm": limits.rpm if limits.rpm is not None else defaults.rpm,
        "tpm": limits.tpm if limits.tpm is not None else defaults.tpm,
        "budget_usd_day": limits.budget_usd_day if limits.budget_usd_day is not None else defaults.budget_usd_day,
        "budget_usd_month": (
            limits.budget_usd_month if limits.budget_usd_month is not None else defaults.budget_usd_month
        ),
        "models": list(record.models),
        "permissions": list(record.permissions),
        "state": _state(record, now_ms).split(" ", 1)[0],
        "created": _iso(record.created_ms),
        "expires": _iso(record.expires_ms) if record.expires_ms else None,
        "revoked": _iso(record.revoked_ms) if record.revoked_ms else None,
        "last_used": _iso(record.last_used_ms) if record.last_used_ms else None,
        "created_by": record.created_by,
    }


def format_keys(records: Sequence[ApiKeyRecord], defaults: QuotaLimits, now_ms: int) -> list[str]:
    """Aligned lines, a header first."""
    rows = [
        (
            r.key_id, r.name or "-", r.agent_id, r.subject, _limit(r.limits.rpm, defaults.rpm),
            _limit(r.limits.tpm, defaults.tpm), _limit(r.limits.budget_usd_day, defaults.budget_usd_day),
            _limit(r.limits.budget_usd_month, defaults.budget_usd_month), ",".join(r.models) or "*",
            _state(r, now_ms), _iso(r.last_used_ms),
        )
        for r in records
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [HEADER, *rows]]


async def _connected(settings: Settings) -> Store:
    return await Store.connect(settings.redis, settings.environment, check=False)


async def _audit(store: Store, settings: Settings, action: str, target: str, detail: str) -> None:
    try:
        await AuditLog(store, settings.audit).record(subject=_who(), action=action, target=target, detail=detail)
    except AgentmeshError as exc:  # the key stands: the audit is best effort, as everywhere
        print(f"agentmesh keys: {action} not audited: {exc.message}", file=sys.stderr)


def create_command(
    settings: Settings,
    *,
    agent: str,
    subject: str = "",
    name: str = "",
    budgets: Sequence[str] = (),
    rpm: int | None = None,
    tpm: int | None = None,
    models: Sequence[str] = (),
    expires: str | None = None,
    permissions: Sequence[str] = (),
    as_json: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Mints a key and prints it once; 0, 1 when Redis cannot be reached, 2 on bad arguments."""
    out = out or sys.stdout
    err = err or sys.stderr
    limits: dict[str, Any] = {"rpm": rpm, "tpm": tpm}
    try:
        for text in budgets:
            period, value = parse_budget(text)
            limits[f"budget_usd_{period}"] = value
        ttl_s = parse_ttl(expires) if expires else None
        if (rpm is not None and rpm < 0) or (tpm is not None and tpm < 0):
            raise ValueError("--rpm and --tpm must be >= 0")
    except ValueError as exc:
        err.write(f"agentmesh keys create: {exc}\n")
        return 2
    patterns = tuple(p.strip() for text in models for p in text.split(",") if p.strip())

    async def create() -> tuple[str, ApiKeyRecord]:
        async with await _connected(settings) as store:
            key, record = await ApiKeys(store).create(
                agent_id=agent,
                subject=subject,
                name=name,
                environment=settings.environment,
                permissions=permissions,
                models=patterns,
                limits=QuotaLimits(**limits),
                ttl_s=ttl_s,
                created_by=_who(),
            )
            await _audit(store, settings, "key.create", record.key_id, f"agent {agent}")
            return key, record

    try:
        key, record = asyncio.run(create())
    except AgentmeshError as exc:
        err.write(f"agentmesh keys create: {exc.message}\n")
        return 2 if exc.code.name == "INVALID_REQUEST" else 1
    now_ms = int(time.time() * 1000)
    if as_json:
        out.write(json.dumps({"key": key, **key_json(record, settings.gateway.key_defaults, now_ms)}) + "\n")
        return 0
    out.write(f"{key}\n")
    err.write(
        f"API key {record.key_id} for agent {agent} ({environment_line(settings)}): shown once, store it now. "
        f"Use it as `Authorization: Bearer <key>` (or `x-api-key`).\n"
    )
    err.write("\n".join(format_keys([record], settings.gateway.key_defaults, now_ms)) + "\n")
    return 0


def environment_line(settings: Settings) -> str:
    return f"environment {settings.environment}"


def list_command(settings: Settings, *, as_json: bool = False, out: TextIO | None = None) -> int:
    """Prints every key (never a secret); 0, or 1 when Redis cannot be read."""
    out = out or sys.stdout

    async def read() -> list[ApiKeyRecord]:
        async with await _connected(settings) as store:
            return await ApiKeys(store).list()

    try:
        records = asyncio.run(read())
    except AgentmeshError as exc:
        print(f"agentmesh keys list: {exc.message}", file=sys.stderr)
        return 1
    now_ms = int(time.time() * 1000)
    defaults = settings.gateway.key_defaults
    if as_json:
        for record in records:
            out.write(json.dumps(key_json(record, defaults, now_ms)) + "\n")
    elif not records:
        out.write("no API keys (agentmesh keys create --agent <agent>)\n")
    else:
        out.write("\n".join(format_keys(records, defaults, now_ms)) + "\n")
    return 0


def revoke_command(settings: Settings, key_id: str, *, out: TextIO | None = None) -> int:
    """Revokes a key by its id; 0, 1 when Redis cannot be reached, 2 for an unknown id."""
    out = out or sys.stdout

    async def revoke() -> ApiKeyRecord:
        async with await _connected(settings) as store:
            record = await ApiKeys(store).revoke(key_id)
            await _audit(store, settings, "key.revoke", key_id, f"agent {record.agent_id}")
            return record

    try:
        record = asyncio.run(revoke())
    except AgentmeshError as exc:
        print(f"agentmesh keys revoke: {exc.message}", file=sys.stderr)
        return 2 if exc.code.name in ("NOT_FOUND", "INVALID_REQUEST") else 1
    out.write(f"revoked {record.key_id} (agent {record.agent_id}) at {_iso(record.revoked_ms)}\n")
    return 0
