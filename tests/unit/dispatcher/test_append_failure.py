"""A call whose result cannot be appended (context_svc down past the retries) fails the task with the
call's events committed: the resumed run appends the result without losing its TOOL_RESULT event
(found by `make chaos`, issue 18)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode
from dispatcher_svc.model import EventKind, TaskStatus, ToolOutcome
from dispatcher_svc.ports import Appended, CallOptions
from dispatcher_svc.service import StartRequest
from tests.unit.dispatcher.conftest import OPERATOR, MakeRig
from tests.unit.dispatcher.fakes import FakeContext, FakeTools, Prompt, call, reply


@dataclass
class DownForResults(FakeContext):
    """context_svc unavailable for the first `down` AppendToolResult calls."""

    down: int = 3  # dispatcher.service_retry_attempts: the first run gives up, the resumed one succeeds

    async def append_tool_result(
        self, session_id: str, outcome: ToolOutcome, opts: CallOptions, *, build_tokens: int | None = None
    ) -> Appended:
        if self.down > 0:
            self.down -= 1
            raise AgentmeshError(ErrorCode.UNAVAILABLE, "context_svc is down")
        return await super().append_tool_result(session_id, outcome, opts, build_tokens=build_tokens)


def two_calls(p: Prompt) -> Any:
    n = len(p.tool_messages())
    if n < 2:
        return reply(call("notify", {"seq": n}, f"c{n}"))
    return reply(text=f"sent {n}")


async def test_a_failed_append_keeps_the_calls_events_for_the_resumed_run(make_rig: MakeRig) -> None:
    tools = FakeTools({"notify": lambda c: "sent"})
    rig = await make_rig(two_calls, tools, context=DownForResults())
    task_id = await rig.start()
    first = await rig.events(task_id)
    assert first[-1].status == TaskStatus.FAILED, [e.message for e in first]
    # The call ran and its result event is in the log although its append failed.
    assert [e.kind for e in first].count(EventKind.TOOL_RESULT) == 1
    await rig.dispatcher.start_task(
        StartRequest("ops", "check payment-svc", task_id=task_id), caller=OPERATOR, request_id="r2"
    )
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    results = [e for e in events if e.kind == EventKind.TOOL_RESULT]
    assert len(results) == 2 and len({e.tool_call.id for e in results if e.tool_call}) == 2
    assert tools.runs["notify"] == 2
    assert [m["role"] for m in rig.context.sessions[task_id]].count("tool") == 2
