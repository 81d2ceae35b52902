"""ListTasks' index on a real Redis (dispatcher_svc/task_index.py, issue 27): written before the task,
missing tasks skipped and pruned, the backfill runs once and under a lock, a bounded scan per call."""

from __future__ import annotations

import time

from agentmesh.config import DispatcherSettings
from agentmesh.identity_value import Identity
from agentmesh.store import Store
from dispatcher_svc.listing import MAX_EXAMINED, Listing, TaskFilter
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.task_index import IndexEntry, TaskIndex
from dispatcher_svc.tasks import TaskStore, fields_of

OPERATOR = Identity("op", "", "", "dev", frozenset({"operator"}), (), "", 0, 0, "")


def tools(store: Store) -> tuple[TaskStore, TaskIndex, Listing, TaskQueue]:
    tasks = TaskStore(store, DispatcherSettings())
    index = TaskIndex(store)
    return tasks, index, Listing(tasks, index, "k"), TaskQueue(store, "g", "c")


async def create(tasks: TaskStore, queue: TaskQueue, task_id: str, ms: int, creator: str = "alice") -> None:
    fields = fields_of(status=TaskStatus.PENDING, update_ms=ms, task_id=task_id, agent_id="ops", goal="g", create_ms=ms)
    fields["creator"] = creator
    event = TaskEvent(task_id=task_id, sequence=0, kind=EventKind.STATUS, time_ms=ms, status=TaskStatus.PENDING)
    assert (await tasks.create(task_id, fields, event, queue)).created


async def ids(listing: Listing, **filters: int | str) -> list[str]:
    found, _ = await listing.list_tasks(TaskFilter(**filters), 100, "", caller=OPERATOR)  # type: ignore[arg-type]
    return [t.task_id for t in found]


async def test_create_indexes_the_task_by_its_create_time_and_keeps_the_first(store: Store) -> None:
    tasks, index, listing, queue = tools(store)
    await create(tasks, queue, "a", 1000)
    await create(tasks, queue, "b", 2000)
    await create(tasks, queue, "c", 2000)
    assert await index.page(10) == [IndexEntry(2000, "c"), IndexEntry(2000, "b"), IndexEntry(1000, "a")]
    assert await index.page(10, after=IndexEntry(2000, "c")) == [IndexEntry(2000, "b"), IndexEntry(1000, "a")]
    await index.add("a", 5000)  # NX: a repeated create keeps the first score
    assert await index.page(1, min_ms=1000, max_ms=1000) == [IndexEntry(1000, "a")]
    # created_after inclusive, created_before exclusive
    assert await ids(listing, created_after_ms=2000) == ["c", "b"]
    assert await ids(listing, created_before_ms=2000) == ["a"]


async def test_missing_tasks_are_skipped_then_pruned(store: Store) -> None:
    tasks, index, listing, queue = tools(store)
    for i in range(5):
        await create(tasks, queue, f"t{i}", 1000 + i)
    await index.add("ghost", 999)  # a create that failed after its ZADD
    await index.add("being-created", int(time.time() * 1000))  # its hash is on its way: not pruned
    await store.redis.delete(store.keys.task("t1"))  # expired after task_ttl_s
    assert await ids(listing) == ["t4", "t3", "t2", "t0"]
    assert await index.maybe_prune() == 2
    assert await index.maybe_prune() == 0  # at most once a minute
    assert [e.task_id for e in await index.page(10)] == ["being-created", "t4", "t3", "t2", "t0"]


async def test_a_call_examines_at_most_a_thousand_entries(store: Store) -> None:
    tasks, index, listing, queue = tools(store)
    await create(tasks, queue, "real", 1)
    await store.redis.zadd(index.key, {f"gone-{i:05d}": 10 + i for i in range(MAX_EXAMINED + 50)})
    found, token = await listing.list_tasks(TaskFilter(), 10, "", caller=OPERATOR)
    assert found == [] and token  # short (empty) page, and a token to go on
    found, token = await listing.list_tasks(TaskFilter(), 10, token, caller=OPERATOR)
    assert [t.task_id for t in found] == ["real"] and token == ""


async def test_the_backfill_runs_once_and_not_while_another_replica_holds_the_lock(store: Store) -> None:
    tasks, index, listing, queue = tools(store)
    for i in range(3):
        await create(tasks, queue, f"t{i}", 1000 + i)
    await store.redis.delete(index.key)  # as before the index existed
    await store.redis.set(index.lock_key, "1")
    assert await index.backfill() == -1  # another replica is at it
    assert await ids(listing) == []
    await store.redis.delete(index.lock_key)
    assert await index.backfill() == 3
    assert await ids(listing) == ["t2", "t1", "t0"]
    assert not await store.redis.exists(index.lock_key)
    await store.redis.delete(index.key)
    assert await index.backfill() == -1  # done once for this Redis: the marker says so


async def test_ties_on_the_create_time_page_in_the_zset_order_of_their_ids(store: Store) -> None:
    index = TaskIndex(store)
    ids = ["a", "B", "b", "a.b", "a-b", "A:1", "z", "Z9", "0", "a0", "ab", "a_b"]
    await store.redis.zadd(index.key, dict.fromkeys(ids, 7))
    want = sorted(ids, key=str.encode, reverse=True)
    assert [e.task_id for e in await index.page(100)] == want
    paged: list[str] = []
    after: IndexEntry | None = None
    while batch := await index.page(1, after=after):
        paged.append(batch[0].task_id)
        after = batch[0]
    assert paged == want


async def test_the_approval_sweeper_prunes_the_index(store: Store) -> None:
    _, index, listing, _ = tools(store)
    await index.add("gone", 5)

    async def sweep() -> int:
        return 3

    assert await listing.sweeping(sweep)() == 3  # the sweeper's own count
    assert await index.page(10) == []
