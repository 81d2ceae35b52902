"""A step's context rides on the append before it (issue 45): the goal's append brings step 1's, the
reply's last tool result the next step's; BuildContext is called only without such a view."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentmesh.chat import ToolCall
from dispatcher_svc.model import EventKind, ModelReply, TaskStatus
from dispatcher_svc.ports import SessionSpec
from dispatcher_svc.run.loop import RunResult
from dispatcher_svc.tasks import CommitResult, TaskRecord
from tests.unit.dispatcher.conftest import MakeRig
from tests.unit.dispatcher.fakes import FakeContext, FakeTools, Prompt, call, reply


def calculator(c: ToolCall) -> str:
    args = json.loads(c.arguments_json)
    return str(args["a"] + args["b"])


def two_calls_then_answer(p: Prompt) -> ModelReply:
    if not p.tool_messages():
        return reply(call("calc", {"a": 2, "b": 3}), call("calc", {"a": 4, "b": 5}))
    return reply(text="results: " + ", ".join(m["content"] for m in p.tool_messages()))


async def test_each_step_takes_the_context_its_last_append_brought(make_rig: MakeRig) -> None:
    rig = await make_rig(two_calls_then_answer, FakeTools({"calc": calculator}))
    task_id = await rig.start("add twice", task_id="t-views")
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert rig.context.calls["build_context"] == 0
    # The goal's append (step 1) and the second result's (step 2); not the reply's, nor the first result's.
    assert rig.context.calls["view_on_append"] == 2
    # The model saw the goal, then the goal, its reply and both results: the views were current.
    assert [m["role"] for m in rig.provider.prompts[0].messages] == ["system", "user"]
    assert [m["role"] for m in rig.provider.prompts[1].messages] == ["system", "user", "assistant", "tool", "tool"]


async def test_without_a_view_the_step_builds_its_context(make_rig: MakeRig) -> None:
    """A context_svc of an earlier release ignores the request for a view: BuildContext, as before."""
    rig = await make_rig(
        two_calls_then_answer, FakeTools({"calc": calculator}), context=FakeContext(views_on_append=False)
    )
    task_id = await rig.start("add twice", task_id="t-no-views")
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert rig.context.calls["build_context"] == 2
    assert [m["role"] for m in rig.provider.prompts[1].messages] == ["system", "user", "assistant", "tool", "tool"]


async def test_a_view_is_dropped_once_another_append_follows_it(make_rig: MakeRig) -> None:
    """Only the last append's view is used: one followed by another append is stale, so the step
    builds its context."""
    rig = await make_rig(lambda p: reply(text="done"), start=False)
    task_id = await rig.start(task_id="t-stale-view")
    record = await rig.dispatcher.worker.acquire(task_id, claimed=False)
    assert isinstance(record, TaskRecord)
    run = rig.dispatcher.loop.start(record, None)
    down = run.downstream
    session = record.session_id
    rig.context.sessions[session] = []
    rig.context.specs[session] = SessionSpec(session_id=session, agent_id="ops", goal="g", system_prompt="s")
    await down.append_once(
        "AppendMessage(a)",
        lambda o: down.ports.context.append_message(session, "user", "a", (), o, build_tokens=0),
    )
    assert run.state.next_view is not None
    await down.append_once("AppendMessage(b)", lambda o: down.ports.context.append_message(session, "user", "b", (), o))
    assert run.state.next_view is None


async def test_a_takeover_before_generate_still_stops_the_run_when_the_view_came_with_the_append(
    make_rig: MakeRig,
) -> None:
    """The fence guards Generate as before: the step-start checkpoint is settled before it, so an owner
    that lost the task meanwhile stops there (STALE) without asking the model."""
    rig = await make_rig(lambda p: reply(text="must not be asked"), start=False)
    task_id = await rig.start(task_id="t-taken-view")
    record = await rig.dispatcher.worker.acquire(task_id, claimed=False)
    assert isinstance(record, TaskRecord)
    tasks = rig.dispatcher.tasks
    real_commit = tasks.commit
    taken: list[int] = []

    async def commit(task_id_: str, **kw: Any) -> CommitResult:
        if any(e.kind == EventKind.STEP_STARTED for e in kw.get("events", ())) and not taken:
            # Another replica takes the task while this step-start checkpoint is on its way.
            took = await real_commit(task_id_, fence=record.fence, bump_fence=True)
            taken.append(took.fence)
        return await real_commit(task_id_, **kw)

    tasks.commit = commit  # type: ignore[method-assign, assignment]
    result = await asyncio.wait_for(rig.dispatcher.loop.run(record), 10)
    assert result == RunResult.STALE
    assert taken == [record.fence + 1]
    assert rig.provider.calls == 0
    assert rig.context.calls["view_on_append"] == 1  # the view came with the goal's append
