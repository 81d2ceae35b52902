"""A conflicting append is a typed, resumable state, never a failure (issue 39).

When the session log holds another result for a call than the one the run has (appended by an
earlier owner whose checkpoint did not land, after this run found nothing to read back), the run
takes the stored one (AppendConflict -> tool_calls.retake): the policy is applied to it with the
cursor as it was before, and nothing is appended twice. When this run's own attempt ran where the
stored one failed, a named note after the stored result tells the model it did run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc.model import EventKind, TaskStatus, ToolOutcome
from dispatcher_svc.ports import Appended, CallOptions
from tests.unit.dispatcher.conftest import MakeRig
from tests.unit.dispatcher.fakes import FakeContext, FakeTools, Prompt, call, reply


@dataclass
class AppendedByAnotherOwner(FakeContext):
    """Before the run's first tool result lands, another owner appends RATE_LIMITED for that call."""

    squatted: int = 0

    async def append_tool_result(
        self, session_id: str, outcome: ToolOutcome, opts: CallOptions, *, build_tokens: int | None = None
    ) -> Appended:
        if not self.squatted:
            self.squatted += 1
            limited = AgentmeshError(ErrorCode.RATE_LIMITED, "slow down")
            await super().append_tool_result(session_id, replace(outcome, output=None, error=limited), opts)
        return await super().append_tool_result(session_id, outcome, opts, build_tokens=build_tokens)


def one_call(p: Prompt) -> Any:
    results = p.tool_messages()
    if not results:
        return reply(call("calc", {"a": 1, "b": 2}, "c1"))
    return reply(text=f"calc said: {results[-1]['content']}")


async def test_the_stored_result_is_taken_and_the_task_goes_on(make_rig: MakeRig) -> None:
    tools = FakeTools({"calc": lambda c: "3"})
    rig = await make_rig(one_call, tools, context=AppendedByAnotherOwner())
    task_id = await rig.start()
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED, [e.message for e in events]
    assert tools.runs["calc"] == 1
    results = [e for e in events if e.kind == EventKind.TOOL_RESULT]
    # The event is the stored outcome's: what the session (and so the model) has.
    assert len(results) == 1 and results[0].tool_result is not None
    assert results[0].tool_result.error is not None and results[0].tool_result.error.code == ErrorCode.RATE_LIMITED
    log = rig.context.sessions[task_id]
    assert [m["role"] for m in log].count("tool") == 1
    # This run's attempt ran where the stored one failed: the model is told, right after that result,
    # so it does not send the call again under a new id (a write twice); the ledger says OK.
    after = log[[m["role"] for m in log].index("tool") + 1]
    assert after["role"] == "user" and "ran after its result above was recorded" in after["content"]
    task = await rig.dispatcher.tasks.load(task_id)
    assert [entry[1] for entry in task.cursor.ledger.values()] == ["OK"]
