"""OUTCOME_UNKNOWN in the dispatcher (issue 18): never shown to the model as a failed call; the task waits
for a settlement (RAN / NOT_RAN) and resumes with it, or fails OUTCOME_UNKNOWN when nobody settles it.
Real Redis, fake services: the fake tool_svc below answers a write the way tool_svc does when its
request may have reached the upstream without a known outcome."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode, FailedPreconditionError
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import ApprovalRecord, EventKind, PendingApproval, TaskStatus, ToolOutcome, ToolOutput
from dispatcher_svc.ports import CallOptions
from tests.unit.dispatcher.conftest import APPROVER, OPERATOR, MakeRig
from tests.unit.dispatcher.fakes import FakeTools, Prompt, call, reply
from tests.unit.dispatcher.test_approval_expiry import SWEEPER, _until, parked

NO_SWEEPER = {"approval_sweep_interval_s": 3600}


@dataclass
class UnknownTools(FakeTools):
    """`charge`'s first send ends with an unknown outcome (its effect happened, or not: `effect`)."""

    effect: bool = True
    ttl_ms: int = 60_000
    effects: int = 0
    sends: int = 0
    """ExecuteTool requests for `charge` (replays and repeats included)."""
    settlements: dict[str, tuple[PendingApproval, str, str]] = field(default_factory=dict)

    async def execute(
        self, call: ToolCall, *, session_id: str, idempotency_key: str, goal: str, opts: CallOptions
    ) -> ToolOutcome:
        if call.name != "charge":
            return await super().execute(
                call, session_id=session_id, idempotency_key=idempotency_key, goal=goal, opts=opts
            )
        self.sends += 1
        if idempotency_key in self.keys:
            return self.keys[idempotency_key]
        open_ = [p for p, state, key in self.settlements.values() if key == idempotency_key and state == "PENDING"]
        if open_ and now_ms() < open_[-1].expire_time_ms:
            # A repeat while its settlement is open: tool_svc names that one (idempotency._unknown).
            return self._unknown(call, open_[-1])
        sid = f"stl_{len(self.settlements)}"
        if not self.settlements:
            self.effects += 1 if self.effect else 0
        pending = PendingApproval(
            sid, call, "may have run", call.arguments_sha256(), now_ms() + self.ttl_ms, kind="settlement"
        )
        self.settlements[sid] = (pending, "PENDING", idempotency_key)
        return self._unknown(call, pending)

    def _unknown(self, call: ToolCall, pending: PendingApproval) -> ToolOutcome:
        sid = pending.approval_id
        err = AgentmeshError(
            ErrorCode.OUTCOME_UNKNOWN,
            "charge may have reached its upstream; its outcome is unknown",
            metadata={
                "settlement_id": sid,
                "arguments_sha256": call.arguments_sha256(),
                "expire_at": f"{pending.expire_time_ms / 1000:.3f}",
            },
        )
        return ToolOutcome(call.id, call.name, error=err)

    async def resolve_approval(
        self,
        approval_id: str,
        approve: bool,
        reason: str,
        arguments_sha256: str,
        timeout_s: float,
        settlement: str = "",
    ) -> tuple[ApprovalRecord, ToolOutcome | None]:
        pending, state, key = self.settlements[approval_id]
        if state != "PENDING":
            raise FailedPreconditionError(f"settlement {approval_id} is {state}")
        if now_ms() >= pending.expire_time_ms:
            self.settlements[approval_id] = (pending, "EXPIRED", key)
            raise AgentmeshError(ErrorCode.APPROVAL_EXPIRED, "expired")
        self.settlements[approval_id] = (pending, "APPROVED", key)
        plan = pending.plan
        if settlement == "ran":
            output = ToolOutput(inline=json.dumps({"settled": "ran", "output": None}), result_type="structured")
        else:
            self.effects += 1
            output = ToolOutput(inline='{"charged": true}', result_type="structured")
        outcome = ToolOutcome(plan.id, plan.name, output=output)
        self.keys[key] = outcome
        return ApprovalRecord(pending, "APPROVED", "alice", reason, settlement=settlement), outcome

    async def get_approval(self, approval_id: str, timeout_s: float, opts: CallOptions | None = None) -> ApprovalRecord:
        pending, state, _ = self.settlements[approval_id]
        if state == "PENDING" and now_ms() >= pending.expire_time_ms:
            state = "EXPIRED"
        return ApprovalRecord(pending, state)


