"""The context domain's facade: `ContextEngine`, what server.py calls (async Python over Redis, no grpc).

It holds the session operations (create, get, delete), appends with offload, payload reads and access
checks, and delegates the budgeted context view to assembly.py and the summarizing of older turns to
compaction.py. Per-message work is done once: token counts when a message is appended (stored with
it), extraction notes and summary renderings in bounded in-process caches keyed by the session's
epoch, the message index or the summary version (all immutable), so BuildContext reads one Lua reply
and does work proportional to the recent window, not to the session's length.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentmesh.chat import tool_error_text
from agentmesh.config import ContextSettings
from agentmesh.errors import (
    AgentmeshError,
    FailedPreconditionError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    UnavailableError,
    echo,
)
from agentmesh.payloads import (
    MEDIA_JSON,
    MEDIA_TEXT,
    PayloadStore,
    StoredPayload,
    digest,
    text_digest,
)
from agentmesh.store import Store
from context_svc.access import check_access, decode_tasks
from context_svc.assembly import Assembler
from context_svc.attach import Attachment, Attachments
from context_svc.budget import MIN_BUDGET_TOKENS, BlockBudgets, group_entries, select_window
from context_svc.compaction import Compactor
from context_svc.facts.entities import extract_entities, pending_corrections, with_previous
from context_svc.facts.known import public_entities
from context_svc.handoff_sources import Handoffs
from context_svc.lru import LRU
from context_svc.memories import Memories
from context_svc.model import (
    Appended,
    Budget,
    Caller,
    ContextView,
    Message,
    Role,
    Session,
    SessionAccess,
    Summary,
    ToolOutcome,
    message_hash,
    tool_outcome_hash,
)
from context_svc.results import offload_header, outcome_of, output_header
from context_svc.sessions import Dedupe, EncodingChangedError, Existing, SessionStore, new_epoch
from context_svc.summarize import SummaryModel, source_texts
from context_svc.tokens import UnknownEncodingError, counter_for

__all__ = ["BudgetRequest", "ContextEngine"]

_SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_MAX_SUB_GOALS = 50
_MAX_CLIENT_MESSAGE_ID = 128


@dataclass(frozen=True)
class BudgetRequest:
    """Budget settings a CreateSession asks for; 0 / "" take the configured values."""

    max_context_tokens: int = 0
    reserve_system_prompt_tokens: int = 0
    summary_trigger_tokens: int = 0
    keep_recent_messages: int = 0
    encoding: str = ""


def _now() -> float:
    return time.time()


class ContextEngine:
    """Sessions, appends, BuildContext, compaction and payload reads (see the module docstring)."""

    def __init__(self, settings: ContextSettings, store: Store, *, summary_model: SummaryModel | None = None) -> None:
        # Unknown encodings fail here, at start-up, never with a download.
        counter_for(settings.encoding)
        for override in settings.agents.values():
            if override.encoding:
                counter_for(override.encoding)
        self.settings = settings
        self.store = store
        self.sessions = SessionStore(
            store, session_ttl_s=settings.session_ttl_s, cache_entries=settings.session_cache_entries
        )
        self.payloads = PayloadStore(store, ttl_s=settings.payload_ttl_s, max_bytes=settings.max_payload_bytes)
        self.attachments = Attachments(store, session_ttl_s=settings.session_ttl_s)
        self.handoffs = Handoffs(self.sessions, self.payloads)  # BuildHandoff (handoff.py)
        self.compaction = Compactor(settings, self.sessions, summary_model=summary_model)
        self.memory = Memories(settings, store)  # Remember/ListMemories/Forget and recall (issue 51)
        self.assembly = Assembler(settings, self.sessions, self.payloads, self.compaction, memory=self.memory)
        self._encodings: LRU[str, str] = LRU(settings.session_cache_entries)

    @property
    def rejected_summaries(self) -> int:
        """LLM summaries rejected by this process (also counted per session in Redis)."""
        return self.compaction.rejected_summaries

    # -- helpers -------------------------------------------------------------------------------

    def _resolve_budget(self, agent_id: str, request: BudgetRequest) -> Budget:
        s = self.settings
        override = s.agents.get(agent_id)

        def pick(name: str) -> Any:
            value = getattr(override, name, None) if override is not None else None
            return getattr(s, name) if value is None else value

        for name in ("max_context_tokens", "reserve_system_prompt_tokens", "summary_trigger_tokens",
                     "keep_recent_messages"):  # fmt: skip
            if getattr(request, name) < 0:
                raise InvalidRequestError(
                    f"budget.{name}", f"must be > 0 (0 takes the configured value), got {getattr(request, name)}"
                )
        encoding: str = request.encoding or pick("encoding")
        try:
            counter_for(encoding)
        except UnknownEncodingError as exc:
            raise InvalidRequestError("budget.encoding", str(exc)) from exc
        budget = Budget(
            max_context_tokens=request.max_context_tokens or pick("max_context_tokens"),
            reserve_system_prompt_tokens=request.reserve_system_prompt_tokens or pick("reserve_system_prompt_tokens"),
            summary_trigger_tokens=request.summary_trigger_tokens or pick("summary_trigger_tokens"),
            keep_recent_messages=request.keep_recent_messages or pick("keep_recent_messages"),
            encoding=encoding,
            system_ratio=pick("system_ratio"),
            recent_ratio=pick("recent_ratio"),
            summary_ratio=pick("summary_ratio"),
            reply_ratio=pick("reply_ratio"),
            summary_model=pick("summary_model") or None,
        )
        if budget.max_context_tokens < MIN_BUDGET_TOKENS:
            raise InvalidRequestError(
                "budget.max_context_tokens", f"must be at least {MIN_BUDGET_TOKENS}, got {budget.max_context_tokens}"
            )
        if budget.reserve_system_prompt_tokens > budget.max_context_tokens:
            raise InvalidRequestError(
                "budget.reserve_system_prompt_tokens",
                f"must not exceed max_context_tokens ({budget.max_context_tokens}), "
                f"got {budget.reserve_system_prompt_tokens}",
            )
        return budget

    # -- sessions ------------------------------------------------------------------------------

    async def create_session(
        self,
        caller: Caller,
        *,
        session_id: str = "",
        agent_id: str = "",
        goal: str,
        sub_goals: Sequence[str] = (),
        system_prompt: str = "",
        budget: BudgetRequest | None = None,
    ) -> tuple[Session, bool]:
        """Creates a session; the same request again returns it (created False); the same id with
        other global state is FAILED_PRECONDITION."""
        if not goal.strip():
            raise InvalidRequestError("goal", "required")
        if session_id and not _SESSION_ID_RE.fullmatch(session_id):
            raise InvalidRequestError("session_id", "must match [A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
        if len(sub_goals) > _MAX_SUB_GOALS:
            raise InvalidRequestError("sub_goals", f"at most {_MAX_SUB_GOALS}, got {len(sub_goals)}")
        if not caller.is_operator:
            # An agent creates sessions for itself only: the agent comes from its verified token.
            if agent_id and agent_id != caller.agent_id:
                raise PermissionDeniedError(
                    f"agent:{agent_id}", f"{caller.agent_id or caller.subject} cannot create sessions for {agent_id}"
                )
            agent_id = caller.agent_id
        session = Session(
            # Owned by whoever started the task that opens it; its tokens (and operators) may use it.
            owner=caller.creator or caller.subject,
            tasks=(caller.task_id,) if caller.task_id else (),
            session_id=session_id or f"sess_{secrets.token_hex(12)}",
            agent_id=agent_id,
            goal=goal,
            sub_goals=tuple(sub_goals),
            system_prompt=system_prompt,
            budget=self._resolve_budget(agent_id, budget or BudgetRequest()),
            create_time=_now(),
            epoch=new_epoch(),
        )
        stored, created = await self.sessions.create(session)
        # The first append need not read it (issue 45); the append script checks it anyway.
        self._encodings.put(stored.session_id, stored.budget.encoding)
        if not created:
            fields = ("agent_id", "goal", "sub_goals", "system_prompt")
            same = all(getattr(stored, f) == getattr(session, f) for f in fields)
            if not same or (budget is not None and stored.budget != session.budget):
                raise FailedPreconditionError(
                    f"session {session.session_id} already exists with other global state",
                    metadata={"session_id": session.session_id},
                )
            check_access(caller, stored.session_id, stored.access)
        return stored, created

    async def get_session(self, caller: Caller, session_id: str) -> tuple[Session, dict[str, str]]:
        session, entities = await self.sessions.get(session_id)
        check_access(caller, session_id, session.access)
        return session, public_entities({label: value for label, (value, _) in entities.items()})

    async def attach_task(
        self,
        caller: Caller,
        session_id: str,
        task_id: str,
        agent_id: str,
        *,
        expected_task_id: str = "",
        expected_generation: int = 0,
    ) -> Attachment:
        """Makes a task the session's newest and attaches it (attach.py): a conversation continues."""
        # No cache to drop: a load re-reads the attached set of a session it holds (sessions.py).
        return await self.attachments.attach(
            caller,
            session_id,
            task_id,
            agent_id,
            expected_task_id=expected_task_id,
            expected_generation=expected_generation,
        )

    async def delete_session(self, caller: Caller, session_id: str) -> bool:
        try:
            access = await self.sessions.exists(session_id)
        except AgentmeshError as exc:
            if exc.code.name == "NOT_FOUND":
                return False
            raise
        check_access(caller, session_id, access)
        shas = await self.payloads.list_shas(session_id)
        self.sessions.forget(session_id)
        return await self.sessions.delete(session_id, shas)

    # -- appends -------------------------------------------------------------------------------

    async def _session_facts(self, session_id: str) -> tuple[SessionAccess, str, str]:
        """(who may use it, goal, encoding) of a session; NotFoundError if it does not exist."""
        meta = self.sessions.key(session_id, "meta")
        agent, goal, budget, tasks = await self.store.call(
            "read session", self.store.redis.hmget(meta, ["agent_id", "goal", "budget", "tasks"])
        )
        if budget is None:
            raise NotFoundError(f"session {echo(session_id)} not found", metadata={"session_id": echo(session_id)})
        encoding = Budget.from_json(budget).encoding
        self._encodings.put(session_id, encoding)
        return SessionAccess(_text(agent), decode_tasks(tasks)), _text(goal), encoding

    async def _encoding(self, session_id: str) -> str:
        cached = self._encodings.get(session_id)
        if cached is not None:
            return cached
        return (await self._session_facts(session_id))[2]

    async def _append(
        self, caller: Caller, session_id: str, message: Message, dedupe: Dedupe | None = None
    ) -> tuple[int, int] | Existing:
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
            try:
                result = await self.sessions.append(
                    session_id,
                    replace(message, token_count=tokens),
                    entities,
                    caller_agent=None if caller.is_operator else caller.agent_id,
                    caller_task=caller.task_id,
                    encoding=encoding,
                    dedupe=dedupe,
                )
            except EncodingChangedError:
                self._encodings.forget(session_id)
                if attempt:
                    raise
                continue
            return result if isinstance(result, Existing) else (result, tokens)
        raise AssertionError("unreachable")  # pragma: no cover

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

    async def append_message(self, caller: Caller, session_id: str, message: Message) -> tuple[int, int]:
        """`append_message_once` without a client_message_id: (index, token count)."""
        appended = await self.append_message_once(caller, session_id, message)
        return appended.index, appended.token_count

    async def append_message_once(
        self, caller: Caller, session_id: str, message: Message, *, client_message_id: str = ""
    ) -> Appended:
        """Appends a message; content above the offload threshold is stored as a payload and the
        log keeps its digest and ref.

        With a client_message_id the append happens once: a repeat with the same id and content
        (`message_hash`) returns the original position (already=True); with other content it is
        FAILED_PRECONDITION. Empty: no dedupe."""
        _validate_client_message_id(client_message_id)
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
                return self._repeat(existing, dedupe, subject, metadata)
            media = MEDIA_JSON if _looks_json(message.content) else MEDIA_TEXT
            ref = await self.payloads.put(session_id, raw, media)
            body = digest(raw, media, goal=goal, max_chars=self.settings.digest_max_chars)
            what = f"{message.role.value} message"
            if message.role is Role.TOOL:
                what = f"tool {message.name or '?'} output"
            message = replace(message, content=offload_header(what, ref) + "\n" + body, ref=ref)
        result = await self._append(caller, session_id, message, dedupe)
        if isinstance(result, Existing):
            assert dedupe is not None
            return self._repeat(result, dedupe, subject, metadata)
        if message.role is Role.USER and self.settings.memory_extract:
            await self.memory.extract(session_id, result[0], message.content, self.sessions.get)
        return Appended(*result)

    def _check_size(self, size: int, field: str) -> None:
        if size > self.settings.max_payload_bytes:
            raise PayloadTooLargeError(
                f"{field}: {size} bytes exceed the maximum of {self.settings.max_payload_bytes} bytes",
                metadata={"size_bytes": str(size), "max_bytes": str(self.settings.max_payload_bytes)},
            )

    async def append_tool_result(
        self, caller: Caller, session_id: str, outcome: ToolOutcome
    ) -> tuple[int, int, StoredPayload | None]:
        """`append_tool_result_once` as (index, token count, the ref when content was offloaded here)."""
        appended = await self.append_tool_result_once(caller, session_id, outcome)
        return appended.index, appended.token_count, appended.ref

    async def append_tool_result_once(self, caller: Caller, session_id: str, outcome: ToolOutcome) -> Appended:
        """Appends a tool result as a ROLE_TOOL message: the inline output (offloaded here when
        large), the ref + digest tool_svc made, the error text, or the pending approval. `ref` is
        set when the content was offloaded here.

        Once per tool_call_id: a repeat with the same content (`tool_outcome_hash`: execution stats
        do not count) returns the original position (already=True); with other content it is
        FAILED_PRECONDITION naming the original position."""
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
                    return self._repeat(existing, dedupe, subject, metadata, offloaded_here=True)
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
        result = await self._append(caller, session_id, message, dedupe)
        if isinstance(result, Existing):
            # Same content: the original was offloaded here exactly when this one would have been.
            offloaded_here = error is None and outcome.pending is None and outcome.ref is None
            return self._repeat(result, dedupe, subject, metadata, offloaded_here=offloaded_here)
        return Appended(*result, ref=offloaded)

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

    # -- payloads ------------------------------------------------------------------------------

    async def get_payload(
        self,
        caller: Caller,
        session_id: str,
        ref_id: str,
        *,
        json_path: str | None = None,
        line_range: tuple[int, int] | None = None,
        byte_range: tuple[int, int] | None = None,
    ) -> tuple[StoredPayload, bytes, bool]:
        check_access(caller, session_id, await self.sessions.exists(session_id))
        return await self.payloads.read(
            session_id, ref_id, json_path=json_path, line_range=line_range, byte_range=byte_range
        )

    # -- BuildContext --------------------------------------------------------------------------

    async def build_context(
        self, caller: Caller, session_id: str, *, budget_tokens: int | None = None, debug: bool = False
    ) -> ContextView:
        """The context that fits `budget_tokens` (None: the session's max_context_tokens)."""
        if budget_tokens is not None and budget_tokens <= 0:
            raise InvalidRequestError(
                "budget_tokens",
                f"must be > 0 (leave it unset for the session's max_context_tokens), got {budget_tokens}",
            )
        memories = self.memory.prefetch(session_id)  # the owner's memories, read while the session loads
        loaded = await self.sessions.load(session_id)
        session = loaded.session
        check_access(caller, session_id, session.access)
        self._encodings.put(session_id, session.budget.encoding)
        total = session.budget.max_context_tokens if budget_tokens is None else budget_tokens
        if total < MIN_BUDGET_TOKENS:
            raise InvalidRequestError("budget_tokens", f"must be at least {MIN_BUDGET_TOKENS} tokens, got {total}")
        return await self.assembly.build(loaded, total, debug=debug, memories=memories)

    # -- compaction ----------------------------------------------------------------------------

    async def compact(self, caller: Caller, session_id: str) -> tuple[int, Summary | None]:
        """Summarises every turn older than the recent window now, whatever its size.
        Returns (messages summarised by this call, the summary now in force)."""
        loaded = await self.sessions.load(session_id)
        session = loaded.session
        check_access(caller, session_id, session.access)
        counter = counter_for(session.budget.encoding)
        plan = BlockBudgets.of(session.budget.max_context_tokens, session.budget)
        _, system_tokens = self.assembly.system_block(session, loaded.entities, plan.system, counter)
        groups = group_entries(loaded.entries, session.summarized_upto + 1)
        available = plan.total - system_tokens - plan.reply - plan.summary
        window = select_window(groups, recent_budget=plan.recent, available=available,
                               keep=session.budget.keep_recent_messages)  # fmt: skip
        first_kept = groups[window.first].start if window.first < len(groups) else session.message_count
        if first_kept - 1 <= session.summarized_upto:
            current, _ = await self.sessions.summary(session_id)
            return 0, current
        result = await self.compaction.compact(session, loaded.summary_version, session.summarized_upto, first_kept - 1)
        if result is None:
            raise UnavailableError(
                f"session {session_id} is being compacted by another replica; retry shortly",
                retry_after=1.0,
                metadata={"session_id": session_id},
            )
        return first_kept - 1 - session.summarized_upto, result[1]


# -- append helpers ----------------------------------------------------------------------------


def _text(value: bytes | str | None) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else (value or "")


def _looks_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def _validate_client_message_id(client_message_id: str, field: str = "client_message_id") -> None:
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
