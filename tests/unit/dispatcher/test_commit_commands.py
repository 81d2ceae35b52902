"""What one fenced commit and one acquisition cost Redis (issue 45): one script run whose hash is read
once (HMGET) and written once (HSET), one XADD per event; and what they leave in the hash."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentmesh.chat import Usage
from agentmesh.config import DispatcherSettings
from agentmesh.store import Store
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.tasks import TaskRecord, TaskStore, fields_of

TASK = "t-commands"


def event(message: str) -> TaskEvent:
    return TaskEvent(task_id=TASK, sequence=0, kind=EventKind.STATUS, time_ms=now_ms(), message=message)


async def commands(store: Store) -> Counter[str]:
    stats: Any = await store.redis.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


async def spent(store: Store, before: Counter[str]) -> Counter[str]:
    after = await commands(store)
    used = after - before
    used["info"] -= 1  # our own INFO
    return +used


async def test_a_commit_reads_and_writes_the_hash_once_and_adds_each_event(store: Store) -> None:
    tasks = TaskStore(store, DispatcherSettings(pack_events=False))  # one entry per event
    await tasks.commit(TASK, fence=None, fields=fields_of(status=TaskStatus.PENDING), events=[event("created")])
    acquired = await tasks.acquire(TASK, "c1", lease_ms=5000, if_pending=event("run"), if_taken_over=event("again"))
    assert isinstance(acquired, TaskRecord) and acquired.fence == 1 and acquired.last_sequence == 2

    before = await commands(store)
    result = await tasks.commit(
        TASK, fence=1, fields=fields_of(status=TaskStatus.SUCCEEDED, step=3), events=[event("a"), event("b")]
    )
    assert await spent(store, before) == Counter({"evalsha": 1, "hmget": 1, "hset": 1, "xadd": 2})
    assert (result.fence, result.status, result.last_sequence) == (1, TaskStatus.SUCCEEDED, 4)
    record = await tasks.load(TASK)
    assert (record.fence, record.status, record.step, record.last_sequence) == (1, TaskStatus.SUCCEEDED, 3, 4)
    assert record.runs == 1 and record.owner == "c1"
    stream: Any = await store.redis.xrange(store.keys.task_events(TASK))
    assert [entry_id.decode() for entry_id, _ in stream] == ["0-1", "0-2", "0-3", "0-4"]


async def test_a_commit_without_a_status_reports_the_stored_one_and_a_bump_takes_the_fence(store: Store) -> None:
    tasks = TaskStore(store, DispatcherSettings())
    await tasks.commit(TASK, fence=None, fields=fields_of(status=TaskStatus.PENDING), events=[event("created")])
    result = await tasks.commit(TASK, fence=0, bump_fence=True, lease_ms=5000, events=[event("took")])
    assert (result.fence, result.status, result.last_sequence) == (1, TaskStatus.PENDING, 2)
    record = await tasks.load(TASK)
    assert record.fence == 1 and record.lease_until_ms > now_ms()


async def test_an_acquisition_reads_and_writes_the_hash_once(store: Store) -> None:
    tasks = TaskStore(store, DispatcherSettings())
    await tasks.commit(TASK, fence=None, fields=fields_of(status=TaskStatus.PENDING), events=[event("created")])
    before = await commands(store)
    acquired = await tasks.acquire(TASK, "c1", lease_ms=5000, if_pending=event("run"), if_taken_over=event("again"))
    assert await spent(store, before) == Counter({"evalsha": 1, "hmget": 1, "time": 1, "xadd": 1, "hset": 1})
    assert isinstance(acquired, TaskRecord)
    assert (acquired.fence, acquired.runs, acquired.status, acquired.owner) == (1, 1, TaskStatus.RUNNING, "c1")
    # A live owner keeps it; the same consumer takes it again (fence and runs move on).
    assert await tasks.acquire(TASK, "c2", lease_ms=5000, if_pending=event("x"), if_taken_over=event("y")) is None
    again = await tasks.acquire(TASK, "c1", lease_ms=5000, if_pending=event("x"), if_taken_over=event("y"))
    assert isinstance(again, TaskRecord) and (again.fence, again.runs, again.last_sequence) == (2, 2, 3)


async def test_an_acquisition_returns_the_record_a_load_reads_after_it(store: Store) -> None:
    # The record comes from the script's one HMGET with its own writes applied (issue 45: no HGETALL):
    # every field a load reads, as a load reads it, also those the acquisition did not write.
    tasks = TaskStore(store, DispatcherSettings())
    fields = fields_of(
        status=TaskStatus.PENDING, step=2, usage=Usage(1, 2), update_ms=5, task_id=TASK, agent_id="a",
        goal="g", session_id="s", request_id="r", creator="c", token_budget=9, max_steps=4, create_ms=3,
        parent_task_id="p", root_task_id="p", depth=1, hops="x", answer_to="q", deadline_ms=99, runs=0,
    )  # fmt: skip
    await tasks.commit(TASK, fence=None, fields={**fields, "unrelated": "1"}, events=[event("created")])
    acquired = await tasks.acquire(TASK, "c1", lease_ms=5000, if_pending=event("run"), if_taken_over=event("again"))
    assert isinstance(acquired, TaskRecord)
    assert acquired == await tasks.load(TASK)
    assert (acquired.goal, acquired.deadline_ms, acquired.usage, acquired.owner) == ("g", 99, Usage(1, 2), "c1")
    assert (acquired.fence, acquired.runs, acquired.status, acquired.last_sequence) == (1, 1, TaskStatus.RUNNING, 2)
