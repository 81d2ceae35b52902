"""An appended result is the truth on resume (issue 39, "resume fails for good").

Under Redis pool pressure a run appended a call's RATE_LIMITED result and then could not checkpoint
it; the resumed run sent the call again (tool_svc keeps no RATE_LIMITED outcome under the key, so
it ran), got OK, and its append conflicted with the stored result: FAILED_PRECONDITION, and every
resume failed the same way. Now the resumed run reads the appended result back (GetToolResult) and
continues with it: the call never runs again, nothing is appended twice, the task succeeds.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentmesh.errors import AgentmeshError, ErrorCode, UnavailableError
from agentmesh.v1 import common_pb2, dispatcher_pb2
from dispatcher_svc import testhooks
from dispatcher_svc.tasks import TaskRecord
from tests.contract.dispatcher.conftest import MakeMesh, answer, tool_call
from tests.contract.dispatcher.test_dispatcher_grpc import run, tool_messages

D = dispatcher_pb2


class ForgetRateLimited(dict[str, common_pb2.ToolResult]):
    """tool_svc's idempotency store: a RATE_LIMITED call did not run, so nothing is kept for its key."""

    def __setitem__(self, key: str, result: common_pb2.ToolResult) -> None:
        if result.error.code != common_pb2.ERROR_CODE_RATE_LIMITED:
            super().__setitem__(key, result)


def policy(messages: list[common_pb2.Message], tools: list[str]) -> common_pb2.Message:
    results = tool_messages(messages)
    if not results:
        return tool_call("calc", {"a": 1, "b": 2}, "c1")
    return answer(f"calc said: {results[-1].content}")


async def test_a_resumed_run_continues_with_the_appended_result(
    make_mesh: MakeMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    fired: list[str] = []

    async def lose_the_checkpoint(point: str, record: TaskRecord) -> None:
        # The result is appended; the commit that follows it fails, as with the Redis pool exhausted.
        if point == "after_append_result" and not fired:
            fired.append(record.task_id)
            raise UnavailableError("redis: pool exhausted (test)")

    monkeypatch.setattr(testhooks, "from_env", lambda: lose_the_checkpoint)
    outcomes: list[str | AgentmeshError] = [AgentmeshError(ErrorCode.RATE_LIMITED, "slow down", retry_after=0.1), "3"]

    def calc(args: dict[str, Any]) -> str | AgentmeshError:
        return outcomes.pop(0)

    mesh = await make_mesh(policy, {"calc": calc})
    mesh.tools.keys = ForgetRateLimited()

    events = await run(mesh, "add 1 and 2")

    assert fired, "the checkpoint after the append was never lost"
    assert events[-1].status == D.TASK_STATUS_SUCCEEDED, [e.message for e in events]
    assert mesh.tools.runs["calc"] == 1, "the call ran again although its result was in the session log"
    task_id = events[0].task_id
    log = mesh.context.logs[task_id]
    tool_results = [m for m in log if m.role == common_pb2.ROLE_TOOL]
    assert len(tool_results) == 1 and "RATE_LIMITED" in tool_results[0].content
    results = [e for e in events if e.kind == D.TASK_EVENT_KIND_TOOL_RESULT]
    # The resumed run's TOOL_RESULT is the stored one (the lost checkpoint carried the first's).
    assert [r.tool_result.error.code for r in results] == [common_pb2.ERROR_CODE_RATE_LIMITED]
    assert not [e for e in events if e.status == D.TASK_STATUS_FAILED]
    store = mesh.dispatcher.host.store
    assert store is not None
    assert int(await store.redis.hget(store.keys.task(task_id), "runs") or 0) == 2
