"""The context domain: sessions, appends with offload, budgeted context assembly, compaction.

`ContextEngine` is what server.py calls; it is plain async Python over Redis (no grpc). Per-message
work is done once: token counts when a message is appended (stored with it), extraction notes and
summary renderings in bounded in-process caches keyed by the session's epoch, the message index or
the summary version (all immutable), so BuildContext reads one Lua reply and does work proportional
to the recent window, not to the session's length.
"""

from __future__ import annotations

import logging
import math
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

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
from context_svc.budget import MIN_BUDGET_TOKENS, BlockBudgets, group_entries, select_window
from context_svc.entities import MAX_ENTITIES_SHOWN, extract_entities
from context_svc.model import (
    Block,
    BlockKind,
    Budget,
    Caller,
    ContextView,
    Message,
    Role,
    Session,
    Summary,
    ToolOutcome,
)
from context_svc.sessions import EncodingChangedError, Loaded, SessionStore, new_epoch
from context_svc.summarize import (
    ExtractiveSummarizer,
    LLMSummarizer,
    MessageNotes,
    SummaryModel,
    SummaryRejectedError,
    known_facts,
    message_notes,
    source_texts,
)
from context_svc.tokens import TokenCounter, UnknownEncodingError, counter_for

__all__ = ["BudgetRequest", "ContextEngine"]

log = logging.getLogger("context_svc")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_MAX_SUB_GOALS = 50
_INTENT_VIEW_CHARS = 400
_OPEN_VIEW_CHARS = 200
_MIN_SUMMARY_TOKENS = 48
_OPEN_VIEW_ITEMS = 5


