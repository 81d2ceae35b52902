"""An operator's decision on a pending call, and the audit of the gateway's acts (docs/design.md §5, §9).

A pending call is an approval (a write waiting for a human), a settlement (a call whose outcome is
unknown: RAN records it as done with an unknown output, NOT_RAN re-sends it once with its key) or a
tool registration another admin must approve. The decision is the act: it is audited before the call it
releases runs. A denial is final for an idempotent call; an expiry is not (a repeat asks again).

Registrations, decisions and settlements are appended to the audit stream (`agentmesh.audit`) once done:
`tool.register`, `approval.resolve`, `settlement.resolve`. An audit write that fails is logged and the act
stands.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from agentmesh.audit import AuditLog
from agentmesh.errors import AgentmeshError, ErrorCode, PermissionDeniedError, echo
from tool_svc.approvals import ApprovalBook, ApprovalRecord, Settlement, is_requester
from tool_svc.idempotency import Idempotency, ran_output
from tool_svc.model import Caller, CallRequest, Output, Stats, ToolResult, call_sha256, canonical_json, outcome_to_json
from tool_svc.registry import ToolRegistry
from tool_svc.validation import parse_arguments

__all__ = ["Auditor", "Decisions", "RunCall"]

log = logging.getLogger("tool_svc.gateway")

RunCall = Callable[..., Awaitable[ToolResult]]
"""The gateway's `execute(request, caller, *, approved_id)`: a released call runs the whole pipeline."""


class Auditor:
    """Appends the gateway's acts to the audit stream; a failure is logged, never raised."""

    def __init__(self, audit: AuditLog | None) -> None:
        self.audit = audit

    async def __call__(self, caller: Caller, action: str, target: str, outcome: str = "ok", detail: str = "") -> None:
        """Appends to the audit stream; a failure is logged, never raised: the act it records is done."""
        if self.audit is None:
            return
        try:
            await self.audit.record(
                subject=caller.subject, action=action, target=target, outcome=outcome, detail=detail
            )
        except Exception as exc:
            log.warning(
                "audit: %s of %s by %s not recorded: %s", action, echo(target), echo(caller.subject),
                getattr(exc, "message", None) or type(exc).__name__,
            )  # fmt: skip


def _needs_redis() -> AgentmeshError:
    return AgentmeshError(ErrorCode.FAILED_PRECONDITION, "approvals need Redis")


