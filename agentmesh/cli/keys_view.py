"""`agentmesh keys create|list|revoke`: API keys with quotas and budgets (docs/design.md §9, §6).

    agentmesh keys create --agent support-bot --budget-usd 5/day --rpm 60 --tpm 100000 --models 'openai/*'
    agentmesh keys list [--json]
    agentmesh keys revoke <key id>

The key is printed once, by `create`; only its SHA-256 is stored (agentmesh/apikeys.py). Like `agentmesh
audit`, these read and write Redis directly (`redis.url`, or the Redis of a running `agentmesh up`): who
may run them is who may reach the deployment's Redis. Each create and revoke is audited (`key.create`,
`key.revoke`, subject `cli:<login>`).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from agentmesh.apikeys import ApiKeyRecord, ApiKeys, parse_budget
from agentmesh.audit import AuditLog
from agentmesh.config import QuotaLimits, Settings
from agentmesh.errors import AgentmeshError
from agentmesh.store import Store

__all__ = ["add_parsers", "cmd_keys", "create_command", "format_keys", "list_command", "parse_ttl", "revoke_command"]

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


def _with_local_redis(settings: Settings) -> Settings:
    """No Redis configured: the one a running `agentmesh up` of this configuration started."""
    from agentmesh.cli.supervisor import local_redis_url

    if settings.redis.url is None and (url := local_redis_url(settings)):
        return settings.model_copy(update={"redis": settings.redis.model_copy(update={"url": url})})
    return settings


def cmd_keys(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """API keys with quotas and budgets: create (the key is shown once), list, revoke."""
    settings = _with_local_redis(settings)
    if args.keys_command == "create":
        return create_command(
            settings,
            agent=args.agent,
            subject=args.subject,
            name=args.name,
            budgets=args.budget_usd,
            rpm=args.rpm,
            tpm=args.tpm,
            models=args.models,
            expires=args.expires,
            permissions=args.permission,
            as_json=args.json,
        )
    if args.keys_command == "list":
        return list_command(settings, as_json=args.json)
    return revoke_command(settings, args.key_id)


def add_parsers(sub: Any) -> None:
    """Adds `keys create|list|revoke` to the `agentmesh` sub-commands."""
    keys = sub.add_parser("keys", help="API keys with quotas and budgets (create, list, revoke)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="mint a key (printed once; only its hash is stored)")
    create.add_argument("--agent", required=True, help="the agent the key acts as and bills (e.g. support-bot)")
    create.add_argument(
        "--subject", default="", help="the key's subject (default: the agent; 'acme:bot' is tenant acme)"
    )
    create.add_argument("--name", default="", help="a label for listings")
    create.add_argument(
        "--budget-usd", action="append", default=[], metavar="USD/PERIOD", help="e.g. 5/day or 100/month; repeatable"
    )
    create.add_argument("--rpm", type=int, default=None, help="requests per minute (default: gateway.key_defaults)")
    create.add_argument("--tpm", type=int, default=None, help="tokens per minute")
    create.add_argument(
        "--models", action="append", default=[], metavar="PATTERN", help="models it may call, e.g. 'openai/*'"
    )
    create.add_argument("--expires", default=None, help="lifetime, e.g. 30d or 12h (default: never)")
    create.add_argument("--permission", action="append", default=[], metavar="GRANT", help="a grant env:group:access")
    create.add_argument("--json", action="store_true", help="the key and its record as JSON")
    listing = keys_sub.add_parser("list", help="every key, its limits and state (never the key itself)")
    listing.add_argument("--json", action="store_true", help="one JSON object per key")
    revoke = keys_sub.add_parser("revoke", help="revoke a key by its id (model calls stop at once)")
    revoke.add_argument("key_id", help="the key's id (the 12 hex digits after amk_)")
    keys.set_defaults(func=cmd_keys)
