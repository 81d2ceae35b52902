"""Payload grants: a session may read payloads stored in another session, one ref at a time (issue 44).

A hop summary (context_svc/handoff.py) cites payloads of the parent session; the child session is
granted read access to exactly those refs, never to the parent session itself. A grant is a field of
`am:sess:{<child>}:grants` (ref id -> the session the payload is stored in), with the payloads' TTL,
deleted with the child session. `PayloadStore.get` (so GetPayload and tool_svc's read_payload alike)
looks here only when the ref is not the session's own. Only context_svc's BuildHandoff writes grants,
after checking that its caller may read each payload.

Domain code: no grpc, no protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from agentmesh.lua_source import package_lua
from agentmesh.store import Store

__all__ = ["GRANTS_PART", "grant", "granted_fields"]

GRANTS_PART: Final = "grants"
"""The part of the session's keys (am:sess:{<session>}:grants) holding its grants."""

# KEYS: the grants hash. ARGV: ttl s, then ref id / owner session pairs. A grant never shortens the
# hash's life: each one sets now + ttl.
_GRANT_LUA: Final = package_lua("agentmesh", "payload_grant")


async def grant(store: Store, session_id: str, refs: Mapping[str, str], ttl_s: int) -> None:
    """Lets `session_id` read each ref id of `refs`, stored in the session it maps to."""
    own = {ref: owner for ref, owner in refs.items() if owner != session_id}
    if not own:
        return
    args: list[Any] = [ttl_s]
    for ref, owner in sorted(own.items()):
        args += [ref, owner]
    async with store.guard("grant payloads"):
        await store.script("payload_grant", _GRANT_LUA, durable=True)(
            keys=[store.keys.session(session_id, GRANTS_PART)], args=args
        )


async def granted_fields(store: Store, session_id: str, sha: str, ref_id: str) -> tuple[str, Mapping[Any, Any]]:
    """(the session storing it, the payload hash) of a ref granted to `session_id`; (session_id, {})
    when there is no grant or the payload is gone."""
    owner = await store.call("read grant", store.redis.hget(store.keys.session(session_id, GRANTS_PART), ref_id))
    if not owner:
        return session_id, {}
    source = owner.decode("utf-8") if isinstance(owner, bytes) else str(owner)
    fields: Mapping[Any, Any] = await store.call("get payload", store.redis.hgetall(store.keys.payload(source, sha)))
    return (source, fields) if fields.get(b"content") is not None else (session_id, {})
