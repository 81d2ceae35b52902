"""Continuing a session with another task: AttachTask (docs/design.md §4, §9).

A conversation's next turn is a new task on the same session. The session records its newest task in
its meta hash (`newest`, `newest_gen`, `newest_ms`); a session no task continued has none of them, and
its newest task is the one that opened it (the session id: the dispatcher's default), generation 0,
since the session's creation. AttachTask is one Lua script, so it is a compare-and-set on the newest
task: the task becomes the newest (and is added to the attached set `tasks`, whose tokens may use the
session: access.py) only if the newest is still the one the caller expected at the generation it read,
or is this task already (a confirmation, which bumps the generation too). Otherwise nothing changes and
the reply names the newest task, its generation and its age, so the caller (the dispatcher, which knows
whether that task has ended) can decide and try again. Two callers racing from the same expectation:
exactly one wins.

Who may: operators, and the session's owner (the subject that started the task which opened it); the
task must run the session's agent. A session of an earlier release has no attached set: the attach
leaves it so (its agent's tokens keep using it, as access.py says). The attached set keeps the newest
`MAX_ATTACHED` tasks: only the newest task of a session runs, the others have ended.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from agentmesh.errors import InvalidRequestError, NotFoundError, PermissionDeniedError, echo
from agentmesh.lua_source import package_lua
from agentmesh.store import Store
from context_svc.model import Caller

__all__ = ["MAX_ATTACHED", "Attachment", "Attachments"]

MAX_ATTACHED: Final = 64
"""Tasks kept in a session's attached set (the newest ones)."""
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_PARTS: Final = ("meta", "log", "idx", "entities", "summary", "dedupe")

_ATTACH_LUA: Final = package_lua("context_svc", "attach_task")


@dataclass(frozen=True, slots=True)
class Attachment:
    """What AttachTask did: whether the task is now the session's newest, and the newest task."""

    attached: bool
    newest_task_id: str
    generation: int
    newest_age_s: float
    """How long ago the newest task became the newest (0 when this call made it so)."""


def _check_id(field: str, value: str) -> str:
    if not _ID_RE.fullmatch(value):
        raise InvalidRequestError(field, f"must match [A-Za-z0-9][A-Za-z0-9._:-]{{0,127}}, got {echo(value)!r}")
    return value


class Attachments:
    """AttachTask over Redis (see the module docstring)."""

    def __init__(self, store: Store, *, session_ttl_s: int = 0) -> None:
        self.store = store
        self.session_ttl_s = session_ttl_s
        self._attach = store.script("context_attach_task", _ATTACH_LUA)

    async def attach(
        self,
        caller: Caller,
        session_id: str,
        task_id: str,
        agent_id: str,
        *,
        expected_task_id: str = "",
        expected_generation: int = 0,
    ) -> Attachment:
        """Makes `task_id` the session's newest task if the newest is `expected_task_id` at
        `expected_generation` (or `task_id` already); else `attached` False and the newest named.
        NotFoundError for an unknown or expired session, PermissionDeniedError (`session:<id>`) unless
        the caller is an operator or the session's owner and `agent_id` the session's agent."""
        _check_id("session_id", session_id)
        _check_id("task_id", task_id)
        if not agent_id:
            raise InvalidRequestError("agent_id", "required: the agent of the task (the session's)")
        if expected_task_id:
            _check_id("expected_task_id", expected_task_id)
        if expected_generation < 0:
            raise InvalidRequestError("expected_generation", f"must be >= 0, got {expected_generation}")
        keys = [self.store.keys.session(session_id, part) for part in _PARTS]
        args: list[str | int] = [
            session_id,
            task_id,
            agent_id,
            "*" if caller.is_operator else caller.subject,
            expected_task_id,
            expected_generation,
            self.session_ttl_s,
            MAX_ATTACHED,
        ]
        async with self.store.guard("attach task"):
            reply: Any = await self._attach(keys=keys, args=args)
        code = int(reply[0])
        if code == -1:
            raise NotFoundError(f"session {session_id} not found", metadata={"session_id": session_id})
        if code == -2:
            raise PermissionDeniedError(
                f"session:{session_id}",
                f"{echo(caller.subject)} may not continue session {session_id}: only its owner (who started "
                "the task that opened it) and operators may",
            )
        if code == -3:
            owner_agent = _text(reply[1]) or "(none)"
            raise PermissionDeniedError(
                f"session:{session_id}",
                f"session {session_id} belongs to agent {owner_agent}, not {echo(agent_id)}",
            )
        return Attachment(
            attached=code == 1,
            newest_task_id=_text(reply[1]),
            generation=int(reply[2]),
            newest_age_s=int(reply[3]) / 1000,
        )


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
