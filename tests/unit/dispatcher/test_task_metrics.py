"""dispatcher_svc's metrics without gRPC: every status a task enters (by agent), steps, the queue's depth
and lag as Redis holds them, and this replica's running tasks."""

from __future__ import annotations

import asyncio
import json
import time

from agentmesh.chat import ToolCall
from dispatcher_svc.model import EventKind, TaskStatus
from dispatcher_svc.queue import TaskQueue
from tests.metricsutil import recorded_metrics
from tests.unit.dispatcher.conftest import OPERATOR, MakeRig
from tests.unit.dispatcher.fakes import FakeTools, Prompt, call, reply


def add(c: ToolCall) -> str:
    args = json.loads(c.arguments_json)
    return str(args["a"] + args["b"])


async def test_statuses_and_steps_of_a_task(make_rig: MakeRig) -> None:
    got = recorded_metrics()

    def policy(p: Prompt):
        if not p.tool_messages():
            return reply(call("add", {"a": 2, "b": 3}))
        return reply(text=f"the sum is {p.last['content']}")

    rig = await make_rig(policy, FakeTools({"add": add}), metrics=got.metrics)
    task_id = await rig.start("add 2 and 3")
    events = await rig.events(task_id)
    assert events[-1].status == TaskStatus.SUCCEEDED
    tasks = "agentmesh.tasks"
    assert got.value(tasks, agent="ops", status="PENDING") == 1
    assert got.value(tasks, agent="ops", status="RUNNING") == 1
    assert got.value(tasks, agent="ops", status="SUCCEEDED") == 1
    assert got.value(tasks) == 3
    steps = len([e for e in events if e.kind == EventKind.STEP_STARTED])
    assert steps == 2 and got.value("agentmesh.task.steps", agent="ops") == steps
    # Labels are agents and statuses: never the task's id (nor its session, which is the task id here).
    values = {v for name in (tasks, "agentmesh.task.steps") for a, _ in got.points(name) for v in a.values()}
    assert task_id not in values and "req-1" not in values


async def test_a_cancelled_task_counts_as_cancelled(make_rig: MakeRig) -> None:
    got = recorded_metrics()
    rig = await make_rig(lambda p: reply(text="late"), metrics=got.metrics)
    rig.provider.delay_s = 0.5
    task_id = await rig.start()
    async for event in rig.dispatcher.watch(task_id, caller=OPERATOR):
        if event.kind == EventKind.STEP_STARTED:
            break
    await rig.dispatcher.cancel(task_id, "changed my mind", caller=OPERATOR)
    await rig.events(task_id)
    assert got.value("agentmesh.tasks", agent="ops", status="CANCELLED") == 1
    assert got.value("agentmesh.tasks", status="SUCCEEDED") == 0


async def test_queue_depth_and_lag_are_read_from_the_stream(make_rig: MakeRig) -> None:
    rig = await make_rig(lambda p: reply(text="-"), start=False)
    store = rig.store
    queue = TaskQueue(store, "metrics-group", "consumer-1")
    await queue.ensure_group()
    empty = await queue.stats()
    assert (empty.waiting, empty.claimed, empty.oldest_waiting_s) == (0, 0, 0.0)
    for task in ("t-1", "t-2", "t-3"):
        await queue.enqueue(task)
    [(entry, _)] = await queue.read(1, 10)
    await asyncio.sleep(0.3)
    stats = await queue.stats()
    assert (stats.waiting, stats.claimed) == (2, 1)
    assert 0.25 <= stats.oldest_waiting_s < 30
    await queue.done(entry)
    after = await queue.stats()
    assert (after.waiting, after.claimed) == (2, 0)
    # A queue with no group yet (nothing read it): every entry is waiting.
    other = TaskQueue(store, "no-group-yet", "c")
    assert (await other.stats()).waiting == 2


async def test_the_worker_samples_the_queue_and_its_runs(make_rig: MakeRig) -> None:
    got = recorded_metrics()
    rig = await make_rig(lambda p: reply(text="-"), metrics=got.metrics, dispatcher={"queue_metrics_interval_s": 0.05})
    await rig.dispatcher.queue.enqueue("t-nobody-runs")  # read by this replica: claimed, then acknowledged
    deadline = time.monotonic() + 10
    while not got.points("agentmesh.queue.depth") or not got.points("agentmesh.tasks.running"):
        assert time.monotonic() < deadline, "the worker never sampled the queue"
        await asyncio.sleep(0.05)
    assert {a["state"] for a, _ in got.points("agentmesh.queue.depth")} == {"waiting", "claimed"}
    assert got.points("agentmesh.queue.lag")
