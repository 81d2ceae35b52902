"""A model's tool call whose arguments_json holds a lone surrogate escape or absurd nesting (issue 19):
the task goes on (the tool answers in-band), instead of failing INTERNAL on every resume when the
call's idempotency key and loop signature were hashed."""

from __future__ import annotations

import pytest

from agentmesh.chat import ToolCall
from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from dispatcher_svc.model import TaskStatus
from tests.unit.dispatcher.conftest import OPERATOR, MakeRig
from tests.unit.dispatcher.fakes import FakeTools, Prompt, call, reply


def not_json(c: ToolCall) -> AgentmeshError:
    return AgentmeshError(
        ErrorCode.ARGUMENTS_NOT_JSON,
        "arguments are not valid JSON",
        violations=[Violation(path="$", rule="json", hint="the text must be valid Unicode")],
    )


@pytest.mark.parametrize("arguments", ['{"expression": "\\ud800"}', '{"\\udfff": 1}', "[" * 100_000 + "]" * 100_000])
async def test_hostile_arguments_from_the_model_do_not_fail_the_task(make_rig: MakeRig, arguments: str) -> None:
    def policy(p: Prompt):
        if not p.tool_messages():
            return reply(call("calc", arguments))
        return reply(text="could not compute")

    rig = await make_rig(policy, FakeTools({"calc": not_json}))
    task_id = await rig.start("compute")
    await rig.events(task_id)
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.status == TaskStatus.SUCCEEDED, task.error
    assert task.answer == "could not compute"
    assert rig.tools.runs["calc"] == 1
