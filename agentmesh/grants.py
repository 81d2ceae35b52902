"""Grants: what a verified token may do, as "<environment>:<group>:<access>" (docs/design.md §5, §9).

One matcher for every service: tool_svc checks a tool's permission with it, the dispatcher who may run
which agent. In a grant each part may be `*` or a glob (`ops.*`).

Access levels:
- `read` confers read; `write` confers read and write: an agent trusted to change a system must be
  able to look at it first (the reverse never holds);
- `run` confers run only: starting a task as an agent (`<env>:agent.<id>:run`) is neither reading nor
  writing a tool's system;
- `*` confers all three.

Domain code only: no grpc, no stubs (docs/design.md §1).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

__all__ = ["ACCESS_LEVELS", "agent_run_permission", "allowed", "grant_allows"]

ACCESS_LEVELS = ("read", "write", "run")

# The access levels a grant's access part confers.
_CONFERS: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "write": frozenset({"read", "write"}),
    "run": frozenset({"run"}),
    "*": frozenset(ACCESS_LEVELS),
}


def _part_matches(granted: str, wanted: str) -> bool:
    return granted in ("*", wanted) or fnmatch.fnmatchcase(wanted, granted)


def grant_allows(grant: str, environment: str, group: str, access: str) -> bool:
    """Whether one grant "env:group:access" permits `access` on `group` in `environment`."""
    parts = grant.split(":")
    if len(parts) != 3:
        return False  # malformed grants grant nothing
    g_env, g_group, g_access = parts
    if not (_part_matches(g_env, environment) and _part_matches(g_group, group)):
        return False
    if g_access in _CONFERS:
        return access in _CONFERS[g_access]
    return fnmatch.fnmatchcase(access, g_access)


def allowed(grants: Iterable[str], required: str) -> bool:
    """Whether any of `grants` permits `required` ("env:group:access")."""
    environment, group, access = required.split(":")
    return any(grant_allows(grant, environment, group, access) for grant in grants)


def agent_run_permission(environment: str, agent_id: str) -> str:
    """The grant that lets a caller start tasks as `agent_id` in `environment`."""
    return f"{environment}:agent.{agent_id}:run"
