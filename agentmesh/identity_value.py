"""Who is calling: the Identity value and its roles, and the identity of the call being served.

Nothing of tokens, keys or config (those are `agentmesh.tokens` and `agentmesh.authenticator`):
domain models name the caller without loading the authenticator's JWT, HTTP and settings libraries,
and code serving a call reads its caller with `current_identity()` / `require_identity()` (the RPC
edge, `agentmesh.rpc.auth`, sets `identity_var` once the call's credential verified). Roles: "agent",
"operator", "admin"; `Identity.has_role` treats admin as a superset of operator.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass

from agentmesh.errors import UnauthenticatedError

__all__ = ["KNOWN_ROLES", "Identity", "current_identity", "identity_var", "require_identity"]

KNOWN_ROLES: frozenset[str] = frozenset({"agent", "operator", "admin"})
# Role implication: holding the key role grants the listed roles too.
_IMPLIED_ROLES: Mapping[str, frozenset[str]] = {"admin": frozenset({"operator"})}
_DEV_SUBJECT = "dev"


@dataclass(frozen=True)
class Identity:
    """Who is calling, as proven by a verified token (or the dev identity when auth is disabled)."""

    subject: str
    """The agent id for agents; the operator's or admin's name for humans."""
    agent_id: str
    instance: str
    """The agent instance acting (e.g. task-scoped)."""
    environment: str
    roles: frozenset[str]
    permissions: tuple[str, ...]
    """Grants "environment:group:access" (e.g. "prod:ops.read:read", "*:k8s:write"); tool_svc checks them."""
    task_id: str
    issued_at: int
    expires_at: int
    token_id: str
    creator: str = ""
    """For a task's token: the subject that started the task (the session's owner); "" otherwise."""
    api_key_id: str = ""
    """For a call made with an API key (`agentmesh keys`): the key's id, whose quotas apply; "" otherwise."""
    model_patterns: tuple[str, ...] = ()
    """For an API key: the models it may call (fnmatch patterns on `<backend>/<model>`); empty: any."""

    def has_role(self, role: str) -> bool:
        """Whether the identity holds `role`, directly or by implication (admin implies operator)."""
        return any(role == held or role in _IMPLIED_ROLES.get(held, ()) for held in self.roles)

    def has_any_role(self, roles: Iterable[str]) -> bool:
        """Whether the identity holds at least one of `roles`."""
        return any(self.has_role(role) for role in roles)

    @classmethod
    def dev(cls, environment: str = "dev", now: int | None = None) -> Identity:
        """The identity every call gets while auth is disabled: all roles, every permission."""
        issued = int(time.time()) if now is None else now
        return cls(
            subject=_DEV_SUBJECT,
            agent_id="",
            instance="",
            environment=environment,
            roles=KNOWN_ROLES,
            permissions=("*:*:*",),
            task_id="",
            issued_at=issued,
            expires_at=issued + 365 * 24 * 3600,
            token_id="",
        )


# --- the identity of the call being served --------------------------------------------------------

identity_var: ContextVar[Identity | None] = ContextVar("agentmesh_identity", default=None)
"""The verified identity of the incoming call; set by the RPC edge (agentmesh.rpc.auth)."""


def current_identity() -> Identity | None:
    """The identity of the call being served, or None outside an authenticated call."""
    return identity_var.get()


def require_identity() -> Identity:
    """The identity of the call being served; UnauthenticatedError when there is none."""
    identity = identity_var.get()
    if identity is None:
        raise UnauthenticatedError("no caller identity (is the RPC edge's AuthInterceptor installed?)")
    return identity
