"""The audit trail (docs/design.md §9): who did what to which task, tool or approval, and how it
ended, in one Redis stream (`am:audit`), bounded by length and age.

Every service appends to it through `AuditLog.record`: task starts, cancels and resumes, approvals and
settlements, tool registrations, and every call the edge refused for its role. `agentmesh audit`
reads it (`AuditLog.read`). Entries are facts, never secrets: subjects, action names, ids and
outcome codes, each clipped.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from agentmesh.config import AuditSettings
from agentmesh.store import Store

__all__ = ["AuditEntry", "AuditLog"]

_FIELD_CHARS = 300


@dataclass(frozen=True)
class AuditEntry:
    """One audited act."""

    time_ms: int
    subject: str
    """Who acted (the verified token's subject)."""
    action: str
    """What was done, e.g. "task.start", "approval.resolve", "auth.refused"."""
    target: str
    """What it was done to: a task id, an approval id, a tool name, an RPC method."""
    outcome: str
    """"ok", or the refusal's code (PERMISSION_DENIED, ...)."""
    detail: str = ""
    entry_id: str = ""


_TRIM_EVERY_S = 60.0
"""Entries older than `audit.max_age_days` go at most this much later."""


def _clip(text: str) -> str:
    return text if len(text) <= _FIELD_CHARS else text[: _FIELD_CHARS - 1] + "…"


class AuditLog:
    """Appends to and reads the audit stream."""

    def __init__(self, store: Store, settings: AuditSettings | None = None) -> None:
        settings = settings or AuditSettings()
        self.store = store
        self.max_len = settings.max_len
        self.max_age_s = settings.max_age_days * 86400
        self._trimmed_at = 0.0

    @property
    def key(self) -> str:
        # One stream for the whole deployment: read in time order by an operator; its slot is a
        # known hotspot only at audit rates (docs/design.md §10).
        return f"{self.store.keys.prefix}:audit"

    async def record(self, *, subject: str, action: str, target: str, outcome: str = "ok", detail: str = "") -> None:
        """Appends one entry, trimming by length and age; UnavailableError when Redis is away."""
        fields = {
            "subject": _clip(subject or "-"),
            "action": _clip(action),
            "target": _clip(target),
            "outcome": _clip(outcome),
        }
        if detail:
            fields["detail"] = _clip(detail)
        now = time.time()
        # By age at most once per _TRIM_EVERY_S per process (issue 45: an XTRIM per entry was one more
        # command per task); by length with every entry (XADD MAXLEN).
        trim = now - self._trimmed_at >= _TRIM_EVERY_S
        oldest = max(0, int(now * 1000) - self.max_age_s * 1000)
        async with (
            self.store.guard("append to the audit log"),
            self.store.redis.pipeline(transaction=False) as pipe,
        ):
            pipe.xadd(self.key, fields, maxlen=self.max_len, approximate=True)  # type: ignore[arg-type]
            if trim:
                pipe.xtrim(self.key, minid=f"{oldest}-0", approximate=True)
            await pipe.execute()
        if trim:
            self._trimmed_at = now

    async def read(
        self, *, since_ms: int = 0, subject: str = "", action: str = "", limit: int = 1000
    ) -> list[AuditEntry]:
        """Entries from `since_ms` on, oldest first, optionally of one subject and action prefix."""
        found: list[AuditEntry] = []
        start = f"{max(0, since_ms)}-0"
        async with self.store.guard("read the audit log"):
            while len(found) < limit:
                batch = await self.store.redis.xrange(self.key, min=start, max="+", count=500)
                if not batch:
                    break
                for raw_id, raw in batch:
                    entry = _entry(raw_id, raw)
                    if subject and entry.subject != subject:
                        continue
                    if action and not entry.action.startswith(action):
                        continue
                    found.append(entry)
                    if len(found) >= limit:
                        break
                last = batch[-1][0]
                start = "(" + (last.decode() if isinstance(last, bytes) else str(last))
        return found


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _entry(raw_id: bytes | str | None, raw: dict[bytes | str, bytes | str] | None) -> AuditEntry:
    fields = {_text(k): _text(v) for k, v in (raw or {}).items()}
    entry_id = _text(raw_id)
    return AuditEntry(
        time_ms=int(entry_id.split("-", 1)[0]),
        subject=fields.get("subject", ""),
        action=fields.get("action", ""),
        target=fields.get("target", ""),
        outcome=fields.get("outcome", ""),
        detail=fields.get("detail", ""),
        entry_id=entry_id,
    )
