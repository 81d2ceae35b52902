"""Long-term memory in Redis (issue 51): Remember, list, recall and Forget over memory.py's records.

Each subject's records live in one hash, `<prefix>:mem:{<scope>:<hash>}:records` (field: memory id,
value: the record's JSON), where hash is a SHA-256 prefix of the subject id: the hash is the
subject's whole index, one key in one Cluster slot, so Forget of a subject is one DEL and leaves no
record, index entry or cache behind (no record is cached between calls). A memory id names
its subject's key (`mem_<scope>_<hash>_<random>`), so Forget by id needs no global index.

Remember reads the subject's records, supersedes those the new one corrects and writes the changes in
one transaction, which also deletes the subject's expired records. Two Remembers racing on one topic
may both stay current; the next one on that topic supersedes both (same_topic is checked against
every current record). A subject holds at most `max_records` records: the oldest superseded ones go
first, then Remember is refused.

The clock is injected (`clock`): tests and drills move it (`context.memory_clock_offset_s`).

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from redis.typing import EncodableT, FieldT

from agentmesh.errors import FailedPreconditionError, InvalidRequestError, NotFoundError, echo
from agentmesh.store import Store
from context_svc.memory import (
    MemoryKind,
    MemoryRecord,
    Source,
    Subject,
    same_topic,
    validate_text,
)

__all__ = ["MemoryStore", "Remembered", "memory_key"]

MAX_TTL_S = 100 * 365 * 86400
_ID_RE = re.compile(r"mem_(user|agent|tenant)_([0-9a-f]{32})_[0-9a-f]{16}")


def _subject_hash(subject: Subject) -> str:
    return hashlib.sha256(subject.id.encode("utf-8")).hexdigest()[:32]


def memory_key(prefix: str, scope: str, subject_hash: str) -> str:
    """The hash holding one subject's records."""
    return f"{prefix}:mem:{{{scope}:{subject_hash}}}:records"


@dataclass(frozen=True)
class Remembered:
    """What Remember did: the record (the existing one for a restatement) and what it superseded."""

    record: MemoryRecord
    already: bool
    superseded: tuple[str, ...] = ()


class MemoryStore:
    """The subjects' records in Redis (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        max_chars: int = 2000,
        max_records: int = 500,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.max_chars = max_chars
        self.max_records = max_records
        self.clock = clock

    def key(self, subject: Subject) -> str:
        return memory_key(self.store.keys.prefix, subject.scope.value, _subject_hash(subject))

    async def records(self, subject: Subject) -> list[MemoryRecord]:
        """Every record of `subject`, newest first."""
        raw = await self.store.call("read memories", self.store.redis.hgetall(self.key(subject)))
        records = [MemoryRecord.from_json(value) for value in raw.values()]
        records.sort(key=lambda r: (-r.created_at, r.memory_id))
        return records

    async def remember(
        self,
        subject: Subject,
        text: str,
        kind: MemoryKind,
        *,
        source: Source | None = None,
        ttl_s: float | None = None,
    ) -> Remembered:
        """Stores a statement; a correction supersedes the records it corrects, a restatement stores
        nothing (see memory.py)."""
        text = validate_text(text, self.max_chars)
        source = source or Source()
        if ttl_s is not None and not 0 < ttl_s <= MAX_TTL_S:
            raise InvalidRequestError(
                "ttl", f"must be > 0 and at most 100 years (leave it unset to keep the memory), got {ttl_s}s"
            )
        if source.message_index < 0:
            raise InvalidRequestError("source.message_index", f"must be >= 0, got {source.message_index}")
        now = self.clock()
        existing = await self.records(subject)
        current = [r for r in existing if r.kind is kind and r.active(now)]
        corrected = []
        for old in current:
            verdict = same_topic(text, old.text)
            if verdict is None:
                return Remembered(old, already=True)
            if verdict:
                corrected.append(old)
        memory_id = f"mem_{subject.scope.value}_{_subject_hash(subject)}_{secrets.token_hex(8)}"
        record = MemoryRecord(
            memory_id=memory_id,
            subject=subject,
            text=text,
            kind=kind,
            source=source,
            created_at=now,
            expires_at=None if ttl_s is None else now + ttl_s,
        )
        changes: dict[FieldT, EncodableT] = {memory_id: record.to_json()}
        changes.update({old.memory_id: replace(old, superseded_by=memory_id).to_json() for old in corrected})
        # Expired records go at the next Remember of their subject (their lifetime was chosen).
        expired = {r.memory_id for r in existing if r.expires_at is not None and now >= r.expires_at}
        kept = [r for r in existing if r.memory_id not in expired]
        evict = sorted(expired) + self._evictions(kept, now, len(kept) + 1 - self.max_records)
        key = self.key(subject)
        pipe = self.store.redis.pipeline(transaction=True)
        if evict:
            pipe.hdel(key, *evict)
        pipe.hset(key, mapping=changes)
        await self.store.call("remember", pipe.execute())
        return Remembered(record, already=False, superseded=tuple(old.memory_id for old in corrected))

    def _evictions(self, existing: list[MemoryRecord], now: float, excess: int) -> list[str]:
        if excess <= 0:
            return []
        inactive = [r for r in reversed(existing) if not r.active(now)]  # oldest first
        if len(inactive) < excess:
            raise FailedPreconditionError(
                f"the subject holds {len(existing)} current memories (context.memory_max_records "
                f"{self.max_records}): forget some first",
                metadata={"max_records": str(self.max_records)},
            )
        return [r.memory_id for r in inactive[:excess]]

    async def active(self, subject: Subject) -> list[MemoryRecord]:
        """The recallable records of `subject` now, newest first."""
        now = self.clock()
        return [r for r in await self.records(subject) if r.active(now)]

    async def subject_of(self, memory_id: str) -> Subject:
        """The subject a memory id names (checked against the stored record); NotFoundError if none."""
        match = _ID_RE.fullmatch(memory_id)
        if match is None:
            raise InvalidRequestError("memory_id", f"not a memory id: {echo(memory_id)}")
        key = memory_key(self.store.keys.prefix, match.group(1), match.group(2))
        raw = await self.store.call("read memory", self.store.redis.hget(key, memory_id))
        if raw is None:
            raise NotFoundError(f"memory {memory_id} not found", metadata={"memory_id": memory_id})
        return MemoryRecord.from_json(raw).subject

    async def forget(self, memory_id: str) -> int:
        """Deletes one record (the caller checked access via `subject_of`): 1, or 0 if already gone."""
        match = _ID_RE.fullmatch(memory_id)
        if match is None:
            raise InvalidRequestError("memory_id", f"not a memory id: {echo(memory_id)}")
        key = memory_key(self.store.keys.prefix, match.group(1), match.group(2))
        return int(await self.store.call("forget memory", self.store.redis.hdel(key, memory_id)))

    async def forget_subject(self, subject: Subject) -> int:
        """Deletes every record of `subject` and its index: the number of records deleted."""
        key = self.key(subject)
        pipe = self.store.redis.pipeline(transaction=True)
        pipe.hlen(key)
        pipe.delete(key)
        count, _ = await self.store.call("forget subject", pipe.execute())
        return int(count)
