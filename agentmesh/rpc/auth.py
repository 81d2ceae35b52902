"""The RPC edge's authentication: every call's identity token verified, per-method roles enforced.

Runs in the edge's chain before the request is decoded (`agentmesh.rpc.interceptors`): a call with
no or a bad token is UNAUTHENTICATED having cost one HMAC at most. A rejection is raised, and the
edge answers and logs it as any error (one short line, rate-limited per method and code); a
TokenError states the reason only, never the token. Tokens themselves are `agentmesh.tokens`'s, the
verifying `agentmesh.authenticator`'s.

A call refused for its role also appends `auth.refused` to the audit stream (`agentmesh.audit`,
docs/design.md §9) when the host has a store: best effort, in a background task (at most
`RefusalAudit.max_in_flight` at once, each given `timeout_s`), so the refusal is never held up or
failed by the audit write; the stream's MAXLEN bounds what a flood of refused calls can add.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import grpc.aio

from agentmesh import callctx
from agentmesh.audit import AuditLog
from agentmesh.authenticator import Authenticator
from agentmesh.errors import PermissionDeniedError, echo
from agentmesh.identity_value import KNOWN_ROLES, Identity, identity_var
from agentmesh.rpc.interceptors import CallInterceptor
from agentmesh.rpc.ratelog import RateLimitedLog
from agentmesh.tokens import TokenError

__all__ = ["AUTHORIZATION_HEADER", "PUBLIC_METHOD_PREFIXES", "AuthInterceptor", "RefusalAudit", "call_token"]

log = logging.getLogger("agentmesh.rpc.auth")

# Health probes and grpcurl's reflection must work without a token.
PUBLIC_METHOD_PREFIXES: tuple[str, ...] = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


AUTHORIZATION_HEADER = "authorization"


def call_token(metadata: Any) -> str | None:
    """The call's identity token: `x-agentmesh-identity` (what our channels send), else the bearer
    token of `authorization` (how JWTs, and any client's tokens, usually travel)."""
    token = callctx.metadata_value(metadata, callctx.IDENTITY_HEADER)
    if token:
        return token
    header = callctx.metadata_value(metadata, AUTHORIZATION_HEADER)
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise TokenError("authorization metadata must be 'Bearer <token>'")
    return value.strip()


class RefusalAudit:
    """Records the calls the edge refused for their role (`auth.refused`) without waiting for Redis.

    `refused` starts one background write and returns at once; beyond `max_in_flight` unfinished
    writes (Redis slow or away) an entry is dropped and counted in `dropped`, and a write that fails
    or takes over `timeout_s` is logged (rate-limited), never raised.
    """

    def __init__(self, audit: AuditLog, *, max_in_flight: int = 64, timeout_s: float = 2.0) -> None:
        self.audit = audit
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self.dropped = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._log = RateLimitedLog(log)

    def refused(self, identity: Identity, method: str, detail: str) -> None:
        """Appends `auth.refused` for `identity` calling `method`, in the background."""
        if len(self._tasks) >= self.max_in_flight:
            self.dropped += 1
            self._log.log(
                "dropped", logging.WARNING, "audit: %d writes in flight; auth.refused of %s not recorded (%d so far)",
                len(self._tasks), method, self.dropped,
            )  # fmt: skip
            return
        task = asyncio.get_running_loop().create_task(self._write(identity, method, detail))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, identity: Identity, method: str, detail: str) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.audit.record(
                    subject=identity.subject,
                    action="auth.refused",
                    target=method,
                    outcome="PERMISSION_DENIED",
                    detail=detail,
                )
        except Exception as exc:  # UnavailableError, TimeoutError, ...: the refusal stands regardless
            self._log.log(
                "failed", logging.WARNING, "audit: auth.refused of %s not recorded: %s", method,
                getattr(exc, "message", None) or type(exc).__name__,
            )  # fmt: skip

    async def aclose(self, timeout_s: float = 1.0) -> None:
        """Waits up to `timeout_s` for the writes in flight, then cancels the rest."""
        pending = set(self._tasks)
        if not pending:
            return
        _, unfinished = await asyncio.wait(pending, timeout=timeout_s)
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.wait(unfinished)


class AuthInterceptor(CallInterceptor):
    """Verifies the identity token of every call and enforces per-method roles.

    `method_roles` maps a full method name ("/agentmesh.v1.DispatcherService/ResolveApproval")
    to the roles that may call it; other methods need `default_roles`. The caller needs at least
    one of the roles (admin counts as operator); an empty set admits any valid token. Health and
    reflection methods need no token. With `refusals`, each call refused for its role is audited.
    """

    def __init__(
        self,
        authenticator: Authenticator,
        method_roles: Mapping[str, frozenset[str]] | None = None,
        default_roles: frozenset[str] = frozenset(),
        refusals: RefusalAudit | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.refusals = refusals
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
        token = call_token(context.invocation_metadata())
        # A TokenError carries the reason only: the token is a credential and must never reach a log.
        identity = await self.authenticator.authenticate(token)
        required = self.required_roles(method)
        if required and not identity.has_any_role(required):
            wanted = " or ".join(sorted(required))
            held = ", ".join(sorted(identity.roles)) or "none"
            if self.refusals is not None:
                agent = f", agent {identity.agent_id}" if identity.agent_id else ""
                self.refusals.refused(identity, method, f"requires {wanted}; held {held}{agent}")
            raise PermissionDeniedError(
                missing_permission=f"role:{'|'.join(sorted(required))}",
                message=f"{method} requires role {wanted}; {echo(identity.subject)} has roles {echo(held)}",
            )
        identity_var.set(identity)
        # Downstream calls forward the caller's own token, so the identity travels unchanged.
        callctx.identity_token_var.set(token or None)
