"""The context domain's facade: `ContextEngine`, what server.py calls (async Python over Redis, no grpc).

It holds the session operations (create, get, attach, delete), payload reads and access checks, and
delegates appends (validation, offload, once-only) to appends.py, the budgeted context view to
assembly.py and the summarizing of older turns to compaction.py. Per-message work is done once: token
counts when a message is appended (stored with it), extraction notes and summary renderings in bounded
in-process caches keyed by the session's epoch, the message index or the summary version (all
immutable), so BuildContext reads one Lua reply and does work proportional to the recent window, not to
the session's length.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentmesh.config import ContextSettings
from agentmesh.errors import (
    AgentmeshError,
    FailedPreconditionError,
    InvalidRequestError,
    PermissionDeniedError,
    UnavailableError,
)
from agentmesh.payloads import PayloadStore, StoredPayload
from agentmesh.store import Store
from context_svc.access import check_access
from context_svc.append_prep import validate_client_message_id
from context_svc.appends import Appender
from context_svc.assembly import Assembler
from context_svc.attach import Attachment, Attachments
from context_svc.budget import MIN_BUDGET_TOKENS, BlockBudgets, group_entries, select_window
from context_svc.compaction import Compactor
from context_svc.facts.known import public_entities
from context_svc.handoff_sources import Handoffs
from context_svc.memories import Memories, Prefetch
from context_svc.model import (
    Appended,
    Budget,
    Caller,
    ContextView,
    Message,
    Role,
    Session,
    Summary,
    ToolOutcome,
)
from context_svc.sessions import Existing, Loaded, SessionStore, new_epoch
from context_svc.summarize import SummaryModel
from context_svc.tokens import UnknownEncodingError, counter_for

__all__ = ["BudgetRequest", "ContextEngine"]

_SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_MAX_SUB_GOALS = 50


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
        self.appends = Appender(settings, store, self.sessions, self.payloads, self.memory)
        self.assembly = Assembler(settings, self.sessions, self.payloads, self.compaction, memory=self.memory)

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
        session = _new_session(
            caller, self._resolve_budget, session_id=session_id, agent_id=agent_id, goal=goal, sub_goals=sub_goals,
            system_prompt=system_prompt, budget=budget,
        )  # fmt: skip
        stored, created = await self.sessions.create(session)
        return self._opened(caller, session, stored, created=created, budget=budget), created

    def _opened(
        self, caller: Caller, session: Session, stored: Session, *, created: bool, budget: BudgetRequest | None
    ) -> Session:
        """`stored` after a create of `session` (created or found): FAILED_PRECONDITION when it holds
        other global state, PERMISSION_DENIED when the caller may not use it."""
        # The first append need not read it (issue 45); the append script checks it anyway.
        self.appends.encodings.put(stored.session_id, stored.budget.encoding)
        self.memory.owned(stored.session_id, stored.owner)
        if not created:
            fields = ("agent_id", "goal", "sub_goals", "system_prompt")
            same = all(getattr(stored, f) == getattr(session, f) for f in fields)
            if not same or (budget is not None and stored.budget != session.budget):
                raise FailedPreconditionError(
                    f"session {session.session_id} already exists with other global state",
                    metadata={"session_id": session.session_id},
                )
            check_access(caller, stored.session_id, stored.access)
        return stored

    async def open_session(
        self,
        caller: Caller,
        *,
        goal_message_id: str = "",
        session_id: str = "",
        agent_id: str = "",
        goal: str,
        sub_goals: Sequence[str] = (),
        system_prompt: str = "",
        budget: BudgetRequest | None = None,
        view: bool = False,
        view_tokens: int | None = None,
    ) -> tuple[Session, Appended | None, ContextView | None]:
        """CreateSession: `create_session`, then, with a goal_message_id, the goal appended once under that
        id as the session's first user message (issue 45: the dispatcher's first append in the same call,
        one round trip fewer per task), and with `view` the context built right after it
        (`append_message_viewed`). The id is checked before anything is written."""
        if goal_message_id:
            validate_client_message_id(goal_message_id, "goal_message_id")
        new = _new_session(
            caller, self._resolve_budget, session_id=session_id, agent_id=agent_id, goal=goal, sub_goals=sub_goals,
            system_prompt=system_prompt, budget=budget,
        )  # fmt: skip
        goal_message = Message(role=Role.USER, content=goal)
        fast = None
        entities = self.appends.goal_inline(goal_message) if goal_message_id and view else None
        if entities is not None:
            # The create, the goal's append and its load as one script (issue 45), when it is new.
            self.memory.owned(new.session_id, new.owner)
            memories = None if self.settings.memory_extract else self.memory.prefetch(new.session_id)
            fast = await self.appends.create_with_goal(caller, new, goal_message, goal_message_id, entities)
        if fast is None:
            stored, created = await self.sessions.create(new)
            session = self._opened(caller, new, stored, created=created, budget=budget)
        elif fast[1] is None:  # it exists: checked as create_session checks it, then the usual path
            session = self._opened(caller, new, fast[0], created=False, budget=budget)
        else:
            (appended, loaded), stored = fast[1], fast[0]
            self._opened(caller, new, stored, created=True, budget=budget)
            built = await self._build(caller, new.session_id, view_tokens, loaded=loaded, memories=memories)
            return stored, appended, built
        if not goal_message_id:
            return session, None, None
        if not view:
            appended = await self.appends.append_message_once(
                caller, session.session_id, goal_message, client_message_id=goal_message_id
            )
            return session, appended, None
        if fast is not None:  # a repeat: the memories are read already
            appended, loaded = await self.appends.append_message(
                caller, session.session_id, goal_message, client_message_id=goal_message_id, load=True
            )
            built = await self._build(caller, session.session_id, view_tokens, loaded=loaded, memories=memories)
            return session, appended, built
        appended, built = await self.append_message_viewed(
            caller, session.session_id, goal_message, client_message_id=goal_message_id, budget_tokens=view_tokens
        )
        return session, appended, built

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

    async def append_message(self, caller: Caller, session_id: str, message: Message) -> tuple[int, int]:
        """`append_message_once` without a client_message_id: (index, token count)."""
        appended = await self.appends.append_message_once(caller, session_id, message)
        return appended.index, appended.token_count

    async def append_message_once(
        self, caller: Caller, session_id: str, message: Message, *, client_message_id: str = ""
    ) -> Appended:
        """Appends a message, offloading large content, once per client_message_id (appends.py)."""
        return await self.appends.append_message_once(caller, session_id, message, client_message_id=client_message_id)

    async def append_tool_result(
        self, caller: Caller, session_id: str, outcome: ToolOutcome
    ) -> tuple[int, int, StoredPayload | None]:
        """`append_tool_result_once` as (index, token count, the ref when content was offloaded here)."""
        appended = await self.appends.append_tool_result_once(caller, session_id, outcome)
        return appended.index, appended.token_count, appended.ref

    async def append_tool_result_once(self, caller: Caller, session_id: str, outcome: ToolOutcome) -> Appended:
        """Appends a tool result as a ROLE_TOOL message, once per tool_call_id (appends.py)."""
        return await self.appends.append_tool_result_once(caller, session_id, outcome)

    async def append_message_viewed(
        self,
        caller: Caller,
        session_id: str,
        message: Message,
        *,
        client_message_id: str = "",
        budget_tokens: int | None = None,
    ) -> tuple[Appended, ContextView]:
        """`append_message_once`, then the view `build_context(budget_tokens)` builds right after it:
        the append and the load are one script (one round trip, issue 45)."""
        # A user message whose statements are remembered changes the memories the view recalls after
        # the append: they are read then, not beside it.
        extracts = message.role is Role.USER and self.settings.memory_extract
        memories = None if extracts else self.memory.prefetch(session_id)
        appended, loaded = await self.appends.append_message(
            caller, session_id, message, client_message_id=client_message_id, load=True
        )
        return appended, await self._build(caller, session_id, budget_tokens, loaded=loaded, memories=memories)

    async def append_tool_result_viewed(
        self, caller: Caller, session_id: str, outcome: ToolOutcome, *, budget_tokens: int | None = None
    ) -> tuple[Appended, ContextView]:
        """`append_tool_result_once`, then the view built right after it, as `append_message_viewed`."""
        memories = self.memory.prefetch(session_id)
        appended, loaded = await self.appends.append_tool_result(caller, session_id, outcome, load=True)
        return appended, await self._build(caller, session_id, budget_tokens, loaded=loaded, memories=memories)

    async def append_message_with_results(
        self,
        caller: Caller,
        session_id: str,
        message: Message,
        results: Sequence[ToolOutcome],
        *,
        client_message_id: str = "",
        build: int | None = None,
    ) -> tuple[Appended, list[Appended], ContextView | None]:
        """A message and results of its tool calls (appends.py); with `build` (a budget, 0: the session's)
        the view built right after the last, as `append_tool_result_viewed` builds it (issue 45)."""
        memories = None if build is None else self.memory.prefetch(session_id)
        appended, following, loaded = await self.appends.append_with_results(
            caller, session_id, message, results, client_message_id=client_message_id, load=build is not None
        )
        if build is None:
            return appended, following, None
        view = await self._build(caller, session_id, build or None, loaded=loaded, memories=memories)
        return appended, following, view

    async def tool_result(self, caller: Caller, session_id: str, tool_call_id: str) -> tuple[ToolOutcome, Existing]:
        """GetToolResult: the result appended for `tool_call_id` as it was appended (appends.py)."""
        return await self.appends.tool_result(caller, session_id, tool_call_id)

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
        return await self._build(caller, session_id, budget_tokens, debug=debug)

    async def _build(
        self,
        caller: Caller,
        session_id: str,
        budget_tokens: int | None,
        *,
        debug: bool = False,
        loaded: Loaded | None = None,
        memories: Prefetch | None = None,
    ) -> ContextView:
        """`build_context` from `loaded` (an append's load) and `memories` (read beside it) when given."""
        if budget_tokens is not None and budget_tokens <= 0:
            raise InvalidRequestError(
                "budget_tokens",
                f"must be > 0 (leave it unset for the session's max_context_tokens), got {budget_tokens}",
            )
        if loaded is None:
            if memories is None:
                memories = self.memory.prefetch(session_id)  # the owner's memories, read while the session loads
            loaded = await self.sessions.load(session_id)
        session = loaded.session
        check_access(caller, session_id, session.access)
        self.appends.encodings.put(session_id, session.budget.encoding)
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


def _new_session(
    caller: Caller,
    resolve_budget: Callable[[str, BudgetRequest], Budget],
    *,
    session_id: str,
    agent_id: str,
    goal: str,
    sub_goals: Sequence[str],
    system_prompt: str,
    budget: BudgetRequest | None,
) -> Session:
    """The session `create_session` asks to create (validated; nothing is read or written), its budget
    `resolve_budget(agent, request)`."""
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
        budget=resolve_budget(agent_id, budget or BudgetRequest()),
        create_time=_now(),
        epoch=new_epoch(),
    )
    return session