def charge_policy(p: Prompt) -> Any:
    if not p.tool_messages():
        return reply(call("charge", {"order": "ORD-1"}, "c1"))
    return reply(text=f"done: {p.last['content']}")


@pytest.mark.parametrize("finding", ["ran", "not_ran"])
async def test_an_unknown_outcome_waits_for_its_settlement(make_rig: MakeRig, finding: str) -> None:
    fake = UnknownTools({"charge": lambda c: "unused"}, effect=finding == "ran")
    rig = await make_rig(charge_policy, fake, dispatcher=NO_SWEEPER)
    task_id = await rig.start()
    pending = await parked(rig, task_id)
    assert pending.is_settlement and pending.plan.name == "charge"
    # The model never saw the unknown outcome as a failed call: no tool result in the session yet.
    assert [m["role"] for m in rig.context.sessions[task_id]] == ["user", "assistant"]
    with pytest.raises(AgentmeshError) as no_finding:
        await rig.dispatcher.resolve_approval(
            task_id,
            pending.approval_id,
            approve=True,
            reason="",
            arguments_sha256=pending.arguments_sha256,
            caller=APPROVER,
        )
    assert no_finding.value.code == ErrorCode.INVALID_REQUEST
    approval, _ = await rig.dispatcher.resolve_approval(
        task_id,
        pending.approval_id,
        approve=False,  # ignored for a settlement
        reason="checked the ledger",
        arguments_sha256=pending.arguments_sha256,
        caller=APPROVER,
        settlement=finding,
    )
    assert approval.settlement == finding
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert fake.effects == 1  # exactly once, whichever way it went
    (resolved,) = [e for e in events if e.kind == EventKind.APPROVAL_RESOLVED]
    assert resolved.attributes["settlement"] == finding and "settlement" in resolved.message
    assert not [e for e in events if e.kind == EventKind.FALLBACK]
    answer = (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).answer
    assert ('"settled": "ran"' in answer) if finding == "ran" else ('"charged": true' in answer)


async def test_an_approval_is_not_settled(make_rig: MakeRig) -> None:
    fake = FakeTools({"restart": lambda c: "restarted"}, needs_approval={"restart"})
    rig = await make_rig(
        lambda p: reply(call("restart", {}, "c1")) if not p.tool_messages() else reply(text="ok"), fake
    )
    task_id = await rig.start()

    async def waiting() -> bool:
        return (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.WAITING_APPROVAL

    await _until(waiting)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.pending_approval is not None and not task.pending_approval.is_settlement
    with pytest.raises(AgentmeshError) as caught:
        await rig.dispatcher.resolve_approval(
            task_id,
            task.pending_approval.approval_id,
            approve=True,
            reason="",
            arguments_sha256=task.pending_approval.arguments_sha256,
            caller=APPROVER,
            settlement="ran",
        )
    assert caught.value.code == ErrorCode.INVALID_REQUEST
    assert fake.runs["restart"] == 0


async def test_a_settlement_nobody_decides_fails_the_task_and_re_sends_nothing(make_rig: MakeRig) -> None:
    fake = UnknownTools({"charge": lambda c: "unused"}, ttl_ms=200)
    rig = await make_rig(charge_policy, fake, dispatcher=SWEEPER)
    task_id = await rig.start()
    events = await rig.events(task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.FAILED, events
    assert task.error is not None and task.error.code == ErrorCode.OUTCOME_UNKNOWN
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [e.status for e in events if e.kind == EventKind.STATUS][-1] == TaskStatus.FAILED
    assert fake.effects == 1 and len(fake.settlements) == 1  # never re-sent
    assert task.pending_approval is None
