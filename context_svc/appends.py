"""Appends: how a message or a tool result enters a session's log (what ContextEngine delegates to).

`Appender` validates the message, offloads content above the offload threshold to the payload store
(the log keeps a digest and the ref), counts its tokens once (stored with it, in the session's
encoding, cached here per session), extracts the known facts a user or assistant message states
(facts/entities.py), and makes an append happen once: a repeat under the same client_message_id or
tool_call_id with the same content returns the original position, with other content it is
FAILED_PRECONDITION. It also answers GetToolResult: the result appended for a tool call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

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
from context_svc.facts.entities import extract_entities, pending_corrections, with_previous
from context_svc.lru import LRU
from context_svc.memories import Memories
from context_svc.model import (
    Appended,
    Budget,
    Caller,
    Message,
    Role,
    Session,
    SessionAccess,
    ToolOutcome,
    message_hash,
    tool_outcome_hash,
)
from context_svc.results import offload_header, outcome_of, output_header
from context_svc.sessions import Dedupe, EncodingChangedError, Existing, Loaded, SessionStore
from context_svc.summarize import source_texts
from context_svc.tokens import counter_for

__all__ = ["Appender", "validate_client_message_id"]

_MAX_CLIENT_MESSAGE_ID = 128


def _now() -> float:
    return time.time()


class Appender:
    """Appends messages and tool results to a session's log (see the module docstring)."""

    def __init__(
        self, settings: ContextSettings, store: Store, sessions: SessionStore, payloads: PayloadStore, memory: Memories
    ) -> None:
        self.settings = settings
        self.store = store
        self.sessions = sessions
        self.payloads = payloads
        self.memory = memory
        # Each session's encoding (immutable per session): an append needs no read for it.
        self.encodings: LRU[str, str] = LRU(settings.session_cache_entries)

    async def _session_facts(self, session_id: str) -> tuple[SessionAccess, str, str]:
        """(who may use it, goal, encoding) of a session; NotFoundError if it does not exist."""
        meta = self.sessions.key(session_id, "meta")
        agent, goal, budget, tasks = await self.store.call(
            "read session", self.store.redis.hmget(meta, ["agent_id", "goal", "budget", "tasks"])
        )
        if budget is None:
            raise NotFoundError(f"session {echo(session_id)} not found", metadata={"session_id": echo(session_id)})
        encoding = Budget.from_json(budget).encoding
        self.encodings.put(session_id, encoding)
        return SessionAccess(_text(agent), decode_tasks(tasks)), _text(goal), encoding

    async def _encoding(self, session_id: str) -> str:
        cached = self.encodings.get(session_id)
        if cached is not None:
            return cached
        return (await self._session_facts(session_id))[2]

    async def _append(
        self, caller: Caller, session_id: str, message: Message, dedupe: Dedupe | None = None, *, load: bool = False
    ) -> tuple[tuple[int, int] | Existing, Loaded | None]:
        """The append script's answer and, with `load`, the session as a load right after the append
        (in the same script: one round trip, issue 45) reads it."""
        entities = await self._entities(session_id, message)
        extra = [c.name for c in message.tool_calls] + [c.arguments_json for c in message.tool_calls]
        if message.name:
            extra.append(message.name)
        message = replace(message, create_time=message.create_time or _now())
        # The encoding is immutable per session and cached; the append script checks it, so a
        # session id deleted and re-created with another encoding gets a recount, not a wrong count.
        for attempt in range(2):
            encoding = await self._encoding(session_id)
            tokens = counter_for(encoding).message(message.role.value, message.content, extra)
            counted = replace(message, token_count=tokens)
            agent, task = None if caller.is_operator else caller.agent_id, caller.task_id
            try:
                loaded: Loaded | None = None
                if load:
                    result, loaded = await self.sessions.append_and_load(
                        session_id, counted, entities, caller_agent=agent, caller_task=task, encoding=encoding,
                        dedupe=dedupe,
                    )  # fmt: skip
                else:
                    result = await self.sessions.append(
                        session_id, counted, entities, caller_agent=agent, caller_task=task, encoding=encoding,
                        dedupe=dedupe,
                    )  # fmt: skip
            except EncodingChangedError:
                self.encodings.forget(session_id)
                if attempt:
                    raise
                continue
            return (result if isinstance(result, Existing) else (result, tokens)), loaded
        raise AssertionError("unreachable")  # pragma: no cover

    def goal_inline(self, goal: Message) -> list[tuple[str, str]] | None:
        """The entities of `goal` when `create_with_goal` can append it (a valid user message, not
        offloaded, stating no correction that needs the entities read first); None when it cannot.
        Returned so the caller hands them on: extracting them costs ~0.2 ms a goal (issue 45)."""
        _validate_message(goal)
        limit = min(self.settings.offload_message_bytes, self.settings.max_payload_bytes)
        if goal.role is not Role.USER or len(goal.content.encode("utf-8")) > limit:
            return None
        entities = extract_entities(source_texts(goal), role=goal.role.value)
        return None if pending_corrections(entities) else entities

    async def create_with_goal(
        self,
        caller: Caller,
        session: Session,
        goal: Message,
        goal_message_id: str,
        entities: list[tuple[str, str]] | None = None,
    ) -> tuple[Session, tuple[Appended, Loaded | None] | None] | None:
        """`session` created and `goal` appended once under `goal_message_id`, with the load right after
        it, in one script (issue 45), as `SessionStore.create` then `append_message(load=True)` would.
        None (nothing written) unless `goal_inline(goal)`; (the stored session, None) when it exists
        already (nothing written: the caller checks it and appends as usual); the load is None when
        the append found its message (the caller loads). `entities`: what `goal_inline(goal)` returned
        (judged here when None)."""
        if entities is None:
            entities = self.goal_inline(goal)
            if entities is None:
                return None
        dedupe = Dedupe(f"m:{goal_message_id}", message_hash(goal))
        message = replace(goal, create_time=goal.create_time or _now())
        tokens = counter_for(session.budget.encoding).message(message.role.value, message.content, [])
        counted = replace(message, token_count=tokens)
        agent = None if caller.is_operator else caller.agent_id
        stored, opened = await self.sessions.create_append_load(
            session, counted, entities, caller_agent=agent, caller_task=caller.task_id, dedupe=dedupe
        )
        if opened is None:
            return stored, None
        self.encodings.put(session.session_id, session.budget.encoding)
        result, loaded = opened
        if isinstance(result, Existing):  # pragma: no cover - a new epoch's dedupe hash holds nothing current
            metadata = {"client_message_id": echo(goal_message_id)}
            return stored, (self._repeat(result, dedupe, f"client_message_id {echo(goal_message_id)}", metadata), None)
        if self.settings.memory_extract:
            await self.memory.extract(session.session_id, result, message.content, self.sessions.get)
        return stored, (Appended(result, tokens), loaded)

    async def _entities(self, session_id: str, message: Message) -> list[tuple[str, str]]:
        """The known facts a user or assistant message states (entities.py); a correction that does
        not name what it corrects reads the key's current value first, to say "corrected from"."""
        if message.role not in (Role.USER, Role.ASSISTANT):
            return []
        entities = extract_entities(source_texts(message), role=message.role.value)
        keys = pending_corrections(entities)
        if keys:
            key = self.sessions.key(session_id, "entities")
            stored = await self.store.call("read entities", self.store.redis.hmget(key, keys))
            entities = with_previous(entities, {k: _text(v) for k, v in zip(keys, stored, strict=True) if v})
        return entities

    @staticmethod
    def _repeat(
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

    async def append_message_once(
        self, caller: Caller, session_id: str, message: Message, *, client_message_id: str = ""
    ) -> Appended:
        """`append_message` without a load."""
        appended, _ = await self.append_message(caller, session_id, message, client_message_id=client_message_id)
        return appended

    async def append_message(
        self, caller: Caller, session_id: str, message: Message, *, client_message_id: str = "", load: bool = False
    ) -> tuple[Appended, Loaded | None]:
        """Appends a message; content above the offload threshold is stored as a payload and the
        log keeps its digest and ref.

        With a client_message_id the append happens once: a repeat with the same id and content
        (`message_hash`) returns the original position (already=True); with other content it is
        FAILED_PRECONDITION. Empty: no dedupe. With `load`, also the session as a load right after
        the append reads it (None when the append was answered before its script: the caller loads)."""
        validate_client_message_id(client_message_id)
        _validate_message(message)
        raw = message.content.encode("utf-8")
        self._check_size(len(raw), "message.content")
        dedupe: Dedupe | None = None
        subject, metadata = "", {"client_message_id": echo(client_message_id)}
        if client_message_id:
            dedupe = Dedupe(f"m:{client_message_id}", message_hash(message))
            subject = f"client_message_id {echo(client_message_id)}"
        limit = (
            self.settings.offload_threshold_bytes if message.role is Role.TOOL else self.settings.offload_message_bytes
        )
        if len(raw) > limit:
            access, goal, _ = await self._session_facts(session_id)
            check_access(caller, session_id, access)
            # A repeat is answered before offloading again. One racing the first past this read puts
            # the same bytes again: content-addressed (same key), that only rewrites them and
            # refreshes their TTL, harmless; the append script then answers it as a repeat.
            if dedupe is not None and (existing := await self.sessions.seen(session_id, dedupe.key)) is not None:
                return self._repeat(existing, dedupe, subject, metadata), None
            media = MEDIA_JSON if _looks_json(message.content) else MEDIA_TEXT
            ref = await self.payloads.put(session_id, raw, media)
            body = digest(raw, media, goal=goal, max_chars=self.settings.digest_max_chars)
            what = f"{message.role.value} message"
            if message.role is Role.TOOL:
                what = f"tool {message.name or '?'} output"
            message = replace(message, content=offload_header(what, ref) + "\n" + body, ref=ref)
        result, loaded = await self._append(caller, session_id, message, dedupe, load=load)
        if isinstance(result, Existing):
            assert dedupe is not None
            return self._repeat(result, dedupe, subject, metadata), loaded
        if message.role is Role.USER and self.settings.memory_extract:
            await self.memory.extract(session_id, result[0], message.content, self.sessions.get)
        return Appended(*result), loaded

    def _check_size(self, size: int, field: str) -> None:
        if size > self.settings.max_payload_bytes:
            raise PayloadTooLargeError(
                f"{field}: {size} bytes exceed the maximum of {self.settings.max_payload_bytes} bytes",
                metadata={"size_bytes": str(size), "max_bytes": str(self.settings.max_payload_bytes)},
            )

    async def append_tool_result_once(self, caller: Caller, session_id: str, outcome: ToolOutcome) -> Appended:
        """`append_tool_result` without a load."""
        appended, _ = await self.append_tool_result(caller, session_id, outcome)
        return appended

    async def append_tool_result(
        self, caller: Caller, session_id: str, outcome: ToolOutcome, *, load: bool = False
    ) -> tuple[Appended, Loaded | None]:
        """Appends a tool result as a ROLE_TOOL message: the inline output (offloaded here when
        large), the ref + digest tool_svc made, the error text, or the pending approval. `ref` is
        set when the content was offloaded here.

        Once per tool_call_id: a repeat with the same content (`tool_outcome_hash`: execution stats
        do not count) returns the original position (already=True); with other content it is
        FAILED_PRECONDITION naming the original position. `load` as in `append_message`."""
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
                access, goal, _ = await self._session_facts(session_id)
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
            self._check_size(len(raw), "result.output.inline")
            if len(raw) > self.settings.offload_threshold_bytes:
                access, goal, _ = await self._session_facts(session_id)
                check_access(caller, session_id, access)
                # As in append_message_once: a repeat is answered before offloading again, and one
                # racing past this read puts the same bytes under the same key again (harmless).
                if (existing := await self.sessions.seen(session_id, dedupe.key)) is not None:
                    return self._repeat(existing, dedupe, subject, metadata, offloaded_here=True), None
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
        result, loaded = await self._append(caller, session_id, message, dedupe, load=load)
        if isinstance(result, Existing):
            # Same content: the original was offloaded here exactly when this one would have been.
            offloaded_here = error is None and outcome.pending is None and outcome.ref is None
            return self._repeat(result, dedupe, subject, metadata, offloaded_here=offloaded_here), loaded
        return Appended(*result, ref=offloaded), loaded

    async def append_with_results(
        self,
        caller: Caller,
        session_id: str,
        message: Message,
        results: Sequence[ToolOutcome],
        *,
        client_message_id: str = "",
        load: bool = False,
    ) -> tuple[Appended, list[Appended], Loaded | None]:
        """An assistant message, then results of its tool calls in order, each appended once as
        `append_message` and `append_tool_result` append them: a step's reply and its first result in
        one call (issue 45). With `load`, the session as a load right after the last reads it. Every
        result is checked against the message before anything is appended; one that fails after the
        message landed leaves it there, and the caller's repeat finds it (same id, same content)."""
        calls = {call.id for call in message.tool_calls}
        for i, outcome in enumerate(results):
            if outcome.tool_call_id not in calls:
                raise InvalidRequestError(
                    f"following_results[{i}].tool_call_id",
                    f"{echo(outcome.tool_call_id)!r} answers no tool call of the message",
                )
        if len({outcome.tool_call_id for outcome in results}) != len(results):
            raise InvalidRequestError("following_results", "two results answer the same tool call")
        appended, _ = await self.append_message(caller, session_id, message, client_message_id=client_message_id)
        following: list[Appended] = []
        loaded: Loaded | None = None
        for i, outcome in enumerate(results):
            result, loaded = await self.append_tool_result(
                caller, session_id, outcome, load=load and i == len(results) - 1
            )
            following.append(result)
        return appended, following, loaded

    async def tool_result(self, caller: Caller, session_id: str, tool_call_id: str) -> tuple[ToolOutcome, Existing]:
        """GetToolResult: the result appended for `tool_call_id` as it was appended (the truth a
        resumed run continues with, issue 39), and where it is; NOT_FOUND when there is none."""
        if not tool_call_id:
            raise InvalidRequestError("tool_call_id", "required: the call whose appended result is read")
        check_access(caller, session_id, (await self._session_facts(session_id))[0])
        existing = await self.sessions.seen(session_id, f"c:{tool_call_id}")
        if existing is None:
            raise NotFoundError(f"no result appended for tool call {echo(tool_call_id)}",
                                metadata={"tool_call_id": echo(tool_call_id)})  # fmt: skip
        return outcome_of(existing.message), existing


# -- helpers ----------------------------------------------------------------------------


def _text(value: bytes | str | None) -> str:
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


def _validate_message(message: Message) -> None:
    if message.role is Role.TOOL and not message.tool_call_id:
        raise InvalidRequestError("message.tool_call_id", "required for a tool message (the call it answers)")
    if message.tool_calls and message.role is not Role.ASSISTANT:
        raise InvalidRequestError("message.tool_calls", "only assistant messages carry tool calls")
    if not message.content.strip() and not message.tool_calls:
        raise InvalidRequestError("message.content", "empty: a message needs content or tool calls")
    for i, call in enumerate(message.tool_calls):
        if not call.id or not call.name:
            raise InvalidRequestError(f"message.tool_calls[{i}]", "id and name are required")