class Decisions:
    """Reads and decides pending calls (see the module docstring)."""

    def __init__(
        self,
        approvals: ApprovalBook | None,
        idempotency: Idempotency,
        registry: ToolRegistry,
        audit: Auditor,
        execute: RunCall,
    ) -> None:
        self.approvals = approvals
        self.idempotency = idempotency
        self.registry = registry
        self.audit = audit
        self.execute = execute

    async def get(self, approval_id: str, viewer: Caller) -> ApprovalRecord:
        """The approval, for operators and for the agent that asked (it holds the call's arguments)."""
        if self.approvals is None:
            raise _needs_redis()
        record = await self.approvals.get(approval_id)
        if not (viewer.roles & {"operator", "admin"}) and not is_requester(viewer, record.caller):
            raise PermissionDeniedError(
                missing_permission="role:admin|operator",
                message=f"approval {approval_id} belongs to another agent; operators may read every approval",
            )
        return record

    async def resolve(
        self,
        approval_id: str,
        *,
        approve: bool,
        reason: str,
        arguments_sha256: str,
        approver: Caller,
        settlement: Settlement = "",
    ) -> tuple[ApprovalRecord, ToolResult]:
        """Decides an approval; an approved call runs now, as its requester, and its result is returned.
        A settlement (`settlement` RAN / NOT_RAN) records the call as ran, or re-sends it once."""
        if self.approvals is None:
            raise _needs_redis()
        action = "settlement.resolve" if settlement else "approval.resolve"
        try:
            record, expired = await self.approvals.decide(
                approval_id,
                approve=approve,
                approver=approver,
                reason=reason,
                arguments_sha256=arguments_sha256,
                settlement=settlement,
            )
        except PermissionDeniedError as exc:  # a self-approval, a non-admin on a registration
            await self.audit(approver, action, approval_id, "PERMISSION_DENIED", exc.message)
            raise
        # The decision is the act: audited now, before the call it releases runs (it may take long).
        decision = record.settlement if record.kind == "settlement" else "approved" if approve else "denied"
        await self.audit(
            approver, action, approval_id, "expired" if expired else "ok", f"{decision} ({record.pending.tool_name})"
        )
        if record.kind == "settlement":
            return record, await self._settle(record, expired=expired, approver=approver)
        if record.kind == "register_tool" and approve and not expired:
            return record, await self._complete_registration(record, approver)
        if expired or not approve:
            return record, await self._refused(record, expired=expired, reason=reason, approver=approver)
        result = await self.execute(record.request, record.caller, approved_id=approval_id)
        return record, result

    async def _refused(self, record: ApprovalRecord, *, expired: bool, reason: str, approver: Caller) -> ToolResult:
        """A denied or expired approval: the call did not run; a denial settles an idempotent call's key."""
        request, approval_id = record.request, record.pending.approval_id
        code = ErrorCode.APPROVAL_EXPIRED if expired else ErrorCode.APPROVAL_DENIED
        why = "expired before anyone decided" if expired else f"was denied by {approver.subject}"
        said = f": {reason}" if reason and not expired else ""
        error = AgentmeshError(
            code,
            f"approval {approval_id} for {record.pending.tool_name} {why}{said}; the call did not run",
            metadata={"approval_id": approval_id},
        )
        result = ToolResult(request.call_id, record.pending.tool_name, error, Stats())
        if request.idempotency_key:
            # A denial is final for this call; an expiry is not (a repeat asks again).
            done = {"s": "done", "h": _bound(record, request), "o": outcome_to_json(result)}
            key, ttl_ms = request.idempotency_key, self.idempotency.ttl_s * 1000
            await self.idempotency.cas(key, approval_id, None if expired else done, ttl_ms, states="pending")
        return result

    async def _settle(self, record: ApprovalRecord, *, expired: bool, approver: Caller) -> ToolResult:
        """Applies a settlement: RAN records the call as done with an unknown output; NOT_RAN re-sends it
        once with its key (as its requester); an expired settlement re-sends nothing."""
        request, sid = record.request, record.pending.approval_id
        key = request.idempotency_key
        if expired:
            error = AgentmeshError(
                ErrorCode.OUTCOME_UNKNOWN,
                f"settlement {sid} for {record.pending.tool_name} expired before anyone settled it; "
                "nothing was re-sent and the outcome stays unknown",
                metadata={"settlement_id": sid, "idempotency_key": key[:200]},
            )
            return ToolResult(request.call_id, record.pending.tool_name, error, Stats())
        if record.settlement == "not_ran":
            return await self.execute(request, record.caller, approved_id=sid)
        result = ToolResult(request.call_id, record.pending.tool_name, ran_output(approver.subject), Stats())
        await self.idempotency.cas(
            key,
            sid,
            {"s": "done", "h": _bound(record, request), "o": outcome_to_json(result)},
            self.idempotency.ttl_s * 1000,
            states="unknown",
        )
        return result

    async def _complete_registration(self, record: ApprovalRecord, approver: Caller) -> ToolResult:
        """An approved registration: the tool is stored now (checked again: the registry may have changed)."""
        spec, replace = record.registration()
        outcome: Output | AgentmeshError
        try:
            stored = await self.registry.register(spec, replace_existing=replace)
            outcome = Output("structured", inline=canonical_json({"registered": stored.name, "replaced": replace}))
        except AgentmeshError as exc:
            outcome = exc
        await self.audit(
            approver,
            "tool.register",
            spec.name,
            outcome.code.name if isinstance(outcome, AgentmeshError) else "ok",
            f"approval {record.pending.approval_id}, requested by {record.caller.subject}",
        )
        return ToolResult(record.request.call_id, spec.name, outcome, Stats())


def _bound(record: ApprovalRecord, request: CallRequest) -> str:
    """The call's hash as its idempotency record binds it (the tool and its parsed arguments)."""
    return call_sha256(record.pending.tool_name, parse_arguments(request.arguments_json, max_bytes=1 << 30))
