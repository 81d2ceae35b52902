"""Conversations that continue, in the domain (dispatcher_svc/continuation.py, service.py): a task on
an existing session, one task at a time, and the races a resumed FAILED turn could lose to a new turn.
The in-memory context keeps AttachTask's compare-and-set; the task store is the real one on Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError
from dispatcher_svc.model import TaskStatus
from dispatcher_svc.ports import Attachment, CallOptions
from tests.unit.dispatcher.conftest import OPERATOR, MakeRig, Rig
from tests.unit.dispatcher.fakes import FakeContext, reply


async def wait_status(rig: Rig, task_id: str, *statuses: TaskStatus, timeout_s: float = 10.0) -> TaskStatus:
    async def poll() -> TaskStatus:
        while True:
            status = (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).status
            if status in statuses:
                return status
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), timeout_s)


async def failed_turn(rig: Rig, task_id: str = "turn-1") -> str:
    """A first turn that FAILED (its model unreachable), resumable."""
    rig.provider.rpc_failures = [UnavailableError("provider down")] * 3  # service_retry_attempts
    await rig.start("first question", task_id=task_id)
    await wait_status(rig, task_id, TaskStatus.FAILED)
    return task_id


async def test_a_new_turn_sees_the_session_and_starts_from_it(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text=f"answer {p.call_index}"), context=FakeContext())
    await rig.start("first question", task_id="turn-1")
    await wait_status(rig, "turn-1", TaskStatus.SUCCEEDED)
    await rig.start("second question", task_id="turn-2", session_id="turn-1")
    await wait_status(rig, "turn-2", TaskStatus.SUCCEEDED)
    prompt = rig.provider.prompts[-1]
    assert [m["content"] for m in prompt.messages[1:]] == ["first question", "answer 0", "second question"]
    task = await rig.dispatcher.get_task("turn-2", caller=OPERATOR)
    assert task.session_id == "turn-1"
    assert rig.context.calls["create_session"] == 1  # the second turn created nothing
    assert rig.context.newest["turn-1"][0] == "turn-2"


async def test_a_running_turn_refuses_a_second_and_a_starting_one_too(make_rig: MakeRig) -> None:
    context = FakeContext()
    rig = await make_rig(lambda p: reply(text="slow"), context=context)
    rig.provider.delay_s = 0.5
    await rig.start("first", task_id="turn-1")
    with pytest.raises(AgentmeshError) as busy:
        await rig.start("second", task_id="turn-2", session_id="turn-1")
    assert busy.value.code == ErrorCode.FAILED_PRECONDITION
    assert busy.value.metadata["task_id"] == "turn-1" and busy.value.metadata["status"] in ("PENDING", "RUNNING")
    await wait_status(rig, "turn-1", TaskStatus.SUCCEEDED)

    # A newest task that does not exist yet, attached a moment ago: its StartTask may still create it.
    context.newest["turn-1"] = ("turn-ghost", 7)
    context.attach_age_s = 1.0
    with pytest.raises(AgentmeshError) as starting:
        await rig.start("third", task_id="turn-3", session_id="turn-1")
    assert starting.value.metadata["status"] == "STARTING"
    # Long after (call_timeout_s), it was never created: the session goes on.
    context.attach_age_s = 3600.0
    await rig.start("third", task_id="turn-3", session_id="turn-1")
    await wait_status(rig, "turn-3", TaskStatus.SUCCEEDED)


async def test_a_retried_start_of_a_continued_turn_is_the_same_task(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="ok"), context=FakeContext())
    await rig.start("first", task_id="turn-1")
    await wait_status(rig, "turn-1", TaskStatus.SUCCEEDED)
    for _ in range(2):
        assert await rig.start("second", task_id="turn-2", session_id="turn-1") == "turn-2"
    await wait_status(rig, "turn-2", TaskStatus.SUCCEEDED)
    assert await rig.start("second", task_id="turn-2", session_id="turn-1") == "turn-2"  # ended: answered
    assert await rig.start("second", task_id="turn-2") == "turn-2"  # no session named: its own
    with pytest.raises(AgentmeshError) as other:
        await rig.start("second", task_id="turn-2", session_id="elsewhere")
    assert other.value.code == ErrorCode.FAILED_PRECONDITION and "another agent, goal or session" in str(other.value)
    assert [m["content"] for m in rig.context.sessions["turn-1"]].count("second") == 1


async def test_the_new_turn_wins_when_it_sets_first_and_the_resume_is_undone(make_rig: MakeRig) -> None:
    """The resume commits FAILED -> PENDING; before it confirms, a new turn (which read FAILED)
    sets the session's newest task: the confirm fails and the resumed turn is FAILED again, unrun."""
    context = _Interleaved()
    rig = await make_rig(lambda p: reply(text="second answered"), context=context)
    await failed_turn(rig)
    error = (await rig.dispatcher.get_task("turn-1", caller=OPERATOR)).error
    calls_before = rig.provider.calls

    resume: asyncio.Task[Any] | None = None

    async def before_set(session_id: str, task_id: str, **_: Any) -> None:
        nonlocal resume
        if task_id == "turn-2":  # the new turn read turn-1 FAILED and is about to set: resume now
            resume = asyncio.ensure_future(rig.start("first question", task_id="turn-1"))
            await context.confirm_entered.wait()  # the resume committed PENDING and waits to confirm
        elif task_id == "turn-1":
            context.confirm_entered.set()
            await context.new_turn_set.wait()

    context.before = before_set
    context.after = lambda task_id: context.new_turn_set.set() if task_id == "turn-2" else None
    await rig.start("second question", task_id="turn-2", session_id="turn-1")
    assert resume is not None
    with pytest.raises(AgentmeshError) as undone:
        await resume
    assert undone.value.code == ErrorCode.FAILED_PRECONDITION and "continued with task turn-2" in str(undone.value)
    await wait_status(rig, "turn-2", TaskStatus.SUCCEEDED)
    first = await rig.dispatcher.get_task("turn-1", caller=OPERATOR)
    assert first.status == TaskStatus.FAILED and first.error is not None and error is not None
    assert (first.error.code, first.error.message) == (error.code, error.message)  # its own, as before
    events = await rig.events("turn-1")
    assert [e.status for e in events[-2:]] == [TaskStatus.PENDING, TaskStatus.FAILED]
    assert "not resumed" in events[-1].message
    assert rig.provider.calls == calls_before + 1  # the new turn's only: turn-1 never ran again


