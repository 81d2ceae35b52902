"""Three-layer permissions: environment, tool group, access (docs/design.md §5, §9).

A tool needs "<environment>:<group>:<access>"; the environment is the tool's own, or, for tools
declared for any environment ("*"), the one this tool_svc serves. The caller holds grants in the same
form, from its verified token only. In a grant each part may be `*` or a glob (`ops.*`).

The matcher is the core's (`agentmesh.grants`, shared with the dispatcher). Decision: write implies
read. A grant "prod:ops:write" also permits the read tools of prod:ops, because an agent trusted to
change a system must be able to look at it first; the reverse never holds.
"""

from __future__ import annotations

from agentmesh.errors import PermissionDeniedError
from agentmesh.grants import allowed, grant_allows
from tool_svc.call import CallState
from tool_svc.model import Caller, Outcome, ToolDef

__all__ = ["CheckPermission", "allowed", "check", "grant_allows", "required_permission"]


def required_permission(tool: ToolDef, service_environment: str) -> str:
    """The grant `tool` needs when called on a tool_svc serving `service_environment`."""
    environment = service_environment if tool.permission.environment == "*" else tool.permission.environment
    return f"{environment}:{tool.permission.group}:{tool.permission.access}"


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
