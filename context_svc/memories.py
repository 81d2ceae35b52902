"""Long-term memory as context_svc serves it (issue 51): the RPCs' checks, recall into BuildContext and
extraction at append.

`Memories` checks who may use a subject's memory (memory.check_memory_access) before every
Remember, ListMemories and Forget; recalls a session's user's memories (the session's owner: the
user the task acts for) for the system block, ranked by `MemoryRecall` for the newest user turn and
the goal, and cut to a token budget; and, with `context.memory_extract`, remembers the explicit
preference statements of a user's message with the message as source.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentmesh.config import ContextSettings
from agentmesh.embeddings import OfflineEmbedder
from agentmesh.errors import AgentmeshError, InvalidRequestError
from agentmesh.store import Store
from context_svc.lru import LRU
from context_svc.memory import (
    LexicalMemoryRecall,
    MemoryKind,
    MemoryRecall,
    MemoryRecord,
    Scope,
    Source,
    Subject,
    check_memory_access,
    extract_statements,
    render_memories,
)
from context_svc.memory_store import MemoryStore, Remembered
from context_svc.model import Caller, Session
from context_svc.semantic_memory import ErasableRecall, SemanticMemoryRecall

__all__ = ["Memories", "Prefetch", "default_recall"]

log = logging.getLogger("context_svc")


@dataclass(frozen=True)
class Prefetch:
    """A read of an owner's current memories started before the session loaded."""

    owner: str
    task: asyncio.Future[list[MemoryRecord]]


def _retrieved(task: asyncio.Future[list[MemoryRecord]]) -> None:
    # A prefetch the build did not use (the load failed, access was refused, the owner changed) must
    # not log "exception was never retrieved": its outcome is read here and dropped.
    if not task.cancelled():
        task.exception()


def default_recall(settings: ContextSettings) -> MemoryRecall:
    """`context.memory_recall`: "lexical" (BM25 and recency) or "semantic" (the offline multilingual
    embedder's cosine with BM25, and recency: context_svc/semantic_memory.py)."""
    if settings.memory_recall == "semantic":
        # No shared cache: the recall keeps its own vectors per subject, so an erasure drops them all.
        return SemanticMemoryRecall(OfflineEmbedder(), half_life_days=settings.memory_half_life_days)
    return LexicalMemoryRecall(half_life_days=settings.memory_half_life_days)