async def test_the_resume_wins_when_it_confirms_first_and_the_new_turn_is_refused(make_rig: MakeRig) -> None:
    """The new turn read turn-1 FAILED; the resume commits and confirms (the generation moves) before
    the new turn sets: its compare-and-set fails, it reads turn-1 again (PENDING/RUNNING) and is refused."""
    context = _Interleaved()
    rig = await make_rig(lambda p: reply(text="first answered at last"), context=context)
    await failed_turn(rig)
    rig.provider.delay_s = 0.3

    async def before_set(session_id: str, task_id: str, **_: Any) -> None:
        if task_id == "turn-2" and not context.resumed:
            context.resumed = True
            await rig.start("first question", task_id="turn-1")  # commit, confirm, queue: all of it

    context.before = before_set
    with pytest.raises(AgentmeshError) as refused:
        await rig.start("second question", task_id="turn-2", session_id="turn-1")
    assert refused.value.code == ErrorCode.FAILED_PRECONDITION and refused.value.metadata["task_id"] == "turn-1"
    await wait_status(rig, "turn-1", TaskStatus.SUCCEEDED)
    assert context.newest["turn-1"][0] == "turn-1"
    with pytest.raises(AgentmeshError):
        await rig.dispatcher.get_task("turn-2", caller=OPERATOR)  # never created


async def test_a_resume_whose_confirm_fails_is_undone(make_rig: MakeRig) -> None:
    context = FakeContext()
    rig = await make_rig(lambda p: reply(text="ok"), context=context)
    await failed_turn(rig)
    context.fail_next = [UnavailableError("context_svc down")]
    with pytest.raises(AgentmeshError) as down:
        await rig.start("first question", task_id="turn-1")
    assert down.value.code == ErrorCode.UNAVAILABLE
    assert (await rig.dispatcher.get_task("turn-1", caller=OPERATOR)).status == TaskStatus.FAILED
    # Once context_svc is back, the resume goes through.
    await rig.start("first question", task_id="turn-1")
    await wait_status(rig, "turn-1", TaskStatus.SUCCEEDED)


class _Interleaved(FakeContext):
    """A FakeContext whose AttachTask calls hand control to the test at set points."""

    def __init__(self) -> None:
        super().__init__()
        self.before: Any = None
        self.after: Any = None
        self.confirm_entered = asyncio.Event()
        self.new_turn_set = asyncio.Event()
        self.resumed = False

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
        # The new turn's first call only reads (no expectation); its second one sets.
        sets = bool(expected_task_id) or task_id == "turn-1"
        if sets and self.before is not None:
            await self.before(session_id, task_id)
        result = await super().attach_task(
            session_id,
            task_id,
            agent_id,
            opts,
            expected_task_id=expected_task_id,
            expected_generation=expected_generation,
        )
        if result.attached and self.after is not None:
            self.after(task_id)
        return result
