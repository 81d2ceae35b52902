"""Approvals for writes (docs/design.md §5, §7): a PendingApproval instead of running the call.

An approval records the change plan (tool + arguments), the tool's impact statement, the requester
(from its verified token) and the sha256 the arguments are bound to; it expires after
`approval_ttl_s`. Deciding is one Lua script on Redis time, so two operators racing, or a decision
racing the expiry, have exactly one outcome. The approver must differ from the requester and must have
seen the same arguments (their hash); an approved call then runs once, as the requester. For a task's
call (the requester's token names the task and its creator), separation of duties (`check_duties`) is
applied here too, on every RPC that decides: the task's creator and its agent are refused.

A run-time registration that needs review (`ToolRegistry.review`) is an approval too (kind
`register_tool`): its plan is the tool spec (ToolDef JSON) and the replace flag, bound by their hash;
only an admin other than the registering one may decide it, and approving stores the tool.

A call whose outcome is unknown (tool_svc.idempotency) waits for a settlement (kind `settlement`), with
an id derived from its idempotency key so every replica that finds the outcome unknown opens the same
one: an operator records RAN or NOT_RAN instead of approving or denying.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from agentmesh.errors import FailedPreconditionError, InvalidRequestError, NotFoundError, PermissionDeniedError
from agentmesh.lua_source import package_lua
from agentmesh.store import Store
from tool_svc.call import CallState
from tool_svc.model import Caller, CallRequest, Outcome, Pending, ToolDef, arguments_sha256

Kind = Literal["call", "register_tool", "settlement"]

Settlement = Literal["", "ran", "not_ran"]

State = Literal["pending", "approved", "denied", "expired"]

# Records stay readable (as expired or decided) this long after their expiry.
RETENTION_S = 86400

_CREATE_LUA = package_lua("tool_svc", "approval_create")

# As _CREATE_LUA, but an existing record (another replica opened the same settlement) is kept.
_CREATE_NX_LUA = package_lua("tool_svc", "approval_create_nx")

_GET_LUA = package_lua("tool_svc", "approval_get")

_DECIDE_LUA = package_lua("tool_svc", "approval_decide")


@dataclass(frozen=True)
class ApprovalRecord:
    """An approval as stored, with its state as of now."""

    pending: Pending
    state: State
    caller: Caller
    request: CallRequest
    resolved_by: str = ""
    reason: str = ""
    resolve_time: float | None = None
    kind: Kind = "call"
    settlement: Settlement = ""
    """For a settlement: what the operator found."""

    def registration(self) -> tuple[ToolDef, bool]:
        """For a `register_tool` approval: the tool to store and whether it replaces one."""
        plan = json.loads(self.request.arguments_json)
        return ToolDef.from_json(plan["register_tool"]), bool(plan["replace"])


def is_requester(approver: Caller, requester: Caller) -> bool:
    """Whether the approver is (or acts as) the agent or person that asked."""
    mine = {approver.subject, approver.agent_id} - {""}
    theirs = {requester.subject, requester.agent_id} - {""}
    return bool(mine & theirs)


def check_duties(approval_id: str, approver: Caller, requester: Caller) -> None:
    """Separation of duties, enforced where the decision is applied: a task's call may not be decided
    by the subject that started the task (admins included) nor by any token of the task's agent; the
    dispatcher applies the same rule (dispatcher_svc.access.check_resolver) but is not the only way in."""
    if requester.creator and approver.subject == requester.creator:
        raise PermissionDeniedError(
            missing_permission="approver:not-task-creator",
            message=f"{approver.subject} started task {requester.task_id or '(unknown)'} and may not decide "
            f"approval {approval_id}: another operator must (separation of duties)",
        )
    if requester.task_id and approver.agent_id and approver.agent_id == requester.agent_id:
        raise PermissionDeniedError(
            missing_permission="approver:not-task-agent",
            message=f"agent {approver.agent_id} runs task {requester.task_id} and may not decide approval "
            f"{approval_id}",
        )


class ApprovalBook:
    """Approval records in Redis (`am:approval:{<id>}`)."""

    def __init__(self, store: Store, ttl_s: float, *, separate_duties: bool = True) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.separate_duties = separate_duties

    async def create(self, call: CallState) -> Pending:
        spec = call.spec
        return await self._create(spec.name, spec.impact, call.arguments_sha256, call.caller, call.request)

    async def create_registration(self, spec: ToolDef, *, replace: bool, caller: Caller, why: str) -> Pending:
        """A registration waiting for a second admin; the tool is stored only when one approves."""
        plan = {"register_tool": spec.to_json(), "replace": replace}
        # Not a tool name (NAME_RE has no ':'): a replica that predates this kind answers UNKNOWN_TOOL.
        request = CallRequest(
            call_id=f"register-{secrets.token_hex(8)}",
            name=f"register_tool:{spec.name}",
            arguments_json=json.dumps(plan, sort_keys=True, ensure_ascii=False),
            session_id="",
        )
        impact = f"registers the {spec.http_method} http tool {spec.name} ({spec.endpoint_url}): {why}"
        if spec.impact:
            impact += f"; the tool's impact: {spec.impact}"
        return await self._create(spec.name, impact, arguments_sha256(plan), caller, request, kind="register_tool")

    async def create_settlement(self, settlement_id: str, call: CallState, key: str) -> Pending:
        """Opens (or finds, when another replica opened it) the settlement of a call whose outcome is unknown."""
        impact = (
            f"{call.spec.name} may have run: its request left the gateway but its outcome is unknown "
            f"(idempotency key {key[:120]}). Check the upstream: settle RAN if the effect happened, NOT_RAN "
            f"to send it once more with the same key."
        )
        if call.spec.impact:
            impact += f" The tool's impact: {call.spec.impact}"
        return await self._create(
            call.spec.name,
            impact,
            call.arguments_sha256,
            call.caller,
            call.request,
            kind="settlement",
            approval_id=settlement_id,
        )

    async def _create(
        self,
        tool: str,
        impact: str,
        sha256: str,
        caller: Caller,
        request: CallRequest,
        *,
        kind: Kind = "call",
        approval_id: str = "",
    ) -> Pending:
        approval_id = approval_id or "apr_" + secrets.token_hex(16)
        record = {
            "tool": tool,
            "impact": impact,
            "arguments_sha256": sha256,
            "requested_by": caller.agent,
            "caller": caller.to_json(),
            "request": request.to_json(),
        }
        if kind != "call":
            record["kind"] = kind
        key = self.store.keys.approval(approval_id)
        async with self.store.guard("create approval"):
            create = (
                self.store.script("approval_create_nx", _CREATE_NX_LUA, durable=True)
                if kind == "settlement"
                else self.store.script("approval_create", _CREATE_LUA, durable=True)
            )
            expire_at = await create(keys=[key], args=[json.dumps(record), repr(self.ttl_s), RETENTION_S])
        return Pending(
            approval_id=approval_id,
            call_id=request.call_id,
            tool_name=tool,
            arguments_json=request.arguments_json,
            impact=impact,
            arguments_sha256=sha256,
            expire_at=float(expire_at),
            requested_by=caller.agent,
            kind=kind,
        )

    async def get(self, approval_id: str) -> ApprovalRecord:
        """The record; NotFoundError when unknown (or past its retention)."""
        key = self.store.keys.approval(approval_id)
        async with self.store.guard("get approval"):
            flat = await self.store.script("approval_get", _GET_LUA)(keys=[key])
        fields = {flat[i].decode(): flat[i + 1].decode() for i in range(0, len(flat), 2)}
        if "record" not in fields:
            raise NotFoundError(f"no approval {approval_id}", metadata={"approval_id": approval_id})
        data = json.loads(fields["record"])
        request = CallRequest.from_json(data["request"])
        expire_at = float(fields["expire_at"])
        stored = fields.get("state", "pending")
        state: State = stored if stored in ("pending", "approved", "denied", "expired") else "pending"
        if state == "pending" and float(fields["now"]) >= expire_at:
            state = "expired"
        return ApprovalRecord(
            pending=Pending(
                approval_id=approval_id,
                call_id=request.call_id,
                tool_name=data["tool"],
                arguments_json=request.arguments_json,
                impact=data.get("impact", ""),
                arguments_sha256=data["arguments_sha256"],
                expire_at=expire_at,
                requested_by=data.get("requested_by", ""),
                kind=_kind(data.get("kind")),
            ),
            state=state,
            caller=Caller.from_json(data["caller"]),
            request=request,
            resolved_by=fields.get("resolved_by", ""),
            reason=fields.get("reason", ""),
            resolve_time=float(fields["resolve_time"]) if fields.get("resolve_time") else None,
            kind=_kind(data.get("kind")),
            settlement=_settlement(fields.get("settlement", "")),
        )

    async def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        approver: Caller,
        reason: str,
        arguments_sha256: str,
        settlement: Settlement = "",
    ) -> tuple[ApprovalRecord, bool]:
        """Records the decision; (record after it, whether it expired instead).

        PermissionDeniedError when the approver is the requester (or, for a registration, not an admin);
        FailedPreconditionError when the hash differs from the binding or the approval was already decided;
        InvalidRequestError when a settlement is decided without RAN / NOT_RAN, or an approval with one.
        """
        record = await self.get(approval_id)
        if (record.kind == "settlement") != bool(settlement):
            raise InvalidRequestError(
                "settlement",
                f"approval {approval_id} is a settlement: say RAN or NOT_RAN"
                if record.kind == "settlement"
                else f"approval {approval_id} is not a settlement: approve or deny it",
            )
        if record.kind == "settlement":
            approve = True
        if is_requester(approver, record.caller):
            raise PermissionDeniedError(
                missing_permission="approver:other-than-requester",
                message=f"{approver.subject} requested approval {approval_id} and cannot approve or deny it",
            )
        if self.separate_duties:
            check_duties(approval_id, approver, record.caller)
        if record.kind == "register_tool" and "admin" not in approver.roles:
            raise PermissionDeniedError(
                missing_permission="role:admin",
                message=f"approval {approval_id} registers a tool: a second admin must decide it",
            )
        if arguments_sha256 != record.pending.arguments_sha256:
            raise FailedPreconditionError(
                f"approval {approval_id} is bound to arguments {record.pending.arguments_sha256[:12]}..., "
                f"not {arguments_sha256[:12] or '(empty)'}...: re-read the approval before deciding",
                metadata={"arguments_sha256": record.pending.arguments_sha256},
            )
        key = self.store.keys.approval(approval_id)
        async with self.store.guard("decide approval"):
            outcome, _ = await self.store.script("approval_decide", _DECIDE_LUA, durable=True)(
                keys=[key], args=["approved" if approve else "denied", approver.subject, reason[:1000], settlement]
            )
        status = outcome.decode()
        if status == "missing":
            raise NotFoundError(f"no approval {approval_id}", metadata={"approval_id": approval_id})
        if status in ("approved", "denied"):
            raise FailedPreconditionError(f"approval {approval_id} was already {status}", metadata={"state": status})
        return await self.get(approval_id), status == "expired"


class RequireApproval:
    """Pipeline step: a write that needs approval becomes a PendingApproval (it does not run)."""

    def __init__(self, book: ApprovalBook | None) -> None:
        self.book = book

    async def __call__(self, call: CallState) -> Outcome | None:
        if not call.spec.requires_approval or call.approved_id:
            return None
        if self.book is None:
            raise FailedPreconditionError("approvals need Redis")
        return await self.book.create(call)


def _kind(stored: Any) -> Kind:
    return "register_tool" if stored == "register_tool" else "settlement" if stored == "settlement" else "call"


def _settlement(stored: str) -> Settlement:
    return "ran" if stored == "ran" else "not_ran" if stored == "not_ran" else ""
