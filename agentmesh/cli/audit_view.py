"""`agentmesh audit`: the audit stream (docs/design.md §9), one line per entry, or JSON lines.

Reads Redis directly (`AuditLog.read` on the configured `redis.url`, AGENTMESH_REDIS_URL): the
stream is the deployment's record of task starts, cancels and resumes, approvals, settlements, tool
registrations and calls refused for their role, with who did it, to what, how it ended and when.

`--since` takes an ISO date or time (UTC unless it says otherwise: `2026-12-01`,
`2026-12-01T09:30`, `2026-12-01T09:30:00+01:00`) or a duration back from now (`90s`, `15m`, `2h`,
`7d`); without it, the last 24 hours. Entries are printed oldest first, at most `--limit`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from agentmesh.audit import AuditEntry, AuditLog
from agentmesh.config import Settings
from agentmesh.errors import AgentmeshError
from agentmesh.store import Store

__all__ = ["DEFAULT_WINDOW_S", "audit_command", "entry_json", "format_entries", "parse_since"]

DEFAULT_WINDOW_S = 86400
"""Without --since: the last 24 hours."""

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
HEADER = ("time (UTC)", "subject", "action", "target", "outcome", "detail")


def parse_since(text: str, *, now: float | None = None) -> int:
    """Milliseconds since the epoch for `--since`: an ISO date/time (UTC when naive) or `15m`, `2h`, `7d`.

    ValueError with a readable reason otherwise."""
    current = time.time() if now is None else now
    match = _DURATION.match(text)
    if match:
        seconds = int(match.group(1)) * _UNIT_S[match.group(2).lower()]
        return max(0, int((current - seconds) * 1000))
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"--since {text!r} is neither an ISO date/time (2026-12-01, 2026-12-01T09:30Z) "
            "nor a duration (90s, 15m, 2h, 7d)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return max(0, int(when.timestamp() * 1000))


def _iso(time_ms: int) -> str:
    moment = dt.datetime.fromtimestamp(time_ms / 1000, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{time_ms % 1000:03d}Z"


def entry_json(entry: AuditEntry) -> dict[str, object]:
    """One entry as a JSON object (`--json` prints one per line)."""
    return {
        "time": _iso(entry.time_ms),
        "time_ms": entry.time_ms,
        "subject": entry.subject,
        "action": entry.action,
        "target": entry.target,
        "outcome": entry.outcome,
        "detail": entry.detail,
        "id": entry.entry_id,
    }


def _one_line(text: str) -> str:
    # Fields come from callers (subjects, method names): one entry is one line whatever they hold.
    return " ".join(text.split())


def format_entries(entries: Sequence[AuditEntry]) -> list[str]:
    """Aligned lines, a header first: time, subject, action, target, outcome, detail."""
    rows = [
        (_iso(e.time_ms), _one_line(e.subject), _one_line(e.action), _one_line(e.target), _one_line(e.outcome),
         _one_line(e.detail))
        for e in entries
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER) - 1)]

    def line(row: Sequence[str]) -> str:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        return "  ".join([*cells, row[-1]]).rstrip()

    return [line(HEADER), *(line(row) for row in rows)]


async def _read(settings: Settings, *, since_ms: int, subject: str, action: str, limit: int) -> list[AuditEntry]:
    # Reading needs no eviction check: the reader writes nothing.
    async with await Store.connect(settings.redis, settings.environment, check=False) as store:
        return await AuditLog(store, settings.audit).read(
            since_ms=since_ms, subject=subject, action=action, limit=limit
        )


def audit_command(
    settings: Settings,
    *,
    since: str | None = None,
    subject: str = "",
    action: str = "",
    limit: int = 1000,
    as_json: bool = False,
    now: float | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Prints the entries; 0 on success, 1 when Redis cannot be read, 2 on bad arguments."""
    out = out or sys.stdout
    err = err or sys.stderr
    current = time.time() if now is None else now
    if limit <= 0:
        err.write("agentmesh audit: --limit must be > 0\n")
        return 2
    try:
        since_ms = parse_since(since, now=current) if since else int((current - DEFAULT_WINDOW_S) * 1000)
    except ValueError as exc:
        err.write(f"agentmesh audit: {exc}\n")
        return 2
    try:
        entries = asyncio.run(_read(settings, since_ms=since_ms, subject=subject, action=action, limit=limit))
    except AgentmeshError as exc:  # UnavailableError, StoreMisconfiguredError (no URL, credentials)
        err.write(f"agentmesh audit: {exc.message}\n")
        return 1
    if as_json:
        for entry in entries:
            out.write(json.dumps(entry_json(entry), ensure_ascii=False) + "\n")
    elif not entries:
        wanted = "".join([f" of subject {subject}" if subject else "", f" with action {action}*" if action else ""])
        out.write(f"no audit entries{wanted} since {_iso(since_ms)}\n")
    else:
        out.write("\n".join(format_entries(entries)) + "\n")
    if len(entries) >= limit:
        err.write(f"agentmesh audit: showing the first {limit} entries; use a later --since or a larger --limit\n")
    return 0
