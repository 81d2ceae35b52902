"""Who may use a session (docs/design.md §4, §9).

A session records its owner (the creator of the task that opened it) and the tasks attached to it:
at CreateSession, the calling token's task (a task's token, which the dispatcher mints per task).
Every session RPC is allowed to operators (admins included) and to the tokens of the attached tasks;
another task's token is refused even when it runs the same agent. Later features extend the attached
set, never this rule: a continued conversation attaches each new turn's task (attach.py, AttachTask,
which the session's owner and operators may call).

A session created before sessions recorded their tasks has no attached set (`tasks` None): for it
the rule of the release that created it still holds (the tokens of its agent), so the tasks in
flight during a rolling upgrade keep their sessions.

The append script (sessions.py) applies the same rule inside Redis, in the step that appends.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import json

from agentmesh.errors import PermissionDeniedError, echo
from context_svc.model import Caller, SessionAccess

__all__ = ["check_access", "decode_tasks", "encode_tasks"]


def check_access(caller: Caller, session_id: str, access: SessionAccess) -> None:
    """PermissionDeniedError naming `session:<id>` unless `caller` may use the session."""
    if caller.is_operator:
        return
    if access.tasks is None:  # created before sessions recorded their tasks: its agent's tokens
        if caller.agent_id == access.agent_id:
            return
        raise PermissionDeniedError(
            f"session:{session_id}",
            f"session {echo(session_id)} belongs to agent {access.agent_id or '(none)'}, "
            f"not {echo(caller.agent_id or caller.subject)}",
        )
    if caller.task_id and caller.task_id in access.tasks:
        return
    who = f"task {echo(caller.task_id)}" if caller.task_id else echo(caller.subject)
    raise PermissionDeniedError(
        f"session:{session_id}",
        f"session {echo(session_id)} is not attached to {who}: only the tokens of its tasks and operators may use it",
    )


def encode_tasks(tasks: tuple[str, ...]) -> str:
    """The attached set as stored in the session's meta hash (field `tasks`, a JSON array)."""
    return json.dumps(list(tasks))


def decode_tasks(raw: object) -> tuple[str, ...] | None:
    """The stored attached set; None when the field is absent (a session of an earlier release; a
    script reads an absent field as false)."""
    if not isinstance(raw, bytes | str):
        return None
    return tuple(str(task) for task in json.loads(raw))
