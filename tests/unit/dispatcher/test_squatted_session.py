"""A task id whose session someone else made is refused at StartTask, typed (issue 39).

Any agent token could CreateSession(session_id=X); a later StartTask(task_id=X) was accepted and its
run then met that session (another owner, other global state) and FAILED. Now StartTask answers
FAILED_PRECONDITION naming the field task_id, and creates nothing; other ids, retries and resumes of
an existing task, and random ids are unaffected."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentmesh.errors import ErrorCode, FailedPreconditionError, PermissionDeniedError
from dispatcher_svc.model import TaskStatus
from dispatcher_svc.ports import CallOptions, SessionInfo, SessionSpec
from tests.unit.dispatcher.conftest import MakeRig
from tests.unit.dispatcher.fakes import FakeContext, reply


@dataclass
class OwnedSessions(FakeContext):
    """Sessions another caller made are PERMISSION_DENIED to this one, as context_svc answers."""

    foreign: frozenset[str] = frozenset()

    async def get_session(self, session_id: str, opts: CallOptions) -> SessionInfo:
        if session_id in self.foreign:
            raise PermissionDeniedError(f"session:{session_id}", "not your session")
        return await super().get_session(session_id, opts)


async def test_a_task_id_naming_a_foreign_session_is_refused(make_rig: MakeRig) -> None:
    context = OwnedSessions(foreign=frozenset({"deploy-42"}))
    rig = await make_rig(lambda p: reply(text="done"), context=context)
    squat = SessionSpec(session_id="deploy-42", agent_id="ops", goal="squat", system_prompt="")
    await context.create_session(squat, CallOptions("", "r0", 1.0))  # the squatter's CreateSession

    with pytest.raises(FailedPreconditionError) as info:
        await rig.start("deploy the fix", task_id="deploy-42")
    assert info.value.code == ErrorCode.FAILED_PRECONDITION
    assert info.value.metadata["field"] == "task_id" and info.value.violations[0].path == "task_id"
    assert not await rig.dispatcher.tasks.exists("deploy-42")

    # Another id runs; so does a random one.
    task_id = await rig.start("deploy the fix", task_id="deploy-43")
    assert (await rig.events(task_id))[-1].status == TaskStatus.SUCCEEDED
    assert (await rig.events(await rig.start("deploy the fix")))[-1].status == TaskStatus.SUCCEEDED


async def test_a_session_the_caller_can_read_is_refused_too_but_a_retry_of_the_task_is_not(make_rig: MakeRig) -> None:
    context = FakeContext()
    rig = await make_rig(lambda p: reply(text="done"), context=context)
    await context.create_session(
        SessionSpec(session_id="mine", agent_id="ops", goal="x", system_prompt=""), CallOptions("", "r0", 1.0)
    )
    with pytest.raises(FailedPreconditionError):
        await rig.start("deploy the fix", task_id="mine")
    # A task's own session exists once it ran: a retry of its StartTask answers the task.
    task_id = await rig.start("deploy the fix", task_id="t-own")
    assert (await rig.events(task_id))[-1].status == TaskStatus.SUCCEEDED
    again = await rig.start("deploy the fix", task_id="t-own")
    assert again == task_id
