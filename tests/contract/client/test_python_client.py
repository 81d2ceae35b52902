"""agentmesh_client.Client (clients/python) against the four services: a task's typed events to
SUCCEEDED, a stream cut mid-task resumed with no gap or repeat, and typed errors with our ErrorDetail.

The client is synchronous; the services run on this test's event loop, so every client call runs in a
worker thread (asyncio.to_thread).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from agentmesh_client import Answer, Client, StatusChanged, Step, TaskStatus, ToolCall, ToolResult
from agentmesh_client.errors import AgentmeshError, InvalidArgument, NotFound, Unauthenticated
from tests.contract.client.conftest import target, token
from tests.contract.stack import AGENT, Stack
from tests.e2e.deploy.netcut import CuttingProxy


def collect(client: Client, goal: str, agent: str = AGENT, **kwargs: Any) -> tuple[list[Any], Any]:
    run = client.run(agent, goal, **kwargs)
    return list(run), run


async def test_a_task_runs_to_succeeded_with_typed_events(stack: Stack) -> None:
    with Client(target(stack), token=token(stack), timeout=20) as client:
        events, run = await asyncio.to_thread(collect, client, "compute 6*7", request_id="client-test-rid-1")
        task = await asyncio.to_thread(client.get_task, run.task_id)
        agents = await asyncio.to_thread(client.list_agents)

    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert {e.task_id for e in events} == {run.task_id}
    assert run.task_id.startswith("t-")
    kinds = [type(e) for e in events]
    assert Step in kinds
    call = next(e for e in events if isinstance(e, ToolCall))
    assert (call.name, call.arguments()) == ("calculator", {"expression": "6*7"})
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.call_id == call.call_id and result.error is None and result.output is not None
    answer = next(e for e in events if isinstance(e, Answer))
    assert "42" in answer.text
    last = events[-1]
    assert isinstance(last, StatusChanged) and last.terminal and last.status is TaskStatus.SUCCEEDED
    assert (run.status, run.answer, run.last_sequence, run.reconnects) == (
        TaskStatus.SUCCEEDED,
        answer.text,
        len(events),
        0,
    )
    # The request id the client sent is the one the dispatcher recorded for the task.
    assert run.request_id == "client-test-rid-1"
    assert (task.status, task.answer, task.request_id, task.last_sequence) == (
        TaskStatus.SUCCEEDED,
        answer.text,
        "client-test-rid-1",
        len(events),
    )
    assert task.created_by == "client-test" and task.agent_id == AGENT and task.goal == "compute 6*7"
    assert [a.agent_id for a in agents] == [AGENT] and agents[0].tools == ("calculator",)


@pytest.mark.parametrize("before_response", [False, True], ids=["after-first-event", "before-any-response"])
async def test_a_stream_cut_mid_task_resumes_with_no_gap_or_repeat(stack: Stack, before_response: bool) -> None:
    """The first connection is cut (client FIN, server RST) right after the first event reached the
    client: the client resumes with WatchTask(after_sequence) and yields every event exactly once. Cut
    before any response (the task may have started, the client cannot know), the client sends RunTask
    again with the same task_id: one task, its events once."""

    def through_proxy() -> tuple[CuttingProxy, list[Any], Any]:
        # Closing the proxy joins its threads: off the event loop, which serves the other ends.
        proxy = CuttingProxy(target(stack), before_response=before_response)
        with proxy, Client(proxy.target, token=token(stack), timeout=20) as client:
            return proxy, *collect(client, "compute 2+3")

    proxy, events, run = await asyncio.to_thread(through_proxy)
    with Client(target(stack), token=token(stack), timeout=20) as direct:
        replayed = await asyncio.to_thread(lambda: list(direct.watch(run.task_id)))

    assert proxy.cuts == 1 and proxy.connections >= 2
    assert run.reconnects >= 1
    sequences = [e.sequence for e in events]
    assert sequences == list(range(1, len(events) + 1)), sequences
    assert events == replayed  # the same events (the dataclasses compare all but the raw message)
    assert run.status is TaskStatus.SUCCEEDED and "5" in run.answer


async def test_unknown_agent_is_a_typed_not_found_with_its_error_detail(stack: Stack) -> None:
    with Client(target(stack), token=token(stack), timeout=20) as client:
        with pytest.raises(NotFound) as caught:
            await asyncio.to_thread(collect, client, "hello", "no-such-agent", request_id="client-test-rid-2")
        with pytest.raises(NotFound) as missing_task:
            await asyncio.to_thread(client.get_task, "t-no-such-task")
        with pytest.raises(InvalidArgument) as bad_goal:
            await asyncio.to_thread(lambda: list(client.run(AGENT, "   ")))
        with pytest.raises(InvalidArgument) as bad_id:
            await asyncio.to_thread(lambda: list(client.watch("no spaces allowed")))

    err = caught.value
    assert isinstance(err, AgentmeshError)
    assert err.code == grpc.StatusCode.NOT_FOUND
    assert (err.reason, err.error_class) == ("NOT_FOUND", "ENGINEERING")
    assert err.detail is not None and err.detail.message == err.message and "no-such-agent" in err.message
    assert err.request_id == "client-test-rid-2" and "client-test-rid-2" in str(err)
    assert not err.retryable
    assert missing_task.value.reason == "NOT_FOUND" and missing_task.value.detail is not None
    assert len(missing_task.value.request_id) == 32  # one minted per call
    assert (bad_goal.value.reason, bad_goal.value.error_class) == ("INVALID_REQUEST", "ENGINEERING")
    assert [v.path for v in bad_goal.value.violations] == ["goal"]
    assert [v.path for v in bad_id.value.violations] == ["task_id"]


@pytest.mark.parametrize("credential", [None, "not-a-token"])
async def test_a_call_without_a_valid_token_is_unauthenticated(stack: Stack, credential: str | None) -> None:
    with Client(target(stack), token=credential, timeout=20) as client:
        with pytest.raises(Unauthenticated) as caught:
            await asyncio.to_thread(client.list_agents)
        with pytest.raises(Unauthenticated):
            await asyncio.to_thread(collect, client, "compute 1+1")
    assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert caught.value.reason == "UNAUTHENTICATED" and caught.value.detail is not None


async def test_an_unreachable_dispatcher_is_unavailable_after_the_reconnects(stack: Stack, refused_port: int) -> None:
    """Nothing listens: the start is retried `reconnects` times with backoff, then Unavailable."""
    slept: list[float] = []
    client = Client(f"127.0.0.1:{refused_port}", token=token(stack), timeout=5, reconnects=3, sleep=slept.append)
    with client, pytest.raises(AgentmeshError) as caught:
        await asyncio.to_thread(collect, client, "compute 1+1")
    assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    assert len(slept) == 3 and slept == sorted(slept)
