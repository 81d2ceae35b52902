"""Approvals that expire unresolved: the sweeper resumes the parked task once, with APPROVAL_EXPIRED.

docs/design.md §3: APPROVAL_EXPIRED is ENGINEERING, so the call fails, the model is told (a FALLBACK
event) and the task goes on; it never stays WAITING_APPROVAL. Real Redis, fake services; the fake
tool_svc below expires approvals the way tool_svc does (on its clock, when read or decided).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import ApprovalRecord, EventKind, PendingApproval, TaskEvent, TaskStatus, ToolOutcome
from dispatcher_svc.ports import CallOptions
from tests.unit.dispatcher.conftest import APPROVER, OPERATOR, MakeRig, Rig
from tests.unit.dispatcher.fakes import FakeTools, Prompt, call, reply

NO_SWEEPER = {"approval_sweep_interval_s": 3600}
SWEEPER = {"approval_sweep_interval_s": 0.05}


@dataclass
class ExpiringTools(FakeTools):
    """FakeTools whose approvals expire `ttl_ms` after they are requested, as tool_svc's do: a
    decision after that is refused as expired, and reading the approval reports it EXPIRED. An
    approved call's outcome is stored under its idempotency key, so a re-sent call replays it."""

    ttl_ms: int = 300
    read_delay_s: float = 0.0
    reads: list[str | None] = field(default_factory=list)
    """The identity token each GetApproval carried."""
    key_of: dict[str, str] = field(default_factory=dict)

    async def execute(
        self, call: ToolCall, *, session_id: str, idempotency_key: str, goal: str, opts: CallOptions
    ) -> ToolOutcome:
        outcome = await super().execute(
            call, session_id=session_id, idempotency_key=idempotency_key, goal=goal, opts=opts
        )
        if outcome.pending is None:
            return outcome
        pending = replace(outcome.pending, expire_time_ms=now_ms() + self.ttl_ms)
        self.approvals[pending.approval_id] = (pending, "PENDING")
        self.key_of[pending.approval_id] = idempotency_key
        return replace(outcome, pending=pending)

    def _current(self, approval_id: str) -> tuple[PendingApproval, str]:
        pending, state = self.approvals[approval_id]
        if state == "PENDING" and now_ms() >= pending.expire_time_ms:
            state = "EXPIRED"
            self.approvals[approval_id] = (pending, state)
        return pending, state

    async def resolve_approval(
        self,
        approval_id: str,
        approve: bool,
        reason: str,
        arguments_sha256: str,
        timeout_s: float,
        settlement: str = "",
    ) -> tuple[ApprovalRecord, ToolOutcome | None]:
        pending, state = self._current(approval_id)
        if state == "EXPIRED":
            err = AgentmeshError(ErrorCode.APPROVAL_EXPIRED, f"approval {approval_id} expired before anyone decided")
            return ApprovalRecord(pending, "EXPIRED"), ToolOutcome(pending.plan.id, pending.plan.name, error=err)
        approval, outcome = await super().resolve_approval(approval_id, approve, reason, arguments_sha256, timeout_s)
        if outcome is not None:
            self.keys[self.key_of[approval_id]] = outcome
        return approval, outcome

    async def get_approval(self, approval_id: str, timeout_s: float, opts: CallOptions | None = None) -> ApprovalRecord:
        self.reads.append(opts.identity_token if opts is not None else None)
        if self.read_delay_s:
            await asyncio.sleep(self.read_delay_s)
        pending, state = self._current(approval_id)
        return ApprovalRecord(pending, state)


def restart_policy(p: Prompt) -> Any:
    if not p.tool_messages():
        return reply(call("restart", {"svc": "payment-svc"}, "c1"))
    return reply(text=f"done: {p.last['content']}")


def tools(**kw: Any) -> ExpiringTools:
    return ExpiringTools({"restart": lambda c: "restarted"}, needs_approval={"restart"}, **kw)


