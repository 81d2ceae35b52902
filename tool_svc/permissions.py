"""Three-layer permissions: environment, tool group, access (docs/architecture.md §5, §9).

A tool needs "<environment>:<group>:<access>"; the environment is the tool's own, or, for tools
declared for any environment ("*"), the one this tool_svc serves. The caller holds grants in the same
form, from its verified token only. In a grant each part may be `*` or a glob (`ops.*`).

Decision: write implies read. A grant "prod:ops:write" also permits the read tools of prod:ops,
because an agent trusted to change a system must be able to look at it first; the reverse never holds.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from agentmesh.errors import PermissionDeniedError
from tool_svc.call import CallState
from tool_svc.model import Caller, Outcome, ToolDef

# The access levels a grant's access part confers.
_CONFERS: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "write": frozenset({"read", "write"}),
    "*": frozenset({"read", "write"}),
}


def required_permission(tool: ToolDef, service_environment: str) -> str:
    """The grant `tool` needs when called on a tool_svc serving `service_environment`."""
    environment = service_environment if tool.permission.environment == "*" else tool.permission.environment
    return f"{environment}:{tool.permission.group}:{tool.permission.access}"


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
    environment, group, access = required.split(":")
    return any(grant_allows(grant, environment, group, access) for grant in grants)


def check(caller: Caller, tool: ToolDef, service_environment: str) -> None:
    """Raises PermissionDeniedError naming the missing grant unless the caller may use `tool`."""
    required = required_permission(tool, service_environment)
    if not allowed(caller.permissions, required):
        held = ", ".join(caller.permissions) or "none"
        raise PermissionDeniedError(
            missing_permission=required,
            message=f"{caller.agent} may not use {tool.name}: it needs {required}; the token grants {held}",
        )


class CheckPermission:
    """Pipeline step: PERMISSION_DENIED naming the missing grant; grants come from the verified token only."""

    async def __call__(self, call: CallState) -> Outcome | None:
        try:
            check(call.caller, call.spec, call.service_environment)
        except PermissionDeniedError as exc:
            return exc
        return None
