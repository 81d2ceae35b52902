"""BuildHandoff over Redis: who may build a hop, and the parent session's sources (handoff.py).

The caller must be allowed to use the parent session (access.py, as GetPayload): citations are read
with exactly the rights of a GetPayload on it (its own payloads and those granted to it), messages
from its log. A child session is granted read access to the cited payloads (payload_grants.py). It
may not exist yet (the child task creates it after the hop is built); if it exists, the caller must
be allowed to use it, or it must belong to the parent session's owner (a tree of tasks started by one
user), so a hop never pushes payloads into a stranger's session.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import re

from agentmesh.errors import InvalidRequestError, NotFoundError, PermissionDeniedError, echo
from agentmesh.payload_grants import grant
from agentmesh.payloads import MEDIA_JSON, PayloadStore, StoredPayload
from context_svc.access import check_access
from context_svc.handoff import build_hop
from context_svc.handoff_model import Brief, Hop
from context_svc.model import Caller, IndexEntry, Message, Role, Session
from context_svc.sessions import SessionStore
from context_svc.tokens import counter_for

__all__ = ["Handoffs", "SessionSources"]

_SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_INDEX_CHUNK = 1000
"""Index entries read per round trip while looking for the newest user messages (newest first)."""


class SessionSources:
    """`HandoffSources` of one parent session (and the child session its grants go to)."""

    def __init__(self, sessions: SessionStore, payloads: PayloadStore, session_id: str, child_session_id: str) -> None:
        self.sessions = sessions
        self.payloads = payloads
        self.session_id = session_id
        self.child_session_id = child_session_id

    async def payload(self, ref_id: str) -> tuple[StoredPayload, bytes]:
        return await self.payloads.get(self.session_id, ref_id)

    async def message(self, index: int) -> str:
        found = await self.sessions.messages(self.session_id, index, index)
        if not found:
            raise NotFoundError(f"session {self.session_id} has no message #{index}", metadata={"index": str(index)})
        return found[0].content

    async def user_messages(self, limit: int) -> list[tuple[int, str]]:
        store = self.sessions.store
        idx, log = self.sessions.key(self.session_id, "idx"), self.sessions.key(self.session_id, "log")
        total: int = await store.call("read index", store.redis.llen(idx))
        wanted: list[int] = []
        end = total - 1
        while end >= 0 and len(wanted) < limit:
            start = max(0, end - _INDEX_CHUNK + 1)
            raw = await store.call("read index", store.redis.lrange(idx, start, end))
            for offset in range(len(raw) - 1, -1, -1):
                if IndexEntry.from_json(raw[offset]).role is Role.USER and len(wanted) < limit:
                    wanted.append(start + offset)
            end = start - 1
        if not wanted:
            return []
        async with store.guard("read user messages"):
            pipe = store.redis.pipeline(transaction=False)
            for index in wanted:
                pipe.lindex(log, index)
            items = await pipe.execute()
        return [(i, Message.from_json(item, i).content) for i, item in zip(wanted, items, strict=True) if item]

    async def put_record(self, content: bytes) -> str:
        return (await self.payloads.put(self.session_id, content, MEDIA_JSON)).ref_id

    async def grant(self, refs: dict[str, str]) -> None:
        await grant(self.sessions.store, self.child_session_id, refs, self.payloads.ttl_s)


class Handoffs:
    """BuildHandoff: the access checks, then handoff.build_hop on the parent session's sources."""

    def __init__(self, sessions: SessionStore, payloads: PayloadStore) -> None:
        self.sessions = sessions
        self.payloads = payloads

    async def build(
        self,
        caller: Caller,
        session_id: str,
        brief: Brief,
        *,
        child_session_id: str = "",
        max_tokens: int | None = None,
    ) -> Hop:
        if child_session_id:
            if not _SESSION_ID_RE.fullmatch(child_session_id):
                raise InvalidRequestError("child_session_id", "must match [A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
            if child_session_id == session_id:
                raise InvalidRequestError(
                    "child_session_id", "must differ from session_id: a hop goes to another session"
                )
        parent, _ = await self.sessions.get(session_id)
        check_access(caller, session_id, parent.access)
        if child_session_id:
            await self._check_child(caller, parent, child_session_id)
        return await build_hop(
            SessionSources(self.sessions, self.payloads, session_id, child_session_id),
            brief,
            session_id=session_id,
            counter=counter_for(parent.budget.encoding),
            max_tokens=max_tokens,
            child_session_id=child_session_id,
        )

    async def _check_child(self, caller: Caller, parent: Session, child_session_id: str) -> None:
        try:
            child, _ = await self.sessions.get(child_session_id)
        except NotFoundError:
            return  # created later by the child task; the grant waits for it
        try:
            check_access(caller, child_session_id, child.access)
        except PermissionDeniedError:
            if not (parent.owner and child.owner == parent.owner):
                raise PermissionDeniedError(
                    f"session:{child_session_id}",
                    f"session {echo(child_session_id)} is neither usable by the caller nor owned by the parent "
                    "session's owner: a hop grants payloads only within one owner's sessions",
                ) from None