class _LRU(Generic[K, V]):
    """A small bounded mapping; the least recently used entry goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def forget(self, key: K) -> None:
        self._data.pop(key, None)

    def put(self, key: K, value: V) -> V:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.size:
            self._data.popitem(last=False)
        return value


@dataclass(frozen=True)
class BudgetRequest:
    """Budget settings a CreateSession asks for; 0 / "" take the configured values."""

    max_context_tokens: int = 0
    reserve_system_prompt_tokens: int = 0
    summary_trigger_tokens: int = 0
    keep_recent_messages: int = 0
    encoding: str = ""


@dataclass(frozen=True)
class _SummaryView:
    text: str
    tokens: int
    covered: int
    """Messages the summary covers (0 .. covered-1)."""
    omitted: int
    """Lines of the summary left out of this view (the footer names the payload holding them)."""
    needs_compaction: bool = False
    """Lines of turns not compacted yet were cut: they are in no payload, so compact first."""


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
        self.sessions = SessionStore(store, session_ttl_s=settings.session_ttl_s)
        self.payloads = PayloadStore(store, ttl_s=settings.payload_ttl_s, max_bytes=settings.max_payload_bytes)
        self.extractive = ExtractiveSummarizer()
        self.summary_model = summary_model
        self.rejected_summaries = 0
        """LLM summaries rejected by this process (also counted per session in Redis)."""
        self._encodings: _LRU[str, str] = _LRU(10_000)
        self._notes_cache: _LRU[tuple[str, str, int], MessageNotes] = _LRU(50_000)
        self._seen: _LRU[tuple[str, str, int], set[str]] = _LRU(256)
        self._summary_views: _LRU[tuple[object, ...], tuple[_SummaryView, float]] = _LRU(1024)
        self._persisted_refs: _LRU[tuple[str, str, int], StoredPayload] = _LRU(1024)
        self._persisted: _LRU[tuple[str, str, int], Summary] = _LRU(256)
        self._tokens: _LRU[tuple[str, str], int] = _LRU(8192)

    # -- helpers -------------------------------------------------------------------------------

    def _count(self, counter: TokenCounter, text: str) -> int:
        key = (counter.name, text)
        cached = self._tokens.get(key)
        if cached is None:
            cached = self._tokens.put(key, counter.count(text))
        return cached

    def _message_tokens(self, counter: TokenCounter, role: Role, text: str) -> int:
        return counter.message(role.value, "") + self._count(counter, text)

    @staticmethod
    def _check_access(caller: Caller, session_id: str, agent_id: str) -> None:
        if caller.is_operator or caller.agent_id == agent_id:
            return
        raise PermissionDeniedError(
            f"session:{session_id}",
            f"session {session_id} belongs to agent {agent_id or '(none)'}, not {caller.agent_id or caller.subject}",
        )

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
        if not created:
            same = (stored.agent_id, stored.goal, stored.sub_goals, stored.system_prompt) == (
                session.agent_id,
                session.goal,
                session.sub_goals,
                session.system_prompt,
            )
            if not same or (budget is not None and stored.budget != session.budget):
                raise FailedPreconditionError(
                    f"session {session.session_id} already exists with other global state",
                    metadata={"session_id": session.session_id},
                )
            self._check_access(caller, stored.session_id, stored.agent_id)
        return stored, created

    async def get_session(self, caller: Caller, session_id: str) -> tuple[Session, dict[str, str]]:
        session, entities = await self.sessions.get(session_id)
        self._check_access(caller, session_id, session.agent_id)
        return session, {label: value for label, (value, _) in entities.items()}

    async def delete_session(self, caller: Caller, session_id: str) -> bool:
        try:
            agent = await self.sessions.exists(session_id)
        except AgentmeshError as exc:
            if exc.code.name == "NOT_FOUND":
                return False
            raise
        self._check_access(caller, session_id, agent)
        shas = await self.payloads.list_shas(session_id)
        self.sessions.forget(session_id)
        return await self.sessions.delete(session_id, shas)

    # -- appends -------------------------------------------------------------------------------

    async def _session_facts(self, session_id: str) -> tuple[str, str, str]:
        """(agent id, goal, encoding) of a session; NotFoundError if it does not exist."""
        meta = self.sessions.key(session_id, "meta")
        agent, goal, budget = await self.store.call(
            "read session", self.store.redis.hmget(meta, ["agent_id", "goal", "budget"])
        )
        if budget is None:
            raise NotFoundError(f"session {session_id} not found", metadata={"session_id": session_id})
        encoding = Budget.from_json(budget).encoding
        self._encodings.put(session_id, encoding)
        return _text(agent), _text(goal), encoding

    async def _encoding(self, session_id: str) -> str:
        cached = self._encodings.get(session_id)
        if cached is not None:
            return cached
        return (await self._session_facts(session_id))[2]

    async def _append(self, caller: Caller, session_id: str, message: Message) -> tuple[int, int]:
        entities = extract_entities(source_texts(message)) if message.role in (Role.USER, Role.ASSISTANT) else []
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
                index = await self.sessions.append(
                    session_id,
                    replace(message, token_count=tokens),
                    entities,
                    caller_agent=None if caller.is_operator else caller.agent_id,
                    encoding=encoding,
                )
            except EncodingChangedError:
                self._encodings.forget(session_id)
                if attempt:
                    raise
                continue
            return index, tokens
        raise AssertionError("unreachable")  # pragma: no cover

    async def append_message(self, caller: Caller, session_id: str, message: Message) -> tuple[int, int]:
        """Appends a message; content above the offload threshold is stored as a payload and the
        log keeps its digest and ref. Returns (index, token count)."""
        _validate_message(message)
        raw = message.content.encode("utf-8")
        self._check_size(len(raw), "message.content")
        limit = (
            self.settings.offload_threshold_bytes if message.role is Role.TOOL else self.settings.offload_message_bytes
        )
        if len(raw) > limit:
            agent, goal, _ = await self._session_facts(session_id)
            self._check_access(caller, session_id, agent)
            media = MEDIA_JSON if _looks_json(message.content) else MEDIA_TEXT
            ref = await self.payloads.put(session_id, raw, media)
            body = digest(raw, media, goal=goal, max_chars=self.settings.digest_max_chars)
            what = f"{message.role.value} message"
            if message.role is Role.TOOL:
                what = f"tool {message.name or '?'} output"
            message = replace(message, content=_offload_header(what, ref) + "\n" + body, ref=ref)
        return await self._append(caller, session_id, message)

    def _check_size(self, size: int, field: str) -> None:
        if size > self.settings.max_payload_bytes:
            raise PayloadTooLargeError(
                f"{field}: {size} bytes exceed the maximum of {self.settings.max_payload_bytes} bytes",
                metadata={"size_bytes": str(size), "max_bytes": str(self.settings.max_payload_bytes)},
            )

    async def append_tool_result(
        self, caller: Caller, session_id: str, outcome: ToolOutcome
    ) -> tuple[int, int, StoredPayload | None]:
        """Appends a tool result as a ROLE_TOOL message: the inline output (offloaded here when
        large), the ref + digest tool_svc made, the error text, or the pending approval.
        Returns (index, token count, the ref when content was offloaded here)."""
        if not outcome.tool_call_id:
            raise InvalidRequestError("result.tool_call_id", "required: a tool result must name the call it answers")
        if not outcome.tool_name:
            raise InvalidRequestError("result.tool_name", "required")
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
                agent, goal, _ = await self._session_facts(session_id)
                self._check_access(caller, session_id, agent)
                meta, data = await self.payloads.get(session_id, ref.ref_id)
                ref = meta
                body = digest(data, meta.media_type, goal=goal, max_chars=self.settings.digest_max_chars)
            elif len(body) > 2 * self.settings.digest_max_chars:
                body = text_digest(body, max_chars=self.settings.digest_max_chars)
            content = _offload_header(f"tool {name} ok{flags}; output", ref) + "\n" + body
        else:
            inline = outcome.inline or ""
            raw = inline.encode("utf-8")
            self._check_size(len(raw), "result.output.inline")
            if len(raw) > self.settings.offload_threshold_bytes:
                agent, goal, _ = await self._session_facts(session_id)
                self._check_access(caller, session_id, agent)
                structured = outcome.structured if outcome.structured is not None else _looks_json(inline)
                media = MEDIA_JSON if structured else MEDIA_TEXT
                ref = offloaded = await self.payloads.put(session_id, raw, media)
                body = digest(raw, media, goal=goal, max_chars=self.settings.digest_max_chars)
                content = _offload_header(f"tool {name} ok{flags}; output", ref) + "\n" + body
            else:
                content = f"[tool {name} ok{flags}]\n{inline}"
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
        )
        index, tokens = await self._append(caller, session_id, message)
        return index, tokens, offloaded

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
        agent = await self.sessions.exists(session_id)
        self._check_access(caller, session_id, agent)
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
        loaded = await self.sessions.load(session_id)
        session = loaded.session
        self._check_access(caller, session_id, session.agent_id)
        self._encodings.put(session_id, session.budget.encoding)
        total = session.budget.max_context_tokens if budget_tokens is None else budget_tokens
        if total < MIN_BUDGET_TOKENS:
            raise InvalidRequestError("budget_tokens", f"must be at least {MIN_BUDGET_TOKENS} tokens, got {total}")
        counter = counter_for(session.budget.encoding)
        plan = BlockBudgets.of(total, session.budget)
        system_text, system_tokens = self._system_block(session, loaded.entities, plan.system, counter)

        base = session.summarized_upto + 1
        groups = group_entries(loaded.entries, base)
        recent_budget = plan.recent
        available = total - system_tokens - plan.reply
        window = select_window(groups, recent_budget=recent_budget, available=available,
                               keep=session.budget.keep_recent_messages)  # fmt: skip
        if session.summarized_upto >= 0 or window.first > 0:
            # Older turns exist: the summary block gets its share before the recent window.
            available -= plan.summary
            window = select_window(groups, recent_budget=recent_budget, available=available,
                                   keep=session.budget.keep_recent_messages)  # fmt: skip
        first_kept = groups[window.first].start if window.first < len(groups) else session.message_count
        hole_tokens = sum(g.tokens for g in groups[: window.first])

        compacted = False
        version = loaded.summary_version
        upto = session.summarized_upto
        if hole_tokens > session.budget.summary_trigger_tokens:
            result = await self._compact(session, version, upto, first_kept - 1)
            if result is not None:
                version, _ = result
                upto = first_kept - 1
                compacted = True

        summary_view: _SummaryView | None = None
        if first_kept > 0:
            summary_view = await self._summary_view(
                session, version, upto, first_kept - 1, plan.summary, counter, loaded.tail
            )
            if summary_view is not None and summary_view.needs_compaction and not compacted:
                result = await self._compact(session, version, upto, first_kept - 1)
                if result is not None:
                    version, upto, compacted = result[0], first_kept - 1, True
                    summary_view = await self._summary_view(
                        session, version, upto, first_kept - 1, plan.summary, counter, loaded.tail
                    )

        kept = await self._window_messages(loaded, first_kept)
        if window.clipped:
            kept = self._clip_group(kept, counter, recent_budget, available)
        return self._assemble(
            session, plan, counter, system_text, system_tokens, summary_view, kept, first_kept, compacted, debug
        )

    def _system_block(
        self, session: Session, entities: dict[str, tuple[str, int]], budget: int, counter: TokenCounter
    ) -> tuple[str, int]:
        """The system message: prompt, goal, sub-goals, known facts; facts and then the prompt are
        cut to fit `budget`."""
        goal = [f"Goal: {session.goal}"]
        if session.sub_goals:
            goal += ["Sub-goals:", *(f"- {g}" for g in session.sub_goals)]
        facts = sorted(entities.items(), key=lambda item: -item[1][1])[:MAX_ENTITIES_SHOWN]
        prompt = session.system_prompt

        def render(prompt_text: str, shown: int) -> str:
            parts = [prompt_text] if prompt_text else []
            parts.append("\n".join(goal))
            if shown:
                parts.append("Known facts (latest values): " + "; ".join(f"{k}={v}" for k, (v, _) in facts[:shown]))
            return "\n\n".join(parts)

        shown = len(facts)
        text = render(prompt, shown)
        tokens = self._message_tokens(counter, Role.SYSTEM, text)
        while tokens > budget and shown:
            shown = shown // 2 if shown > 4 else shown - 1
            text = render(prompt, shown)
            tokens = self._message_tokens(counter, Role.SYSTEM, text)
        if tokens > budget:
            # The system prompt itself is too long for its share: keep its start, say it was cut.
            goal_tokens = self._message_tokens(counter, Role.SYSTEM, render("", 0))
            note = "\n[system prompt cut to fit the context budget]"
            room = max(0, budget - goal_tokens - counter.count(note) - 4)
            text = render(counter.clip(prompt, room) + note, 0)
            tokens = self._message_tokens(counter, Role.SYSTEM, text)
            if tokens > budget:
                text = counter.clip(text, max(0, budget - counter.message(Role.SYSTEM.value, "")))
                tokens = self._message_tokens(counter, Role.SYSTEM, text)
        return text, tokens

    async def _window_messages(self, loaded: Loaded, first_kept: int) -> list[Message]:
        """Messages first_kept.. of the log (the load read the last ones; older ones are read now)."""
        n = loaded.session.message_count
        held = [loaded.tail.get(index) for index in range(first_kept, n)]
        missing = [first_kept + i for i, m in enumerate(held) if m is None]
        if missing:
            for message in await self.sessions.messages(loaded.session.session_id, missing[0], missing[-1]):
                held[message.index - first_kept] = message
        return [m for m in held if m is not None]

    def _clip_group(self, kept: list[Message], counter: TokenCounter, recent: int, available: int) -> list[Message]:
        """The newest group alone is over budget: clip each message's content proportionally."""
        conversation = sum(m.token_count for m in kept if m.role is not Role.TOOL)
        total = sum(m.token_count for m in kept)
        scale = min(available / total if total else 1.0, recent / conversation if conversation else 1.0, 1.0)
        clipped = []
        for m in kept:
            note = f"\n[clipped to fit the context budget; message {m.index} has {m.token_count} tokens]"
            room = max(0, math.floor(m.token_count * scale) - (m.token_count - counter.count(m.content)) - 24)
            content = counter.clip(m.content, room) + note
            extra = [c.name for c in m.tool_calls] + [c.arguments_json for c in m.tool_calls]
            tokens = counter.message(m.role.value, content, extra + ([m.name] if m.name else []))
            clipped.append(replace(m, content=content, token_count=tokens))
        return clipped

    def _notes(self, session: Session, message: Message) -> MessageNotes:
        key = (session.session_id, session.epoch, message.index)
        notes = self._notes_cache.get(key)
        if notes is None:
            notes = self._notes_cache.put(key, message_notes(message))
        return notes

    def _known(self, session: Session, version: int, summary: Summary) -> set[str]:
        key = (session.session_id, session.epoch, version)
        seen = self._seen.get(key)
        if seen is None:
            seen = self._seen.put(key, known_facts(summary))
        return seen

    async def _summary_view(
        self,
        session: Session,
        version: int,
        upto: int,
        last: int,
        budget: int,
        counter: TokenCounter,
        held: dict[int, Message],
    ) -> _SummaryView | None:
        """The summary block: the persisted summary (up to `upto`) extended with the turns
        upto+1..last not compacted yet, cut to `budget`; what is cut is one read_payload away."""
        key = (session.session_id, session.epoch, version, upto, last, budget)
        cached = self._summary_views.get(key)
        # Re-rendered when half the payload TTL has passed: that refreshes the payload it points to.
        if cached is not None and _now() - cached[1] < self.settings.payload_ttl_s / 2:
            return cached[0]
        # The persisted summary is read once per version, and the turns after it usually are among
        # the messages the load just returned: then this needs no Redis read at all.
        persisted = self._persisted.get((session.session_id, session.epoch, version)) if upto >= 0 else None
        stored_version = version
        hole_or_none = [held.get(index) for index in range(upto + 1, last + 1)]
        if (upto >= 0 and persisted is None) or any(m is None for m in hole_or_none):
            persisted, stored_version, hole = await self.sessions.summary_and_messages(
                session.session_id, upto + 1, last
            )
            if persisted is not None:
                self._persisted.put((session.session_id, session.epoch, stored_version), persisted)
        else:
            hole = [m for m in hole_or_none if m is not None]
        covered_upto = persisted.last_index if persisted is not None else -1
        hole = [m for m in hole if m.index > covered_upto]
        summary = persisted
        if hole:
            seen = self._known(session, stored_version, persisted) if persisted is not None else None
            summary = self.extractive.summarize(persisted, [self._notes(session, m) for m in hole], seen=seen)
        if summary is None:
            return None
        view = await self._render_summary(session, summary, persisted, stored_version, budget, counter)
        if view is not None and not view.needs_compaction:
            self._summary_views.put(key, (view, _now()))
        return view

    async def _persisted_ref(self, session: Session, version: int, persisted: Summary) -> StoredPayload:
        """The persisted summary's full text as a payload: written once per version (and again when
        half its TTL has passed), so a view that cuts it can point to it."""
        key = (session.session_id, session.epoch, version)
        cached = self._persisted_refs.get(key)
        if cached is not None and cached.expire_at - _now() > self.settings.payload_ttl_s / 2:
            return cached
        ref = await self.payloads.put(session.session_id, persisted.render().encode("utf-8"), MEDIA_TEXT)
        return self._persisted_refs.put(key, ref)

    async def _render_summary(
        self,
        session: Session,
        summary: Summary,
        persisted: Summary | None,
        version: int,
        budget: int,
        counter: TokenCounter,
    ) -> _SummaryView | None:
        overhead = counter.message(Role.SYSTEM.value, "")
        if budget < _MIN_SUMMARY_TOKENS:
            return None
        head = [
            f"Summary of earlier messages {summary.first_index}-{summary.last_index} ({summary.summarizer})",
            f"User intent: {_clip(summary.user_intent, _INTENT_VIEW_CHARS) or '-'}",
        ]
        open_questions = summary.open_questions
        if open_questions:
            # The newest few: a long list of old unanswered questions must not crowd out the facts.
            head.append("Open questions (newest last):")
            head += [f"- {_clip(q, _OPEN_VIEW_CHARS)}" for q in open_questions[-_OPEN_VIEW_ITEMS:]]
        open_omitted = max(0, len(open_questions) - _OPEN_VIEW_ITEMS)
        key_data, actions_taken = summary.key_data, summary.actions_taken

        def assemble(keys: int, actions: int, footer: str) -> str:
            parts = list(head)
            if keys:
                parts.append("Key data (oldest first):")
                parts += [f"- {line}" for line in key_data[len(key_data) - keys :]]
            if actions:
                parts.append("Actions taken:")
                parts += [f"- {line}" for line in actions_taken[len(actions_taken) - actions :]]
            if footer:
                parts.append(footer)
            return "\n".join(parts)

        def cost(line: str) -> int:
            return self._count(counter, line) + 3  # "- ", the newline

        def fill(room: float, lines: tuple[str, ...], taken: int, spent: int) -> tuple[int, int]:
            # Newest first; costs are computed only for the lines looked at (a long session's summary
            # has thousands of lines and only the newest fit).
            while taken < len(lines):
                line_cost = cost(lines[len(lines) - 1 - taken])
                if spent + line_cost > room:
                    break
                spent += line_cost
                taken += 1
            return taken, spent

        fixed = overhead + self._count(counter, assemble(0, 0, "")) + 16  # section titles
        keys, spent = fill(budget - fixed, key_data, 0, 0)
        actions, spent = fill(budget - fixed, actions_taken, 0, spent)
        if not open_omitted and keys == len(key_data) and actions == len(actions_taken):
            text = assemble(keys, actions, "")
            tokens = overhead + self._count(counter, text)
            if tokens <= budget:
                return _SummaryView(text, tokens, summary.last_index + 1, 0)

        # Too long: the newest key data and actions, and a footer naming the full summary's ref.
        ref = await self._persisted_ref(session, version, persisted) if persisted is not None else None

        def footer(keys: int, actions: int) -> str:
            where = "they are compacted next"
            if persisted is not None and ref is not None:
                span = f"{persisted.first_index}-{persisted.last_index}"
                where = f'the summary of messages {span} is read_payload(ref_id="{ref.ref_id}")'

            return (
                f"[not shown here: {len(key_data) - keys} older key-data lines, {len(actions_taken) - actions} older "
                f"actions, {open_omitted} older open questions; {where}]"
            )

        room = budget - overhead - self._count(counter, assemble(0, 0, footer(0, 0))) - 16
        # Key data gets up to 3/4 of the room (the facts), actions the rest, then key data again.
        keys, spent = fill(room * 0.75, key_data, 0, 0)
        actions, spent = fill(room, actions_taken, 0, spent)
        keys, spent = fill(room, key_data, keys, spent)
        text = assemble(keys, actions, footer(keys, actions))
        tokens = overhead + self._count(counter, text)
        # Joined text can count a little differently from its lines: trim until it truly fits.
        while tokens > budget and (keys or actions):
            if actions >= keys and actions:
                actions -= 1
            else:
                keys -= 1
            text = assemble(keys, actions, footer(keys, actions))
            tokens = overhead + self._count(counter, text)
        if tokens > budget:
            text = counter.clip(text, budget - overhead)
            tokens = overhead + self._count(counter, text)
        # Lines of turns not compacted yet are in no payload: if any is cut, compact now.
        persisted_keys = len(persisted.key_data) if persisted is not None else 0
        persisted_actions = len(persisted.actions_taken) if persisted is not None else 0
        needs_compaction = len(key_data) - keys > persisted_keys or len(actions_taken) - actions > persisted_actions
        omitted = len(key_data) - keys + len(actions_taken) - actions + open_omitted
        return _SummaryView(text, tokens, summary.last_index + 1, omitted, needs_compaction)

    def _assemble(
        self,
        session: Session,
        plan: BlockBudgets,
        counter: TokenCounter,
        system_text: str,
        system_tokens: int,
        summary_view: _SummaryView | None,
        kept: list[Message],
        first_kept: int,
        compacted: bool,
        debug: bool,
    ) -> ContextView:
        now = _now()
        messages = [Message(Role.SYSTEM, system_text, token_count=system_tokens, create_time=now)]
        summary_tokens = 0
        if summary_view is not None:
            summary_tokens = summary_view.tokens
            messages.append(Message(Role.SYSTEM, summary_view.text, token_count=summary_tokens, create_time=now))
        messages += kept
        recent = [m for m in kept if m.role is not Role.TOOL]
        observations = [m for m in kept if m.role is Role.TOOL]
        recent_tokens = sum(m.token_count for m in recent)
        observation_tokens = sum(m.token_count for m in observations)
        observation_budget = plan.total - system_tokens - summary_tokens - recent_tokens - plan.reply
        blocks = [
            Block(BlockKind.SYSTEM, system_tokens, plan.system, 1, system_text if debug else ""),
            Block(
                BlockKind.SUMMARY,
                summary_tokens,
                plan.summary,
                1 if summary_view else 0,
                summary_view.text if debug and summary_view else "",
            ),
            Block(
                BlockKind.RECENT,
                recent_tokens,
                plan.recent,
                len(recent),
                "\n\n".join(_render(m) for m in recent) if debug else "",
            ),
            Block(
                BlockKind.OBSERVATIONS,
                observation_tokens,
                observation_budget,
                len(observations),
                "\n\n".join(_render(m) for m in observations) if debug else "",
            ),
        ]
        summarized = first_kept if summary_view is not None else 0
        view = ContextView(
            messages=tuple(messages),
            blocks=tuple(blocks),
            total_tokens=sum(m.token_count for m in messages),
            budget_tokens=plan.total,
            summarized_messages=summarized,
            dropped_messages=first_kept - summarized,
            compacted=compacted,
        )
        if debug:
            view = replace(view, debug_text=_debug_text(view, plan, summary_view))
        return view

    # -- compaction ----------------------------------------------------------------------------

    async def _compact(self, session: Session, version: int, upto: int, last: int) -> tuple[int, Summary] | None:
        """Summarises messages upto+1..last into the persisted rolling summary. (version, summary),
        or None when another replica holds the lease or compacted first (the caller then renders
        the older turns from the summary it has, which covers the same messages)."""
        if last <= upto:
            return None
        token = await self.sessions.lease(session.session_id, self.settings.summary_timeout_s + 10)
        if token is None:
            return None
        try:
            previous = self._persisted.get((session.session_id, session.epoch, version)) if upto >= 0 else None
            if upto < 0 or previous is not None:
                # The commit below checks nothing moved since `upto`, so a cached summary is safe.
                messages = await self.sessions.messages(session.session_id, upto + 1, last)
            else:
                previous, version, messages = await self.sessions.summary_and_messages(
                    session.session_id, upto + 1, last
                )
            if (previous.last_index if previous is not None else -1) != upto or not messages:
                return None
            summary = await self._summarize(session, previous, version, messages)
            counter = counter_for(session.budget.encoding)
            summary = replace(summary, token_count=counter.count(summary.render()))
            new_version = await self.sessions.commit_summary(session.session_id, upto, summary)
            if new_version == 0:
                return None
            self._persisted.put((session.session_id, session.epoch, new_version), summary)
            if previous is not None and summary.summarizer == "extractive":
                # A rolling extractive summary only appends key data: extend the known facts.
                old = self._seen.get((session.session_id, session.epoch, version))
                if old is not None:
                    added = summary.key_data[len(previous.key_data) :]
                    self._seen.put(
                        (session.session_id, session.epoch, new_version),
                        old | known_facts(replace(summary, key_data=added)),
                    )
            log.info(
                "compacted session %s: messages %d-%d by %s, %d summary tokens",
                session.session_id, summary.first_index, summary.last_index, summary.summarizer, summary.token_count,
            )  # fmt: skip
            return new_version, summary
        finally:
            await self.sessions.release(session.session_id, token)

    async def _summarize(
        self, session: Session, previous: Summary | None, version: int, messages: list[Message]
    ) -> Summary:
        model = session.budget.summary_model
        if model and self.summary_model is not None:
            llm = LLMSummarizer(self.summary_model, model, timeout_s=self.settings.summary_timeout_s)
            try:
                return await llm.summarize(previous, messages, agent_id=session.agent_id)
            except SummaryRejectedError as exc:
                self.rejected_summaries += 1
                await self.sessions.count_rejection(session.session_id)
                log.warning(
                    "LLM summary of session %s rejected (%s); using the extractive one; missing: %s",
                    session.session_id, exc.reason, ", ".join(exc.missing[:20]),
                    extra={"session_id": session.session_id, "missing_facts": exc.missing[:50]},
                )  # fmt: skip
            except (AgentmeshError, TimeoutError, OSError) as exc:
                log.warning(
                    "LLM summarizer unavailable for session %s (%s); using the extractive one", session.session_id, exc
                )
        notes = [self._notes(session, m) for m in messages]
        seen = self._known(session, version, previous) if previous is not None else None
        return self.extractive.summarize(previous, notes, seen=seen)

    async def compact(self, caller: Caller, session_id: str) -> tuple[int, Summary | None]:
        """Summarises every turn older than the recent window now, whatever its size.
        Returns (messages summarised by this call, the summary now in force)."""
        loaded = await self.sessions.load(session_id)
        session = loaded.session
        self._check_access(caller, session_id, session.agent_id)
        counter = counter_for(session.budget.encoding)
        plan = BlockBudgets.of(session.budget.max_context_tokens, session.budget)
        _, system_tokens = self._system_block(session, loaded.entities, plan.system, counter)
        groups = group_entries(loaded.entries, session.summarized_upto + 1)
        available = plan.total - system_tokens - plan.reply - plan.summary
        window = select_window(groups, recent_budget=plan.recent, available=available,
                               keep=session.budget.keep_recent_messages)  # fmt: skip
        first_kept = groups[window.first].start if window.first < len(groups) else session.message_count
        if first_kept - 1 <= session.summarized_upto:
            current, _ = await self.sessions.summary(session_id)
            return 0, current
        result = await self._compact(session, loaded.summary_version, session.summarized_upto, first_kept - 1)
        if result is None:
            raise UnavailableError(
                f"session {session_id} is being compacted by another replica; retry shortly",
                retry_after=1.0,
                metadata={"session_id": session_id},
            )
        return first_kept - 1 - session.summarized_upto, result[1]


