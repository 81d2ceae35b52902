"""Watches follow the task: a FAILED task resumed by StartTask is read in one watch to its real end."""

from __future__ import annotations

import asyncio
import json

from agentmesh.chat import ToolCall
from agentmesh.errors import UnavailableError
from dispatcher_svc.model import EventKind, ModelReply, TaskEvent, TaskStatus
from tests.unit.dispatcher.conftest import OPERATOR, MakeRig, Rig
from tests.unit.dispatcher.fakes import FakeTools, Prompt, call, reply


def add(c: ToolCall) -> str:
    args = json.loads(c.arguments_json)
    return str(args["a"] + args["b"])


def policy(p: Prompt) -> ModelReply:
    if not p.tool_messages():
        return reply(call("calc", {"a": 2, "b": 3}))
    return reply(text=f"the sum is {p.last['content']}")


def statuses(events: list[TaskEvent]) -> list[TaskStatus]:
    return [e.status for e in events if e.kind == EventKind.STATUS]


async def failed_task(rig: Rig) -> tuple[str, list[TaskEvent]]:
    """A task whose provider is unavailable until it FAILED; the provider answers again after."""
    rig.provider.rpc_failures = [UnavailableError("provider down")] * 2
    task_id = await rig.start("add 2 and 3")
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.FAILED
    return task_id, events


async def test_a_watch_from_zero_reads_a_failed_then_resumed_task_to_its_end(make_rig: MakeRig) -> None:
    rig = await make_rig(policy, FakeTools({"calc": add}), dispatcher={"service_retry_attempts": 2})
    task_id, failed = await failed_task(rig)
    assert await rig.start("add 2 and 3", task_id=task_id) == task_id
    rest = await rig.events(task_id, after=failed[-1].sequence)
    assert rest[-1].status == TaskStatus.SUCCEEDED
    # One watch from the start: every event once, in order, through the FAILED one, to SUCCEEDED.
    everything = await rig.events(task_id)
    assert [e.sequence for e in everything] == list(range(1, len(failed) + len(rest) + 1))
    assert [(e.sequence, e.kind, e.status) for e in everything] == [
        (e.sequence, e.kind, e.status) for e in failed + rest
    ]
    assert statuses(everything) == [
        TaskStatus.PENDING,
        TaskStatus.RUNNING,
        TaskStatus.FAILED,
        TaskStatus.PENDING,  # resumed after failure
        TaskStatus.RUNNING,
        TaskStatus.SUCCEEDED,
    ]
    assert everything[-1].status == TaskStatus.SUCCEEDED
    task = await rig.dispatcher.get_task(task_id, caller=OPERATOR)
    assert task.last_sequence == everything[-1].sequence and task.answer == "the sum is 5"


async def test_a_watch_started_during_the_resumed_run_passes_the_failed_event_and_follows_it_live(
    make_rig: MakeRig,
) -> None:
    rig = await make_rig(policy, FakeTools({"calc": add}), dispatcher={"service_retry_attempts": 2})
    task_id, failed = await failed_task(rig)
    rig.provider.delay_s = 0.3  # the resumed run is still going when the watch has caught up
    await rig.start("add 2 and 3", task_id=task_id)
    watched = await rig.events(task_id)
    assert [e.sequence for e in watched] == list(range(1, len(watched) + 1))
    assert watched[len(failed) - 1].status == TaskStatus.FAILED
    assert watched[-1].status == TaskStatus.SUCCEEDED
    assert (await rig.dispatcher.get_task(task_id, caller=OPERATOR)).last_sequence == watched[-1].sequence


async def test_a_watch_of_a_failed_task_not_resumed_ends_at_its_failed_event(make_rig: MakeRig) -> None:
    rig = await make_rig(policy, FakeTools({"calc": add}), dispatcher={"service_retry_attempts": 2})
    task_id, failed = await failed_task(rig)
    # Well under a heartbeat interval (0.2 s): it ends at the FAILED event, it does not wait for more.
    watched = await rig.events(task_id, timeout_s=0.15)
    assert [e.sequence for e in watched] == [e.sequence for e in failed]
    assert watched[-1].status == TaskStatus.FAILED
    assert await rig.events(task_id, after=failed[-1].sequence, timeout_s=0.15) == []
    # Without a heartbeat in between, too.
    raw = [e async for e in rig.dispatcher.watch(task_id, caller=OPERATOR)]
    assert all(e.sequence for e in raw) and len(raw) == len(failed)


async def test_a_live_watch_ends_at_a_failure_that_is_the_tasks_current_status(make_rig: MakeRig) -> None:
    rig = await make_rig(policy, FakeTools({"calc": add}), dispatcher={"service_retry_attempts": 2})
    rig.provider.rpc_failures = [UnavailableError("provider down")] * 2
    rig.provider.delay_s = 0.2
    task_id = await rig.start("add 2 and 3")
    watch = asyncio.ensure_future(rig.events(task_id))  # subscribed before the task fails
    events = await asyncio.wait_for(watch, 10)
    assert events[-1].status == TaskStatus.FAILED
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
