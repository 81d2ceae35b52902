"""A task failed while it was parked, then resumed (chaos-1-6-170): its run must not hang RUNNING.

`make chaos` (seed 1) found it: a resumed task was taken by a stray queue entry and parked on a
settlement before the resume's confirm with context_svc failed; the undo (Conversations.fail_again)
wrote FAILED over WAITING_APPROVAL; the next resume's run found the call WAITING and ended without a
write, leaving the task RUNNING for good. A settlement that expires unsettled leaves the same cursor.
The resumed run now sends the call again with its key (decisions.taken_up): tool_svc answers the same
settlement (or a new one), the task parks again, fenced, and nothing runs twice.
Real Redis, fake services (test_settlement.UnknownTools answers as tool_svc's idempotency does)."""

from __future__ import annotations

from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError
from dispatcher_svc.model import EventKind, TaskStatus
from dispatcher_svc.ports import Attachment, CallOptions
from tests.unit.dispatcher.conftest import APPROVER, OPERATOR, MakeRig, Rig
from tests.unit.dispatcher.fakes import FakeContext
from tests.unit.dispatcher.test_approval_expiry import SWEEPER, parked
from tests.unit.dispatcher.test_continuation import failed_turn, wait_status
from tests.unit.dispatcher.test_settlement import NO_SWEEPER, UnknownTools, charge_policy

GOAL = "first question"


class ConfirmFailsAfter(FakeContext):
    """AttachTask runs `before` (once) and then fails, as context_svc killed mid-confirm does."""

    def __init__(self) -> None:
        super().__init__()
        self.before: Any = None

    async def attach_task(
        self,
        session_id: str,
        task_id: str,
        agent_id: str,
        opts: CallOptions,
        *,
        expected_task_id: str = "",
        expected_generation: int = 0,
    ) -> Attachment:
        if self.before is not None:
            before, self.before = self.before, None
            await before()
            raise UnavailableError("context_svc went away")
        return await super().attach_task(
            session_id,
            task_id,
            agent_id,
            opts,
            expected_task_id=expected_task_id,
            expected_generation=expected_generation,
        )


async def settle_ran(rig: Rig, task_id: str, approval_id: str, sha: str) -> None:
    await rig.dispatcher.resolve_approval(
        task_id, approval_id, approve=False, reason="ledger", arguments_sha256=sha, caller=APPROVER, settlement="ran"
    )


async def test_a_resume_undone_over_a_parked_task_then_resumed_parks_again(make_rig: MakeRig) -> None:
    context = ConfirmFailsAfter()
    fake = UnknownTools({"charge": lambda c: "unused"})
    rig = await make_rig(charge_policy, fake, context=context, dispatcher=NO_SWEEPER)
    task_id = await failed_turn(rig)

    async def stray_entry_runs_and_parks() -> None:
        # The resume committed PENDING; a stray queue entry (a killed replica's) runs it to the settlement.
        await rig.dispatcher.queue.enqueue(task_id)
        await parked(rig, task_id)

    context.before = stray_entry_runs_and_parks
    with pytest.raises(AgentmeshError) as down:
        await rig.start(GOAL, task_id=task_id)
    assert down.value.code == ErrorCode.UNAVAILABLE
    undone = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert undone.status == TaskStatus.FAILED and undone.pending_approval is None  # not left pointing at it
    assert (fake.effects, fake.sends, len(fake.settlements)) == (1, 1, 1)

    # Resumed again: the run sends the call again with its key and parks on the same settlement.
    await rig.start(GOAL, task_id=task_id)
    pending = await parked(rig, task_id)
    assert pending.approval_id == "stl_0" and pending.is_settlement
    assert (fake.effects, fake.sends, len(fake.settlements)) == (1, 2, 1)
    assert not [m for m in rig.context.sessions[task_id] if m["role"] == "tool"]  # nothing shown to the model

    await settle_ran(rig, task_id, pending.approval_id, pending.arguments_sha256)
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED, events[-1]
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert fake.effects == 1  # exactly once
    assert len([e for e in events if e.kind == EventKind.TOOL_CALL]) == 1  # issued once, re-asked by its key
    assert len([e for e in events if e.kind == EventKind.TOOL_RESULT]) == 1
    assert len([m for m in rig.context.sessions[task_id] if m["role"] == "tool"]) == 1
    statuses = [e.status for e in events if e.kind == EventKind.STATUS]
    assert statuses.count(TaskStatus.WAITING_APPROVAL) == 2  # parked, undone, parked again: each once


async def test_a_task_failed_unsettled_and_resumed_waits_for_a_new_settlement(make_rig: MakeRig) -> None:
    """settling.settlement_expired promises it: a resumed task re-sends the key and gets a new settlement."""
    fake = UnknownTools({"charge": lambda c: "unused"}, ttl_ms=200)
    rig = await make_rig(charge_policy, fake, dispatcher=SWEEPER)
    task_id = await rig.start()
    await wait_status(rig, task_id, TaskStatus.FAILED)
    failed = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert failed.error is not None and failed.error.code == ErrorCode.OUTCOME_UNKNOWN
    fake.ttl_ms = 60_000

    await rig.start(task_id=task_id)
    pending = await parked(rig, task_id)
    assert pending.approval_id == "stl_1"  # the expired one is not waited for again
    assert (fake.effects, fake.sends, len(fake.settlements)) == (1, 2, 2)
    await settle_ran(rig, task_id, pending.approval_id, pending.arguments_sha256)
    assert await wait_status(rig, task_id, TaskStatus.SUCCEEDED) == TaskStatus.SUCCEEDED
    assert fake.effects == 1
