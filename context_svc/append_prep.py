"""How a message or a tool result is made ready for its append (appends.py appends it): validated,
offloaded to the payload store when large (the log keeps a digest and the ref), with the dedupe key that
makes its append happen once and the answer a repeat gets. Also each session's facts an append needs
(who may use it, its goal, its encoding: cached per session, immutable).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from agentmesh.chat import tool_error_text
from agentmesh.config import ContextSettings
from agentmesh.errors import (
    FailedPreconditionError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    echo,
)
from agentmesh.payloads import MEDIA_JSON, MEDIA_TEXT, PayloadStore, StoredPayload, digest, text_digest
from agentmesh.store import Store
from context_svc.access import check_access, decode_tasks
from context_svc.lru import LRU
from context_svc.model import (
    Appended,
    Budget,
    Caller,
    Message,
    Role,
    SessionAccess,
    ToolOutcome,
    message_hash,
    tool_outcome_hash,
)
from context_svc.results import offload_header, output_header
from context_svc.sessions import Dedupe, Existing, SessionStore

__all__ = ["AppendPreparer", "Prepared", "as_text", "validate_client_message_id", "validate_message"]

_MAX_CLIENT_MESSAGE_ID = 128


@dataclass(frozen=True)
class Prepared:
    """A message ready to append (offloaded already when large) and how to answer its append."""

    message: Message
    dedupe: Dedupe | None
    subject: str
    """What a conflicting repeat names (FAILED_PRECONDITION)."""
    metadata: dict[str, str]
    offloaded: StoredPayload | None = None
    """The payload this service stored the content in (a tool result's), for `Appended.ref`."""
    offloaded_here: bool = False
    """A repeat's original was offloaded here (its ref goes in the answer)."""


class AppendPreparer:
    """Makes messages and tool results ready for their append (see the module docstring)."""

    def __init__(self, settings: ContextSettings, store: Store, sessions: SessionStore, payloads: PayloadStore) -> None:
        self.settings = settings
        self.store = store
        self.sessions = sessions
        self.payloads = payloads
        # Each session's encoding (immutable per session): an append needs no read for it.
        self.encodings: LRU[str, str] = LRU(settings.session_cache_entries)

    async def facts(self, session_id: str) -> tuple[SessionAccess, str, str]:
        """(who may use it, goal, encoding) of a session; NotFoundError if it does not exist."""
        meta = self.sessions.key(session_id, "meta")
        agent, goal, budget, tasks = await self.store.call(
            "read session", self.store.redis.hmget(meta, ["agent_id", "goal", "budget", "tasks"])
        )
        if budget is None:
            raise NotFoundError(f"session {echo(session_id)} not found", metadata={"session_id": echo(session_id)})
        encoding = Budget.from_json(budget).encoding
        self.encodings.put(session_id, encoding)
        return SessionAccess(as_text(agent), decode_tasks(tasks)), as_text(goal), encoding

    async def encoding(self, session_id: str) -> str:
        cached = self.encodings.get(session_id)
        if cached is not None:
            return cached
        return (await self.facts(session_id))[2]

    def check_size(self, size: int, field: str) -> None:
        if size > self.settings.max_payload_bytes:
            raise PayloadTooLargeError(
                f"{field}: {size} bytes exceed the maximum of {self.settings.max_payload_bytes} bytes",
                metadata={"size_bytes": str(size), "max_bytes": str(self.settings.max_payload_bytes)},
            )

    async def message(
        self, caller: Caller, session_id: str, message: Message, client_message_id: str
    ) -> Prepared | Appended:
        """`message` as append_message appends it (offloaded when large), or the answer to a repeat
        found before offloading."""
        validate_client_message_id(client_message_id)
        validate_message(message)
        raw = message.content.encode("utf-8")
        self.check_size(len(raw), "message.content")
        dedupe: Dedupe | None = None
        subject, metadata = "", {"client_message_id": echo(client_message_id)}
        if client_message_id:
            dedupe = Dedupe(f"m:{client_message_id}", message_hash(message))
            subject = f"client_message_id {echo(client_message_id)}"
        limit = (
            self.settings.offload_threshold_bytes if message.role is Role.TOOL else self.settings.offload_message_bytes
        )
        if len(raw) > limit:
            access, goal, _ = await self.facts(session_id)
            check_access(caller, session_id, access)
            # A repeat is answered before offloading again. One racing the first past this read puts
            # the same bytes again: content-addressed (same key), that only rewrites them and
            # refreshes their TTL, harmless; the append script then answers it as a repeat.
            if dedupe is not None and (existing := await self.sessions.seen(session_id, dedupe.key)) is not None:
                return self.repeat(existing, dedupe, subject, metadata)
            media = MEDIA_JSON if _looks_json(message.content) else MEDIA_TEXT
            ref = await self.payloads.put(session_id, raw, media)
            body = digest(raw, media, goal=goal, max_chars=self.settings.digest_max_chars)
            what = f"{message.role.value} message"
            if message.role is Role.TOOL:
                what = f"tool {message.name or '?'} output"
            message = replace(message, content=offload_header(what, ref) + "\n" + body, ref=ref)
        return Prepared(message, dedupe, subject, metadata)

    async def result(self, caller: Caller, session_id: str, outcome: ToolOutcome) -> Prepared | Appended:
        """`outcome` as the ROLE_TOOL message append_tool_result appends, or the answer to a repeat
        found before offloading."""
        if not outcome.tool_call_id:
            raise InvalidRequestError("result.tool_call_id", "required: a tool result must name the call it answers")
        if not outcome.tool_name:
            raise InvalidRequestError("result.tool_name", "required")
        dedupe = Dedupe(f"c:{outcome.tool_call_id}", tool_outcome_hash(outcome))
        subject = f"tool call {echo(outcome.tool_call_id)}"
        metadata = {"tool_call_id": echo(outcome.tool_call_id)}
        name = outcome.tool_name
        offloaded: StoredPayload | None = None
        ref: StoredPayload | None = None
        flags = " (secrets redacted)" if outcome.redacted else ""
        error = outcome.error
        if error is not None:
            content = f"[tool {name} failed: {error.code.name}]\n{tool_error_text(error, name, outcome.correction)}"
        elif outcome.pending is not None:
            pending = outcome.pending
            expires = (
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(pending.expire_at)) if pending.expire_at else "unknown"
            )
            content = (
                f"[tool {name} awaiting approval {pending.approval_id}: the call has not run; expires {expires}]"
                + (f"\nimpact: {pending.impact}" if pending.impact else "")
            )
        elif outcome.ref is not None:
            ref = outcome.ref
            if ref.session_id != session_id:
                raise InvalidRequestError(
                    "result.output.ref.session_id",
                    f"the ref belongs to session {ref.session_id}, not {session_id}",
                    metadata={"ref_id": ref.ref_id},
                )
            body = outcome.digest
            if not body.strip():
                # tool_svc sent no digest: make one from the stored payload.
                access, goal, _ = await self.facts(session_id)
                check_access(caller, session_id, access)
                meta, data = await self.payloads.get(session_id, ref.ref_id)
                ref = meta
                body = digest(data, meta.media_type, goal=goal, max_chars=self.settings.digest_max_chars)
            elif len(body) > 2 * self.settings.digest_max_chars:
                body = text_digest(body, max_chars=self.settings.digest_max_chars)
            content = offload_header(f"tool {name} ok{flags}; output", ref) + "\n" + body
        else:
            inline = outcome.inline or ""
            raw = inline.encode("utf-8")
            self.check_size(len(raw), "result.output.inline")
            if len(raw) > self.settings.offload_threshold_bytes:
                access, goal, _ = await self.facts(session_id)
                check_access(caller, session_id, access)
                # As in append_message_once: a repeat is answered before offloading again, and one
                # racing past this read puts the same bytes under the same key again (harmless).
                if (existing := await self.sessions.seen(session_id, dedupe.key)) is not None:
                    return self.repeat(existing, dedupe, subject, metadata, offloaded_here=True)
                structured = outcome.structured if outcome.structured is not None else _looks_json(inline)
                media = MEDIA_JSON if structured else MEDIA_TEXT
                ref = offloaded = await self.payloads.put(session_id, raw, media)
                body = digest(raw, media, goal=goal, max_chars=self.settings.digest_max_chars)
                content = offload_header(f"tool {name} ok{flags}; output", ref) + "\n" + body
            else:
                content = output_header(name, redacted=outcome.redacted) + inline
        message = Message(
            role=Role.TOOL,
            content=content,
            tool_call_id=outcome.tool_call_id,
            name=name,
            ref=ref,
            error_code=error.code.name if error is not None else "",
            fallback_tool=error.fallback_tool if error is not None else "",
            error=error,
            correction=outcome.correction if error is not None else None,
            pending=outcome.pending,
            structured=outcome.structured if error is None and outcome.pending is None else None,
            redacted=outcome.redacted,
        )
        # A repeat with the same content: the original was offloaded here exactly when this one was.
        offloaded_here = error is None and outcome.pending is None and outcome.ref is None
        return Prepared(message, dedupe, subject, metadata, offloaded, offloaded_here)

    def finish(self, prepared: Prepared, result: tuple[int, int] | Existing) -> Appended:
        """What the append of `prepared` answers: where it landed, or the repeat's answer."""
        if isinstance(result, Existing):
            assert prepared.dedupe is not None
            return self.repeat(
                result, prepared.dedupe, prepared.subject, prepared.metadata, offloaded_here=prepared.offloaded_here
            )
        return Appended(*result, ref=prepared.offloaded)

    @staticmethod
    def repeat(
        existing: Existing, dedupe: Dedupe, what: str, metadata: dict[str, str], *, offloaded_here: bool = False
    ) -> Appended:
        """The answer to a repeated append: the original position, token count and (when this
        service offloaded the content) ref, or FAILED_PRECONDITION when the earlier append under the
        same id carried other content."""
        if existing.content_hash != dedupe.content_hash:
            raise FailedPreconditionError(
                f"{what} was already appended at position {existing.index} with other content",
                metadata={**metadata, "index": str(existing.index)},
            )
        ref = existing.message.ref if offloaded_here else None
        return Appended(existing.index, existing.message.token_count, ref=ref, already=True)


# -- helpers ----------------------------------------------------------------------------


def as_text(value: bytes | str | None) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else (value or "")


def _looks_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def validate_client_message_id(client_message_id: str, field: str = "client_message_id") -> None:
    if len(client_message_id) > _MAX_CLIENT_MESSAGE_ID or not all(
        c.isprintable() and not c.isspace() for c in client_message_id
    ):
        raise InvalidRequestError(
            field,
            f"must be at most {_MAX_CLIENT_MESSAGE_ID} printable characters without whitespace, "
            f"got {echo(client_message_id)!r}",
        )


def validate_message(message: Message) -> None:
    if message.role is Role.TOOL and not message.tool_call_id:
        raise InvalidRequestError("message.tool_call_id", "required for a tool message (the call it answers)")
    if message.tool_calls and message.role is not Role.ASSISTANT:
        raise InvalidRequestError("message.tool_calls", "only assistant messages carry tool calls")
    if not message.content.strip() and not message.tool_calls:
        raise InvalidRequestError("message.content", "empty: a message needs content or tool calls")
    for i, call in enumerate(message.tool_calls):
        if not call.id or not call.name:
            raise InvalidRequestError(f"message.tool_calls[{i}]", "id and name are required")
