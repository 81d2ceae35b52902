"""`agentmesh token`: the signed token it prints (an agent's, an operator's or an admin's)."""

from __future__ import annotations

import getpass
from collections.abc import Iterable

from agentmesh.config import ConfigError, Settings
from agentmesh.identity_value import KNOWN_ROLES
from agentmesh.tokens import mint_token

__all__ = ["token_command"]


def token_command(
    settings: Settings,
    role: str | None,
    subject: str | None = None,
    ttl_s: int | None = None,
    *,
    agent_id: str = "",
    permissions: Iterable[str] = (),
) -> str:
    """The token `agentmesh token [--role R] [--agent A] [--permission G ...] [--subject S] [--ttl N]` prints.

    Signed with `auth.key` for `settings.environment`. Role defaults to agent when an agent is named
    (its subject then defaults to the agent id), and is required otherwise; an operator's or admin's
    subject defaults to the login name. Grants are "env:group:access" (`dev:ops.*:read`,
    `dev:agent.ops:run`). Raises ValueError for a bad role or grant and ConfigError without a key.
    """
    role = role or ("agent" if agent_id else None)
    if role not in KNOWN_ROLES:
        raise ValueError(f"--role must be one of {', '.join(sorted(KNOWN_ROLES))} (or name an --agent), got {role!r}")
    if role == "agent" and not agent_id:
        raise ValueError("an agent token needs --agent")
    grants = list(permissions)
    for grant in grants:
        if len(grant.split(":")) != 3 or not all(grant.split(":")):
            raise ValueError(f"--permission {grant!r} is not env:group:access (e.g. dev:ops.*:read)")
    key = settings.auth.key.get_secret_value() if settings.auth.key is not None else ""
    if not key:
        raise ConfigError(
            "auth.key is not set (AGENTMESH_AUTH_KEY): cannot sign a token"
            + ("; while auth is disabled no token is needed" if settings.auth.mode == "disabled" else "")
        )
    if not subject:
        if agent_id:
            subject = agent_id
        else:
            try:
                subject = getpass.getuser()
            except (OSError, KeyError):  # No login name (e.g. a container without a passwd entry).
                subject = role
    return mint_token(
        key.encode("utf-8"),
        subject=subject,
        roles=(role,),
        ttl_s=settings.auth.token_ttl_s if ttl_s is None else ttl_s,
        agent_id=agent_id,
        environment=settings.environment,
        permissions=grants,
    )
