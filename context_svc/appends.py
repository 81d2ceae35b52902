"""Appends: how a message or a tool result enters a session's log (what ContextEngine delegates to).

`Appender` has the message made ready (append_prep.py: validated, offloaded when large, its dedupe key),
counts its tokens once (stored with it, in the session's encoding), extracts the known facts a user or
assistant message states (facts/entities.py), and makes an append happen once: a repeat under the same
client_message_id or tool_call_id with the same content returns the original position, with other
content it is FAILED_PRECONDITION. A step's reply and its tool results go in one script. It also answers
GetToolResult: the result appended for a tool call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from agentmesh.config import ContextSettings
from agentmesh.errors import (
    InvalidRequestError,
    NotFoundError,
    echo,
)
from agentmesh.payloads import PayloadStore
from agentmesh.store import Store
from context_svc.access import check_access
from context_svc.append_prep import AppendPreparer, Prepared, as_text, validate_message
from context_svc.facts.entities import extract_entities, pending_corrections, with_previous
from context_svc.memories import Memories
from context_svc.model import (
    Appended,
    Caller,
    Message,
    Role,
    Session,
    ToolOutcome,
    message_hash,
)
from context_svc.results import outcome_of
from context_svc.sessions import Dedupe, EncodingChangedError, Existing, Loaded, SessionStore
from context_svc.summarize import source_texts
from context_svc.tokens import counter_for

__all__ = ["Appender"]


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
        self.prep = AppendPreparer(settings, store, sessions, payloads)
        self.encodings = self.prep.encodings

    async def _append(
        self, caller: Caller, session_id: str, message: Message, dedupe: Dedupe | None = None, *, load: bool = False
    ) -> tuple[tuple[int, int] | Existing, Loaded | None]:
        """The append script's answer and, with `load`, the session as a load right after the append
        (in the same script: one round trip, issue 45) reads it."""
        entities = await self._entities(session_id, message)
        message = replace(message, create_time=message.create_time or _now())
        # The encoding is immutable per session and cached; the append script checks it, so a
        # session id deleted and re-created with another encoding gets a recount, not a wrong count.
        for attempt in range(2):
            encoding = await self.prep.encoding(session_id)
            counted = _counted(message, encoding)
            tokens = counted.token_count
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
        validate_message(goal)
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
            return stored, (
                self.prep.repeat(result, dedupe, f"client_message_id {echo(goal_message_id)}", metadata),
                None,
            )
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
            entities = with_previous(entities, {k: as_text(v) for k, v in zip(keys, stored, strict=True) if v})
        return entities

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
        prepared = await self.prep.message(caller, session_id, message, client_message_id)
        if isinstance(prepared, Appended):
            return prepared, None
        result, loaded = await self._append(caller, session_id, prepared.message, prepared.dedupe, load=load)
        if not isinstance(result, Existing) and message.role is Role.USER and self.settings.memory_extract:
            await self.memory.extract(session_id, result[0], prepared.message.content, self.sessions.get)
        return self.prep.finish(prepared, result), loaded

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
        prepared = await self.prep.result(caller, session_id, outcome)
        if isinstance(prepared, Appended):
            return prepared, None
        result, loaded = await self._append(caller, session_id, prepared.message, prepared.dedupe, load=load)
        return self.prep.finish(prepared, result), loaded

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
        one call (issue 45). With `load`, the session as a load right after the last reads it, and all
        of them appended in one script (the session's meta read and written once). Every result is
        checked, and every large one offloaded, before anything is appended."""
        calls = {call.id for call in message.tool_calls}
        for i, outcome in enumerate(results):
            if outcome.tool_call_id not in calls:
                raise InvalidRequestError(
                    f"following_results[{i}].tool_call_id",
                    f"{echo(outcome.tool_call_id)!r} answers no tool call of the message",
                )
        if len({outcome.tool_call_id for outcome in results}) != len(results):
            raise InvalidRequestError("following_results", "two results answer the same tool call")
        prepared = [await self.prep.message(caller, session_id, message, client_message_id)]
        prepared += [await self.prep.result(caller, session_id, outcome) for outcome in results]
        ready = [p for p in prepared if isinstance(p, Prepared)]
        loaded: Loaded | None = None
        if load and len(ready) == len(prepared):
            landed, loaded = await self._append_many(caller, session_id, ready)
            done = [self.prep.finish(p, r) for p, r in zip(ready, landed, strict=True)]
        else:  # a repeat answered before offloading, or no load: one append each, as before
            done = []
            for i, p in enumerate(prepared):
                if isinstance(p, Appended):
                    done.append(p)
                    continue
                last = load and i == len(prepared) - 1
                result, loaded = await self._append(caller, session_id, p.message, p.dedupe, load=last)
                done.append(self.prep.finish(p, result))
        return done[0], done[1:], loaded

    async def _append_many(
        self, caller: Caller, session_id: str, prepared: Sequence[Prepared]
    ) -> tuple[list[tuple[int, int] | Existing], Loaded]:
        """`_append` of each, then the load, in one script (SessionStore.append_many_and_load)."""
        items = [
            (
                replace(p.message, create_time=p.message.create_time or _now()),
                await self._entities(session_id, p.message),
            )
            for p in prepared
        ]
        agent = None if caller.is_operator else caller.agent_id
        for attempt in range(2):
            encoding = await self.prep.encoding(session_id)
            counted = [
                (_counted(m, encoding), entities, p.dedupe) for (m, entities), p in zip(items, prepared, strict=True)
            ]
            try:
                landed, loaded = await self.sessions.append_many_and_load(
                    session_id, counted, caller_agent=agent, encoding=encoding, caller_task=caller.task_id
                )
            except EncodingChangedError:  # as in _append
                self.encodings.forget(session_id)
                if attempt:
                    raise
                continue
            return [
                r if isinstance(r, Existing) else (r, c[0].token_count) for r, c in zip(landed, counted, strict=True)
            ], loaded
        raise AssertionError("unreachable")  # pragma: no cover

    async def tool_result(self, caller: Caller, session_id: str, tool_call_id: str) -> tuple[ToolOutcome, Existing]:
        """GetToolResult: the result appended for `tool_call_id` as it was appended (the truth a
        resumed run continues with, issue 39), and where it is; NOT_FOUND when there is none."""
        if not tool_call_id:
            raise InvalidRequestError("tool_call_id", "required: the call whose appended result is read")
        check_access(caller, session_id, (await self.prep.facts(session_id))[0])
        existing = await self.sessions.seen(session_id, f"c:{tool_call_id}")
        if existing is None:
            raise NotFoundError(f"no result appended for tool call {echo(tool_call_id)}",
                                metadata={"tool_call_id": echo(tool_call_id)})  # fmt: skip
        return outcome_of(existing.message), existing


# -- helpers ----------------------------------------------------------------------------


def _counted(message: Message, encoding: str) -> Message:
    """`message` with its tokens counted in `encoding` (tool calls and the tool name included)."""
    extra = [c.name for c in message.tool_calls] + [c.arguments_json for c in message.tool_calls]
    if message.name:
        extra.append(message.name)
    return replace(message, token_count=counter_for(encoding).message(message.role.value, message.content, extra))