async def _until(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def parked(rig: Rig, task_id: str) -> PendingApproval:
    """Waits until the task is WAITING_APPROVAL; its pending approval."""

    async def waiting() -> bool:
        return (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.WAITING_APPROVAL

    await _until(waiting)
    pending = (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).pending_approval
    assert pending is not None and pending.expire_time_ms > 0
    return pending


async def expired(rig: Rig, pending: PendingApproval) -> None:
    """Waits until Redis time has passed the approval's expiry."""

    async def past() -> bool:
        return await rig.dispatcher.tasks.redis_time_ms() > pending.expire_time_ms

    await _until(past)


def resolved_events(events: list[TaskEvent]) -> list[TaskEvent]:
    return [e for e in events if e.kind == EventKind.APPROVAL_RESOLVED]


def assert_ended_with_approval_expired(events: list[TaskEvent], fake: ExpiringTools) -> None:
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    (resolved,) = resolved_events(events)  # one transition, one event
    assert resolved.attributes["state"] == "EXPIRED"
    assert resolved.error is not None and resolved.error.code == ErrorCode.APPROVAL_EXPIRED
    assert "expired before anyone decided" in resolved.message
    fallback = [e for e in events if e.kind == EventKind.FALLBACK]
    assert len(fallback) == 1 and fallback[0].error is not None
    assert fallback[0].error.code == ErrorCode.APPROVAL_EXPIRED  # ENGINEERING: the model is told
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert fake.runs["restart"] == 0  # the write never ran


async def waiting_index(rig: Rig) -> int:
    return int(await rig.store.redis.zcard(rig.dispatcher.tasks.waiting_key))


async def test_an_expired_approval_resumes_the_task_with_approval_expired(make_rig: MakeRig) -> None:
    fake = tools()
    rig = await make_rig(restart_policy, fake, dispatcher=SWEEPER)
    task_id = await rig.start()
    events = await rig.events(task_id)  # ends: the sweeper moved the task on, nobody resolved it
    assert_ended_with_approval_expired(events, fake)
    required = [e for e in events if e.kind == EventKind.APPROVAL_REQUIRED]
    assert len(required) == 1 and required[0].pending_approval is not None
    pending = required[0].pending_approval
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED and task.pending_approval is None
    assert "APPROVAL_EXPIRED" in task.answer  # what the model was shown
    assert await waiting_index(rig) == 0
    # tool_svc was asked (it is authoritative), as the agent that requested the approval.
    assert fake.reads and fake.reads[-1] is not None
    identity = rig.dispatcher.authenticator.verify(fake.reads[-1])
    assert (identity.agent_id, identity.task_id) == ("ops", task_id)
    # Too late now: the task no longer waits.
    with pytest.raises(AgentmeshError) as caught:
        await rig.dispatcher.resolve_approval(
            task_id, pending.approval_id, approve=True, reason="", arguments_sha256="", caller=APPROVER
        )
    assert caught.value.code == ErrorCode.FAILED_PRECONDITION
    assert fake.runs["restart"] == 0


@pytest.mark.parametrize("how", ["expire_approval", "sweep_approvals"])
async def test_two_sweepers_racing_make_one_transition(make_rig: MakeRig, how: str) -> None:
    fake = tools(read_delay_s=0.05)  # both read the parked task before either writes
    a = await make_rig(restart_policy, fake, dispatcher=NO_SWEEPER)
    b = await make_rig(restart_policy, fake, dispatcher=NO_SWEEPER, context=a.context)
    task_id = await a.start()
    pending = await parked(a, task_id)
    await expired(a, pending)
    if how == "expire_approval":  # the compare-and-set on the parked status decides
        results = await asyncio.gather(
            *(r.dispatcher.expire_approval(task_id, pending.approval_id) for r in (a, b, a, b))
        )
        assert sorted(results) == [False, False, False, True]
    else:  # whole passes: the due entry is taken by one of them
        moved = await asyncio.gather(*(r.dispatcher.sweep_approvals() for r in (a, b, a, b)))
        assert sum(moved) == 1
    events = await a.events(task_id)
    assert_ended_with_approval_expired(events, fake)
    assert await waiting_index(a) == 0


async def test_resolve_after_expiry_is_refused_with_approval_expired(make_rig: MakeRig) -> None:
    fake = tools()
    rig = await make_rig(restart_policy, fake, dispatcher=NO_SWEEPER)
    task_id = await rig.start()
    pending = await parked(rig, task_id)
    await expired(rig, pending)
    with pytest.raises(AgentmeshError) as caught:
        await rig.dispatcher.resolve_approval(
            task_id,
            pending.approval_id,
            approve=True,
            reason="ok",
            arguments_sha256=pending.arguments_sha256,
            caller=APPROVER,
        )
    assert caught.value.code == ErrorCode.APPROVAL_EXPIRED
    assert caught.value.metadata["approval_id"] == pending.approval_id
    # The refusal did not strand the task either: it went on without the call.
    events = await rig.events(task_id)
    assert_ended_with_approval_expired(events, fake)
    assert await waiting_index(rig) == 0


async def test_resolve_racing_the_sweeper_has_one_winner(make_rig: MakeRig) -> None:
    fake = tools(read_delay_s=0.02)
    rig = await make_rig(restart_policy, fake, dispatcher=NO_SWEEPER)
    task_id = await rig.start()
    pending = await parked(rig, task_id)
    await expired(rig, pending)
    resolve = rig.dispatcher.resolve_approval(
        task_id,
        pending.approval_id,
        approve=True,
        reason="",
        arguments_sha256=pending.arguments_sha256,
        caller=APPROVER,
    )
    sweep = rig.dispatcher.expire_approval(task_id, pending.approval_id)
    resolved, swept = await asyncio.gather(resolve, sweep, return_exceptions=True)
    # Whoever moved the task, the late decision is refused with the typed error.
    assert isinstance(resolved, AgentmeshError) and resolved.code == ErrorCode.APPROVAL_EXPIRED
    assert swept in (True, False)
    events = await rig.events(task_id)
    assert_ended_with_approval_expired(events, fake)


async def test_a_decision_that_reached_tool_svc_is_applied_not_expired(make_rig: MakeRig) -> None:
    """ResolveApproval died after tool_svc approved and ran the call, before the task was resumed:
    once the expiry passes, the sweeper finds the decision at tool_svc and resumes with it."""
    fake = tools(ttl_ms=1500)  # time to decide at the fake tool_svc before it expires
    rig = await make_rig(restart_policy, fake, dispatcher=SWEEPER)
    task_id = await rig.start()
    pending = await parked(rig, task_id)
    await fake.resolve_approval(pending.approval_id, True, "ok", pending.arguments_sha256, 5)
    events = await rig.events(task_id)
    (resolved,) = resolved_events(events)
    assert resolved.attributes["state"] == "APPROVED" and resolved.error is None
    assert not [e for e in events if e.kind == EventKind.FALLBACK]
    assert fake.runs["restart"] == 1  # replayed by its idempotency key, not run again
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED and task.answer == "done: restarted"


async def test_an_approval_not_yet_expired_is_left_alone(make_rig: MakeRig) -> None:
    fake = tools(ttl_ms=60_000)
    rig = await make_rig(restart_policy, fake, dispatcher=NO_SWEEPER)
    task_id = await rig.start()
    pending = await parked(rig, task_id)
    assert not await rig.dispatcher.expire_approval(task_id, pending.approval_id)
    assert await rig.dispatcher.sweep_approvals() == 0
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status == TaskStatus.WAITING_APPROVAL
    assert fake.reads == []  # not due: tool_svc is not even asked
    assert await waiting_index(rig) == 1
    # Cancelling a parked task takes it out of the sweeper's index.
    await rig.dispatcher.cancel(task_id, "not needed", caller=OPERATOR)
    assert await waiting_index(rig) == 0


async def test_the_sweeper_survives_an_unexpected_error(make_rig: MakeRig) -> None:
    fake = tools()
    rig = await make_rig(restart_policy, fake, dispatcher=SWEEPER)
    store = rig.dispatcher.tasks
    real_due = store.due_approvals
    failures = 0

    async def flaky_due(limit: int, hold_ms: int) -> list[tuple[str, str]]:
        nonlocal failures
        if failures < 2:
            failures += 1
            raise RuntimeError("something nobody expected")
        return await real_due(limit, hold_ms)

    store.due_approvals = flaky_due  # type: ignore[method-assign]
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert failures == 2
    assert_ended_with_approval_expired(events, fake)
