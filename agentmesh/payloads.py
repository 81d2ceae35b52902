"""Session-scoped payloads: large content stored once in Redis (docs/design.md §4).

Used by tool_svc (offload at the source) and context_svc (anything large that still arrives, and `GetPayload`).
The value (StoredPayload, ref ids, media types) is `agentmesh.payload_value`; selecting part of the content is
`agentmesh.payload_select`; digests that fit in a prompt are `agentmesh.payload_digest` (both pure, re-exported
here for the callers that hold a store anyway).

- content-addressed within a session: `am:payload:{<session>}:<sha256>` with a TTL, so the same bytes are stored
  once per session and one session can never read another's (the session is part of the key, never a field a
  caller could point elsewhere) unless a hop granted it that one ref (payload_grants.py);
- `put` is one MULTI/EXEC (all or nothing) and refuses content over `max_bytes` before writing;
- `read` selects by JSONPath (RFC 9535), 1-based inclusive line range or 0-based half-open byte range.

Besides the payload keys, `put` keeps a set of the session's payload digests at `am:sess:{<session>}:payloads`
(same hash slot) so DeleteSession can remove them without SCAN.

Domain code: no grpc, no protobuf.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agentmesh.errors import InvalidRequestError, NotFoundError, PayloadTooLargeError
from agentmesh.lua_source import package_lua
from agentmesh.payload_digest import digest, structured_digest, text_digest
from agentmesh.payload_grants import granted_fields
from agentmesh.payload_select import check_selectors, select
from agentmesh.payload_value import (
    MEDIA_JSON,
    MEDIA_TEXT,
    OFFLOAD_THRESHOLD_BYTES,
    StoredPayload,
    is_json_media_type,
    parse_ref_id,
    ref_id_for,
)
from agentmesh.store import Store

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TTL_S",
    "MEDIA_JSON",
    "MEDIA_TEXT",
    "OFFLOAD_THRESHOLD_BYTES",
    "PayloadStore",
    "StoredPayload",
    "check_selectors",
    "digest",
    "is_json_media_type",
    "parse_ref_id",
    "ref_id_for",
    "select",
    "structured_digest",
    "text_digest",
]

DEFAULT_TTL_S: Final = 86400
DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024

_MAX_MEDIA_TYPE_LEN = 255
PAYLOAD_INDEX_PART: Final = "payloads"  # the part of the session's keys (am:sess:{<session>}:payloads) listing them

# KEYS: the payload hash, the session's index (one hash tag). ARGV: content, media type, size, expire_at,
# ttl s, sha256. Each put sets now + ttl on the index: never earlier than a previous payload's expiry.
_PUT_LUA: Final = package_lua("agentmesh", "payload_put")


def _check_media_type(media_type: str) -> str:
    if not media_type or len(media_type) > _MAX_MEDIA_TYPE_LEN or not media_type.isprintable():
        raise InvalidRequestError("media_type", f"must be a printable MIME type of 1-{_MAX_MEDIA_TYPE_LEN} characters")
    return media_type


class PayloadStore:
    """Session-scoped, content-addressed payloads in Redis (see the module docstring)."""

    def __init__(self, store: Store, *, ttl_s: int = DEFAULT_TTL_S, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        self.store = store
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes

    async def put(self, session_id: str, content: bytes, media_type: str) -> StoredPayload:
        """Stores `content` for `session_id`; the same content again refreshes its TTL.

        PayloadTooLargeError above `max_bytes` (nothing is written). InvalidRequestError for a bad
        session id or media type. UnavailableError when Redis is down.
        """
        size = len(content)
        if size > self.max_bytes:
            raise PayloadTooLargeError(
                f"payload of {size} bytes exceeds the maximum of {self.max_bytes} bytes",
                metadata={"size_bytes": str(size), "max_bytes": str(self.max_bytes)},
            )
        _check_media_type(media_type)
        sha = hashlib.sha256(content).hexdigest()
        key = self.store.keys.payload(session_id, sha)
        index = self.store.keys.session(session_id, PAYLOAD_INDEX_PART)
        expire_at = time.time() + self.ttl_s
        # One script: content and metadata appear together or not at all (and on replicas first: durable).
        async with self.store.guard("put payload"):
            await self.store.script("payload_put", _PUT_LUA, durable=True)(
                keys=[key, index], args=[content, media_type, size, repr(expire_at), self.ttl_s, sha]
            )
        return StoredPayload(
            ref_id=ref_id_for(sha),
            session_id=session_id,
            size_bytes=size,
            media_type=media_type,
            sha256=sha,
            expire_at=expire_at,
        )

    async def get(self, session_id: str, ref_id: str) -> tuple[StoredPayload, bytes]:
        """The payload and its whole content. NotFoundError (metadata ref_id) when it is unknown,
        expired or another session's; InvalidRequestError for a malformed ref id."""
        sha = parse_ref_id(ref_id)
        key = self.store.keys.payload(session_id, sha)
        # The client is created with decode_responses=False: keys and values are bytes.
        fields: Mapping[Any, Any] = await self.store.call("get payload", self.store.redis.hgetall(key))
        content = fields.get(b"content")
        if content is None:  # not its own: a ref a hop granted it (payload_grants.py), stored in another session
            session_id, fields = await granted_fields(self.store, session_id, sha, ref_id)
            content = fields.get(b"content")
        if content is None:
            # One message for all three cases: telling them apart would confirm another session's refs.
            raise NotFoundError(
                f"payload {ref_id} not found in session {session_id} (unknown, expired or another session's)",
                metadata={"ref_id": ref_id, "session_id": session_id},
            )
        meta = StoredPayload(
            ref_id=ref_id,
            session_id=session_id,
            size_bytes=int(fields.get(b"size", b"0") or 0) or len(content),
            media_type=fields.get(b"media_type", b"application/octet-stream").decode("utf-8", "replace"),
            sha256=sha,
            expire_at=float(fields.get(b"expire_at", b"0") or 0),
        )
        return meta, content

    async def read(
        self,
        session_id: str,
        ref_id: str,
        *,
        json_path: str | None = None,
        line_range: tuple[int, int] | None = None,
        byte_range: tuple[int, int] | None = None,
    ) -> tuple[StoredPayload, bytes, bool]:
        """(meta, selected content, partial). At most one selector; none reads the whole payload.

        json_path: RFC 9535 JSONPath; the content is the JSON array of the matched values.
        line_range: 1-based inclusive (start, end); end beyond the last line is clipped.
        byte_range: 0-based half-open (start, end); end beyond the size is clipped.
        InvalidRequestError (naming the selector) for a bad selector or content it cannot apply to.
        """
        check_selectors(json_path, line_range, byte_range)  # before the Redis round trip
        meta, content = await self.get(session_id, ref_id)
        return meta, *select(content, ref_id, json_path=json_path, line_range=line_range, byte_range=byte_range)

    async def list_shas(self, session_id: str) -> list[str]:
        """sha256 digests of the session's payloads (some may have expired)."""
        index = self.store.keys.session(session_id, PAYLOAD_INDEX_PART)
        members: Iterable[Any] = await self.store.call("list payloads", self.store.redis.smembers(index))
        return sorted(m.decode("ascii", "replace") if isinstance(m, bytes) else str(m) for m in members)
