"""The RPC edge's authentication: every call's identity token verified, per-method roles enforced.

Runs in the edge's chain before the request is decoded (`agentmesh.rpc.interceptors`): a call with
no or a bad token is UNAUTHENTICATED having cost one HMAC at most. A rejection is raised, and the
edge answers and logs it as any error (one short line, rate-limited per method and code); a
TokenError states the reason only, never the token. Tokens themselves are `agentmesh.identity`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc.aio

from agentmesh import callctx
from agentmesh.errors import PermissionDeniedError, echo
from agentmesh.identity import KNOWN_ROLES, Authenticator, identity_var
from agentmesh.rpc.interceptors import CallInterceptor

__all__ = ["PUBLIC_METHOD_PREFIXES", "AuthInterceptor"]

# Health probes and grpcurl's reflection must work without a token.
PUBLIC_METHOD_PREFIXES: tuple[str, ...] = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


class AuthInterceptor(CallInterceptor):
    """Verifies the identity token of every call and enforces per-method roles.

    `method_roles` maps a full method name ("/agentmesh.v1.DispatcherService/ResolveApproval")
    to the roles that may call it; other methods need `default_roles`. The caller needs at least
    one of the roles (admin counts as operator); an empty set admits any valid token. Health and
    reflection methods need no token.
    """

    def __init__(
        self,
        authenticator: Authenticator,
        method_roles: Mapping[str, frozenset[str]] | None = None,
        default_roles: frozenset[str] = frozenset(),
    ) -> None:
        self.authenticator = authenticator
        self.method_roles: dict[str, frozenset[str]] = dict(method_roles or {})
        self.default_roles = default_roles
        # A typo in a role name would lock a method for everyone; fail at startup instead.
        for method, roles in [*self.method_roles.items(), ("(default)", default_roles)]:
            unknown = set(roles) - KNOWN_ROLES
            if unknown:
                raise ValueError(f"{method}: unknown roles {sorted(unknown)}; known: {sorted(KNOWN_ROLES)}")

    def required_roles(self, method: str) -> frozenset[str]:
        return self.method_roles.get(method, self.default_roles)

    async def enter(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if method.startswith(PUBLIC_METHOD_PREFIXES):
            return
        token = callctx.metadata_value(context.invocation_metadata(), callctx.IDENTITY_HEADER)
        # A TokenError carries the reason only: the token is a credential and must never reach a log.
        identity = self.authenticator.identify(token)
        required = self.required_roles(method)
        if required and not identity.has_any_role(required):
            wanted = " or ".join(sorted(required))
            held = ", ".join(sorted(identity.roles)) or "none"
            raise PermissionDeniedError(
                missing_permission=f"role:{'|'.join(sorted(required))}",
                message=f"{method} requires role {wanted}; {echo(identity.subject)} has roles {echo(held)}",
            )
        identity_var.set(identity)
        # Downstream calls forward the caller's own token, so the identity travels unchanged.
        callctx.identity_token_var.set(token or None)