# -- rendering helpers -------------------------------------------------------------------------


def _text(value: bytes | str | None) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else (value or "")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _looks_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def _offload_header(what: str, ref: StoredPayload) -> str:
    return (
        f"[{what} stored as {ref.ref_id} ({ref.size_bytes} bytes, {ref.media_type}); this is a digest, "
        f"read more with read_payload(ref_id, json_path | line_range)]"
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


def _render(m: Message) -> str:
    label = m.role.value
    if m.role is Role.TOOL:
        label = f"tool {m.name} {m.tool_call_id}"
    head = f"[{label} #{m.index}] ({m.token_count} tokens)"
    body = m.content
    for call in m.tool_calls:
        body += f"\ntool_call {call.id}: {call.name}({call.arguments_json})"
    return f"{head}\n{body}".rstrip()


def _debug_text(view: ContextView, plan: BlockBudgets, summary: _SummaryView | None) -> str:
    blocks = {b.kind: b for b in view.blocks}
    lines = []
    system, summary_block = blocks[BlockKind.SYSTEM], blocks[BlockKind.SUMMARY]
    lines.append(f"### SYSTEM block: {system.tokens}/{system.budget_tokens} tokens")
    lines.append(f"[system] ({view.messages[0].token_count} tokens)\n{view.messages[0].content}")
    position = 1
    if summary is not None:
        lines.append(
            f"### SUMMARY block: {summary_block.tokens}/{summary_block.budget_tokens} tokens, "
            f"covers messages 0-{summary.covered - 1}, {summary.omitted} lines only in the full summary"
        )
        lines.append(f"[system] ({summary.tokens} tokens)\n{summary.text}")
        position = 2
    recent, observations = blocks[BlockKind.RECENT], blocks[BlockKind.OBSERVATIONS]
    lines.append(
        f"### RECENT {recent.tokens}/{recent.budget_tokens} tokens ({recent.message_count} messages) + "
        f"OBSERVATIONS {observations.tokens}/{observations.budget_tokens} tokens "
        f"({observations.message_count} messages), in log order"
    )
    lines += [_render(m) for m in view.messages[position:]]
    lines.append(
        f"### total {view.total_tokens}/{view.budget_tokens} tokens ({plan.reply} held back for the reply); "
        f"{view.summarized_messages} messages summarised, {view.dropped_messages} dropped"
        + (", compacted during this build" if view.compacted else "")
    )
    return "\n\n".join(lines)