class Memories:
    """Remember / ListMemories / Forget, recall and extraction (see the module docstring)."""

    def __init__(
        self,
        settings: ContextSettings,
        store: Store,
        *,
        recall: MemoryRecall | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        offset = settings.memory_clock_offset_s
        self.clock = clock or (lambda: time.time() + offset)
        self.records = MemoryStore(
            store, max_chars=settings.memory_max_chars, max_records=settings.memory_max_records, clock=self.clock
        )
        self.recall = recall or default_recall(settings)
        # Session id -> its owner, learned at BuildContext (an owner never changes within a session;
        # a stale entry after a re-creation only wastes a prefetch): the next build of the session
        # reads the owner's memories while the session loads. Forget of a user drops the user's entries.
        self._owners: LRU[str, str] = LRU(settings.session_cache_entries)

    async def remember(
        self,
        caller: Caller,
        subject: Subject,
        text: str,
        kind: MemoryKind,
        *,
        source: Source | None = None,
        ttl_s: float | None = None,
    ) -> Remembered:
        check_memory_access(caller, subject)
        return await self.records.remember(subject, text, kind, source=source or Source(), ttl_s=ttl_s)

    async def list_records(
        self, caller: Caller, subject: Subject, *, include_inactive: bool = False
    ) -> list[MemoryRecord]:
        check_memory_access(caller, subject)
        if include_inactive:
            return await self.records.records(subject)
        return await self.records.active(subject)

    async def forget(self, caller: Caller, memory_id: str) -> int:
        """Deletes one record: NotFoundError when there is none (the caller may not tell whose it is)."""
        subject = await self.records.subject_of(memory_id)
        check_memory_access(caller, subject)
        deleted = await self.records.forget(memory_id)
        if isinstance(self.recall, ErasableRecall):
            self.recall.forget_memory(subject, memory_id)  # its vector too (issue 51)
        return deleted

    async def forget_subject(self, caller: Caller, subject: Subject) -> int:
        check_memory_access(caller, subject)
        if subject.scope is Scope.USER:
            for session_id in self._owners.keys_of(subject.id):
                self._owners.forget(session_id)
        deleted = await self.records.forget_subject(subject)
        if isinstance(self.recall, ErasableRecall):
            self.recall.forget_subject(subject)  # every vector of the subject (issue 51)
        return deleted

    def owned(self, session_id: str, owner: str) -> None:
        """`session_id` belongs to `owner` (its create said so): the session's first build, too, reads
        the owner's memories while the session loads (issue 45), not after it."""
        if owner:
            self._owners.put(session_id, owner)

    def prefetch(self, session_id: str) -> Prefetch | None:
        """Starts reading the memories of the owner this process saw for `session_id` last (None when
        it saw none): BuildContext awaits them after loading the session, one round trip less."""
        owner = self._owners.get(session_id)
        if owner is None or self.settings.memory_recall_items <= 0:
            return None
        try:
            subject = Subject(Scope.USER, owner)
        except InvalidRequestError:
            return None
        task = asyncio.ensure_future(self.records.active(subject))
        task.add_done_callback(_retrieved)
        return Prefetch(owner, task)

    async def recall_text(
        self,
        session: Session,
        query: str,
        budget: int,
        count: Callable[[str], int],
        *,
        prefetched: Prefetch | None = None,
    ) -> str:
        """The system block's memory section for `session` (its owner's memories relevant to `query`),
        at most `budget` tokens by `count`; "" when the session has no owner or nothing is relevant.
        `prefetched`: the owner's records read while the session loaded (used when the owner matches)."""
        limit = self.settings.memory_recall_items
        if not session.owner or limit <= 0 or budget <= 0:
            return ""
        try:
            subject = Subject(Scope.USER, session.owner)
        except InvalidRequestError:
            return ""  # an owner no memory can be stored for (over-long id): nothing to recall
        self._owners.put(session.session_id, session.owner)
        if prefetched is not None and prefetched.owner == session.owner:
            records = await prefetched.task
        else:
            records = await self.records.active(subject)
        if isinstance(self.recall, ErasableRecall):
            await self.recall.prepare(records, query)  # embeddings off the event loop
        ranked = self.recall.rank(records, query, now=self.clock(), limit=limit)
        text = render_memories(ranked)
        while ranked and count(text) > budget:
            ranked.pop()  # the least relevant goes first
            text = render_memories(ranked)
        return text

    async def extract(
        self, session_id: str, index: int, content: str, get: Callable[[str], Awaitable[tuple[Session, Any]]]
    ) -> list[Remembered]:
        """With context.memory_extract: remembers the preference statements of a user's message
        `index` of a session for the session's owner (`get` reads the session, only when there are
        statements). A message offloaded to a payload is not read (only its digest is at hand)."""
        statements = extract_statements(content) if self.settings.memory_extract else []
        if not statements:
            return []
        source = Source(session_id=session_id, message_index=index)
        remembered = []
        try:
            session, _ = await get(session_id)
            if not session.owner:
                return []  # a session of a release before owners were recorded
            subject = Subject(Scope.USER, session.owner)
            for kind, statement in statements:
                if len(statement) <= self.settings.memory_max_chars:
                    remembered.append(await self.records.remember(subject, statement, kind, source=source))
        except AgentmeshError as exc:
            # The message is appended already: a failed extraction must not make the append look
            # failed (a retry without client_message_id would append it twice). Logged, not raised.
            log.warning("memory extraction of %s message %d failed: %s", session_id, index, exc)
        return remembered
