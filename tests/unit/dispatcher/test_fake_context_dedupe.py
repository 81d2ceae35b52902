"""The in-memory context port answers repeated appends as context_svc does (issue 18)."""

from __future__ import annotations

import pytest

from agentmesh.errors import FailedPreconditionError
from dispatcher_svc.model import ExecStats, ToolOutcome, ToolOutput
from dispatcher_svc.ports import CallOptions, SessionSpec
from tests.unit.dispatcher.fakes import FakeContext

OPTS = CallOptions(identity_token="t", request_id="r", timeout_s=1.0)


async def test_the_fake_appends_once_per_id() -> None:
    context = FakeContext(dedupe_tool_results=True)
    await context.create_session(SessionSpec("s1", "ops", "goal", ""), OPTS)
    first = await context.append_message("s1", "user", "go", (), OPTS, client_message_id="u-1")
    again = await context.append_message("s1", "user", "go", (), OPTS, client_message_id="u-1")
    assert (first.index, first.already, again.index, again.already) == (0, False, 0, True)
    with pytest.raises(FailedPreconditionError):
        await context.append_message("s1", "user", "stop", (), OPTS, client_message_id="u-1")
    assert (await context.append_message("s1", "user", "go", (), OPTS)).index == 1  # no id: no dedupe

    outcome = ToolOutcome("c1", "lookup", output=ToolOutput(inline="42"), stats=ExecStats(attempts=1))
    result = await context.append_tool_result("s1", outcome, OPTS)
    replayed = ToolOutcome("c1", "lookup", output=ToolOutput(inline="42"), stats=ExecStats(attempts=2, replayed=True))
    repeat = await context.append_tool_result("s1", replayed, OPTS)
    assert (result.index, result.already, repeat.index, repeat.already) == (2, False, 2, True)
    with pytest.raises(FailedPreconditionError):
        await context.append_tool_result("s1", ToolOutcome("c1", "lookup", output=ToolOutput(inline="43")), OPTS)
    assert len(context.sessions["s1"]) == 3
