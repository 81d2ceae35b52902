"""TaskStore (dispatcher_svc/tasks.py) on the test Redis, each result read back as another replica would:
what `create` stores, indexes and queues (one script that may take its own task; after a script flush;
with replicated writes), what `acquire` and `commit` report, count and publish, how a run that raised
ends, and the small indexes (handoff trees, parked approvals). No wall-clock waits."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
import redis.exceptions as rexc

from agentmesh.config import DispatcherSettings, RedisSettings, RoutingSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.errors import AgentmeshError, ErrorCode, NotFoundError, UnavailableError
from agentmesh.store import Store
from dispatcher_svc.agent_load import AgentLoad
from dispatcher_svc.events import decode_entries
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.tasks import (
    Created,
    Cursor,
    FirstRun,
    StaleOwnerError,
    TaskExistsError,
    TaskRecord,
    TaskStore,
    WrongStatusError,
    fields_of,
)
from tests.metricsutil import Recorded, recorded_metrics

T = "t-store"
AGENT = "ops"
GROUP, CONSUMER = "workers", "c1"


def event(message: str, task_id: str = T, status: TaskStatus = TaskStatus.PENDING) -> TaskEvent:
    return TaskEvent(task_id, 0, EventKind.STATUS, 1, status, message=message)


def new_task(task_id: str = T, **extra: str | int) -> dict[str, str]:
    fields = fields_of(status=TaskStatus.PENDING, step=0, task_id=task_id, agent_id=AGENT, goal="g")
    return {**fields, **{key: str(value) for key, value in extra.items()}}


async def commands(store: Store) -> Counter[str]:
    stats: Any = await store.redis.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


class Env:
    def __init__(self, store: Store, settings: DispatcherSettings | None = None) -> None:
        self.store = store
        self.recorded: Recorded = recorded_metrics()
        store.metrics = self.recorded.metrics
        self.load = AgentLoad(store, RoutingSettings())
        self.tasks = TaskStore(
            store, settings or DispatcherSettings(), metrics=self.recorded.metrics, agent_load=self.load
        )
        self.queue = TaskQueue(store, GROUP, CONSUMER)

    def counted(self, status: TaskStatus, agent: str = AGENT) -> float:
        return self.recorded.value("agentmesh.tasks", agent=agent, status=status.name)

    def ops(self) -> set[str]:
        return {a["db.operation.name"] for a, _ in self.recorded.points("db.client.operation.duration")}

    async def active(self, agent: str = AGENT) -> list[str]:
        raw: Any = await self.store.redis.zrange(self.store.keys.agent_active(agent), 0, -1)
        return [m.decode() for m in raw]

    async def outcomes(self, agent: str = AGENT) -> dict[str, int]:
        raw: Any = await self.store.redis.hgetall(self.store.keys.agent_outcomes(agent))
        return {k.decode().split(":")[1]: int(v) for k, v in raw.items()}

    async def stream(self, task_id: str = T) -> list[tuple[str, TaskEvent]]:
        raw: Any = await self.store.redis.xrange(self.store.keys.task_events(task_id))
        return [(f"0-{e.sequence}", e) for e in decode_entries(task_id, raw)]  # packed or not

    async def queued(self) -> list[str]:
        raw: Any = await self.store.redis.xrange(self.queue.key)
        return [f[b"task"].decode() for _, f in raw]

    async def claimed(self) -> list[tuple[str, str]]:
        """(entry id, consumer) of every queue entry read and not acknowledged."""
        raw: Any = await self.store.redis.xpending_range(self.queue.key, GROUP, "-", "+", 100)
        return [(p["message_id"].decode(), p["consumer"].decode()) for p in raw]


@pytest.fixture
async def env(store: Store) -> Env:
    made = Env(store)
    await made.queue.ensure_group()
    await made.tasks.load_scripts()
    return made


async def test_create_stores_indexes_and_queues_the_task_in_one_step(env: Env) -> None:
    before = await commands(env.store)
    created = await env.tasks.create(T, new_task(create_ms=1234), event("created"), env.queue)
    assert created == Created(created=True, taken=[])
    # One script (CREATE_TAKE_LUA), not a transaction (MULTI/EXEC would hold up every client).
    spent = await commands(env.store) - before
    assert (spent["evalsha"], spent["multi"], spent["exec"]) == (1, 0, 0)
    other = TaskStore(env.store, DispatcherSettings())  # another replica's view
    record = await other.load(T)
    assert (record.status, record.fence, record.last_sequence, record.agent_id) == (TaskStatus.PENDING, 0, 1, AGENT)
    assert record.lease_until_ms == 0 and record.owner == "" and record.runs == 0
    assert [(i, e.message) for i, e in await env.stream()] == [("0-1", "created")]
    # Kept until a later write gives it a TTL; no step prompt stored.
    assert await env.store.redis.ttl(env.store.keys.task(T)) == -1
    assert not await env.store.redis.exists(env.store.keys.task_prompts(T))
    assert await env.store.redis.zscore(other.index_key, T) == 1234
    assert await env.queued() == [T] and await env.claimed() == []  # queued for any replica, not taken
    assert env.counted(TaskStatus.PENDING) == 1 and await env.active() == [T]
    assert "create task" in env.ops()


async def test_creating_an_existing_task_changes_nothing_but_queues_it_again(env: Env) -> None:
    await env.tasks.create(T, new_task(create_ms=1234), event("created"), env.queue)
    await env.store.redis.delete(env.store.keys.agent_active(AGENT))
    again = await env.tasks.create(T, {**new_task(create_ms=99), "goal": "other"}, event("again"), env.queue)
    assert again == Created(created=False, taken=[])
    record = await env.tasks.load(T)
    assert record.goal == "g" and record.last_sequence == 1
    assert await env.store.redis.zscore(env.tasks.index_key, T) == 1234  # the first create time stays
    assert await env.queued() == [T, T]  # a harmless extra entry: its run finds the task taken or done
    # Counted once; its agent's set gets it again (the create's script adds it before the task's own
    # write, issue 45): harmless, an unfinished task belongs there and the set's repair drops a finished one.
    assert env.counted(TaskStatus.PENDING) == 1 and await env.active() == [T]
    # A task of no agent is counted under no agent, in no agent's set.
    agentless = {k: v for k, v in new_task("t-3").items() if k != "agent_id"}
    assert (await env.tasks.create("t-3", agentless, event("c", "t-3"), env.queue)).created
    assert env.counted(TaskStatus.PENDING, agent="") == 1
    assert await env.store.redis.keys("*agentload*") == [env.store.keys.agent_active(AGENT).encode()]  # ops' only
    # Without a create time, the task is still listed (at 0).
    await env.tasks.create("t-2", new_task("t-2"), event("created", "t-2"), env.queue)
    assert await env.store.redis.zscore(env.tasks.index_key, "t-2") == 0


async def test_create_with_take_reads_the_new_entry_for_this_replica(env: Env) -> None:
    created = await env.tasks.create(T, new_task(), event("created"), env.queue, take=True)
    assert created.created and [task for _, task in created.taken] == [T]
    assert await env.claimed() == [(created.taken[0][0], CONSUMER)]


async def test_create_after_a_script_flush_creates_and_queues_the_task_once(env: Env) -> None:
    """Redis lost its scripts (restart, flush): the create's one script is loaded again and run once."""
    await env.store.redis.script_flush()
    created = await env.tasks.create(T, new_task(), event("created"), env.queue, take=True)
    assert created.created and [task for _, task in created.taken] == [T]
    assert (await env.tasks.load(T)).status == TaskStatus.PENDING
    assert await env.claimed() == [(created.taken[0][0], CONSUMER)]
    assert await env.queued() == [T]
    assert env.counted(TaskStatus.PENDING) == 1


def first_run(lease_ms: int = 5000) -> FirstRun:
    return FirstRun(lease_ms, TaskEvent(T, 0, EventKind.STATUS, 42, TaskStatus.RUNNING, message="run"))


async def test_create_with_a_first_run_takes_its_own_task_in_the_same_step(env: Env) -> None:
    """What an acquire would have written, in the create's one script: no acquire round trip (issue 45)."""
    before = await commands(env.store)
    with env.tasks.feed.subscribe(T) as watcher:
        created = await env.tasks.create(
            T, new_task(create_ms=7), event("created"), env.queue, take=True, first_run=first_run()
        )
        assert [(e.sequence, e.message) for e in watcher.take()] == [(2, "run")]  # as an acquire publishes
    spent = await commands(env.store) - before
    assert spent["evalsha"] == 1 and spent["hset"] == 1 and spent["time"] == 1
    taken = created.acquired
    assert taken is not None and created.created and [task for _, task in created.taken] == [T]
    stored = await TaskStore(env.store, DispatcherSettings()).load(T)  # another replica's view
    assert taken == stored
    assert (stored.status, stored.fence, stored.runs, stored.owner, stored.last_sequence) == (
        TaskStatus.RUNNING,
        1,
        1,
        CONSUMER,
        2,
    )
    assert stored.update_time_ms == 42 and stored.create_time_ms == 7
    assert stored.lease_until_ms > await env.tasks.redis_time_ms() + 3000  # Redis's clock, as acquire's
    assert [(i, e.message, e.status) for i, e in await env.stream()] == [
        ("0-1", "created", TaskStatus.PENDING),
        ("0-2", "run", TaskStatus.RUNNING),
    ]
    assert await env.claimed() == [(created.taken[0][0], CONSUMER)]
    assert env.counted(TaskStatus.PENDING) == 1 and env.counted(TaskStatus.RUNNING) == 1
    assert await env.active() == [T]
    # Fenced like an acquired task: a live lease keeps other replicas out, a commit needs fence 1.
    assert await env.tasks.acquire(T, "c2", lease_ms=5000, if_pending=event("x"), if_taken_over=event("y")) is None
    with pytest.raises(StaleOwnerError):
        await env.tasks.commit(T, fence=0, fields={"step": "1"})
    await env.tasks.commit(T, fence=1, fields=fields_of(status=TaskStatus.SUCCEEDED))


async def test_a_task_taken_by_its_create_whose_replica_died_is_taken_over_as_after_an_acquire(env: Env) -> None:
    """The creating replica killed before its run began: the task is RUNNING under a lease with its entry
    pending for that replica; once the lease lapses, another replica claims the entry and takes the task."""
    # A lease of 0 ms: lapsed at once, by Redis's clock (no wall-clock wait).
    created = await env.tasks.create(T, new_task(), event("created"), env.queue, take=True, first_run=first_run(0))
    assert created.acquired is not None
    other = TaskQueue(env.store, GROUP, "c2")
    assert [task for _, task in await other.autoclaim(0, 10)] == [T]
    taken = await env.tasks.acquire(T, "c2", lease_ms=5000, if_pending=event("x"), if_taken_over=event("resumed"))
    assert isinstance(taken, TaskRecord) and (taken.fence, taken.runs, taken.owner) == (2, 2, "c2")
    assert [e.message for _, e in await env.stream()] == ["created", "run", "resumed"]
    with pytest.raises(StaleOwnerError):  # the dead replica's record is fenced out
        await env.tasks.commit(T, fence=created.acquired.fence, fields={"step": "1"})


@pytest.mark.parametrize("packed", [True, False])
async def test_a_first_run_event_is_stored_as_commits_store_theirs(store: Store, packed: bool) -> None:
    env = Env(store, DispatcherSettings(pack_events=packed))
    await env.queue.ensure_group()
    await env.tasks.create(T, new_task(), event("created"), env.queue, take=True, first_run=first_run())
    raw: Any = await store.redis.xrange(store.keys.task_events(T))
    assert [entry_id.decode() for entry_id, _ in raw] == (["0-2"] if packed else ["0-1", "0-2"])
    assert [(i, e.message) for i, e in await env.stream()] == [("0-1", "created"), ("0-2", "run")]


async def test_a_first_run_leaves_the_task_pending_when_another_entry_is_read(env: Env) -> None:
    """A backlog: the entry read is an older one. Only read (its run acquires it); the new task waits."""
    await env.tasks.create("t-old", new_task("t-old"), event("old", "t-old"), env.queue)
    created = await env.tasks.create(T, new_task(), event("created"), env.queue, take=True, first_run=first_run())
    assert created.created and created.acquired is None
    assert [task for _, task in created.taken] == ["t-old"]
    assert (await env.tasks.load(T)).status == TaskStatus.PENDING
    assert (await env.tasks.load("t-old")).status == TaskStatus.PENDING
    assert env.counted(TaskStatus.RUNNING) == 0


async def test_a_first_run_takes_nothing_of_an_existing_task_or_without_take(env: Env) -> None:
    await env.tasks.create(T, new_task(), event("created"), env.queue)
    await env.store.redis.xtrim(env.queue.key, maxlen=0)  # its entry gone: the next one read is the new one
    again = await env.tasks.create(T, new_task(), event("again"), env.queue, take=True, first_run=first_run())
    assert not again.created and again.acquired is None and [task for _, task in again.taken] == [T]
    record = await env.tasks.load(T)
    assert (record.status, record.fence, record.last_sequence) == (TaskStatus.PENDING, 0, 1)
    other = await env.tasks.create("t-2", new_task("t-2"), event("c", "t-2"), env.queue, first_run=first_run())
    assert other.created and other.acquired is None and other.taken == []
    assert (await env.tasks.load("t-2")).status == TaskStatus.PENDING


@pytest.mark.parametrize("broken", ["index", "task", "queue"])
async def test_create_raises_what_redis_refused(env: Env, broken: str) -> None:
    key = {"index": env.tasks.index_key, "task": env.store.keys.task(T), "queue": env.queue.key}[broken]
    await env.store.redis.delete(key)
    await env.store.redis.set(key, "not a hash, zset or stream")
    with pytest.raises(rexc.ResponseError, match=r"WRONGTYPE|wrong kind"):
        await env.tasks.create(T, new_task(), event("created"), env.queue)


async def _replica_of(primary: LocalRedis) -> LocalRedis:
    setup: Any = Store.client_for(primary.url, RedisSettings(url=primary.url))
    await setup.config_set("repl-diskless-sync-delay", 0)  # sync now, not in 5 s
    await setup.aclose()
    replica = LocalRedis(extra_args=["--replicaof", "127.0.0.1", str(primary.port)]).start()
    client: Any = Store.client_for(replica.url, RedisSettings(url=replica.url))
    try:
        for _ in range(500):
            info = await client.info("replication")
            if info.get("master_link_status") == "up":
                return replica
            await asyncio.sleep(0.01)
    finally:
        await client.aclose()
    replica.stop()
    raise AssertionError("the replica did not sync")


async def test_with_replicated_writes_create_commits_the_task_then_queues_it(fresh_redis: LocalRedis) -> None:
    replica = await _replica_of(fresh_redis)
    settings = RedisSettings(url=fresh_redis.url, cluster_wait_replicas=1, cluster_wait_timeout_s=1.0)
    try:
        async with await Store.connect(settings, "dev") as store:
            env = Env(store)
            await env.queue.ensure_group()
            created = await env.tasks.create(T, new_task(create_ms=77), event("created"), env.queue, take=True)
            assert created.created and [task for _, task in created.taken] == [T]
            assert await env.active() == [T]
            await store.redis.delete(store.keys.agent_active(AGENT))
            again = await env.tasks.create(T, new_task(), event("again"), env.queue)
            assert again == Created(created=False, taken=[]) and await env.active() == []
            agentless = {k: v for k, v in new_task("t-none").items() if k != "agent_id"}
            assert (await env.tasks.create("t-none", agentless, event("c", "t-none"), env.queue)).created
            assert await store.redis.keys("*agentload*") == []
            # Counted like a single-Redis create: the two new tasks once each, the repeated create not at all.
            assert env.counted(TaskStatus.PENDING) == 1 and env.counted(TaskStatus.PENDING, agent="") == 1
            # The replica holds what the primary acknowledged.
            async with await Store.connect(RedisSettings(url=replica.url), "dev") as read:
                record = await TaskStore(read, DispatcherSettings()).load(T)
                assert (record.status, record.fence) == (TaskStatus.PENDING, 0)
                assert await read.redis.zscore(env.tasks.index_key, T) == 77
                assert await read.redis.xlen(env.queue.key) == 3  # t-store twice, t-none
    finally:
        replica.stop()


async def test_without_the_replicas_asked_for_task_writes_fail_naming_their_script(
    redis_settings: RedisSettings,
) -> None:
    settings = redis_settings.model_copy(update={"cluster_wait_replicas": 1, "cluster_wait_timeout_s": 0.05})
    async with await Store.connect(settings, "dev") as store:
        env = Env(store)
        with pytest.raises(UnavailableError) as create:
            await env.tasks.create(T, new_task(), event("created"), env.queue)
        assert create.value.metadata["reason"] == "replication" and "(dispatcher_commit)" in create.value.message
        with pytest.raises(UnavailableError) as acquire:
            await env.tasks.acquire(T, CONSUMER, lease_ms=1000, if_pending=event("a"), if_taken_over=event("b"))
        assert "(dispatcher_acquire)" in acquire.value.message
        with pytest.raises(UnavailableError) as commit:
            await env.tasks.commit(T, fence=0, events=[event("x")])
        assert "(dispatcher_commit)" in commit.value.message
        assert await env.tasks.due_approvals(10, 1000) == []  # a read-and-hold, not a kept write


async def test_acquire_takes_the_task_counts_it_and_tells_local_watchers(env: Env) -> None:
    tasks = env.tasks
    missing = await tasks.acquire(T, CONSUMER, lease_ms=5000, if_pending=event("run"), if_taken_over=event("again"))
    assert missing == TaskStatus.UNSPECIFIED
    await tasks.create(T, new_task(), event("created"), env.queue)
    await env.store.redis.delete(env.store.keys.agent_active(AGENT))
    with tasks.feed.subscribe(T) as watcher:
        first = await tasks.acquire(T, CONSUMER, lease_ms=5000, if_pending=event("run"), if_taken_over=event("again"))
        assert isinstance(first, TaskRecord) and (first.fence, first.owner, first.last_sequence) == (1, CONSUMER, 2)
        assert [(e.sequence, e.message) for e in watcher.take()] == [(2, "run")]
        assert await tasks.acquire(T, "c2", lease_ms=5000, if_pending=event("x"), if_taken_over=event("y")) is None
        second = await tasks.acquire(T, CONSUMER, lease_ms=5000, if_pending=event("run"), if_taken_over=event("again"))
        assert isinstance(second, TaskRecord) and second.fence == 2
        assert [(e.sequence, e.message) for e in watcher.take()] == [(3, "again")]
    assert [e.message for _, e in await env.stream()] == ["created", "run", "again"]
    assert env.counted(TaskStatus.RUNNING) == 2 and await env.active() == [T]  # the set healed
    await tasks.commit(T, fence=2, fields=fields_of(status=TaskStatus.SUCCEEDED))
    done = await tasks.acquire(T, CONSUMER, lease_ms=5000, if_pending=event("x"), if_taken_over=event("y"))
    assert done == TaskStatus.SUCCEEDED


async def test_commit_publishes_counts_and_ends_once(env: Env) -> None:
    tasks = env.tasks
    ended: list[str] = []

    async def on_end(task_id: str) -> None:
        ended.append(task_id)

    tasks.on_end = on_end
    await tasks.create(T, new_task(), event("created"), env.queue)
    with tasks.feed.subscribe(T) as watcher:
        running = await tasks.commit(
            T, fence=0, fields=fields_of(status=TaskStatus.RUNNING), events=[event("a"), event("b")], agent=AGENT
        )
        assert (running.fence, running.status, running.last_sequence) == (0, TaskStatus.RUNNING, 3)
        assert [(e.sequence, e.message) for e in watcher.take()] == [(2, "a"), (3, "b")] and watcher.terminal_at == -1
        assert ended == [] and env.counted(TaskStatus.RUNNING) == 1
        failed = await tasks.commit(
            T, fence=0, fields=fields_of(status=TaskStatus.FAILED), events=[event("end")], agent=AGENT
        )
        assert failed.status == TaskStatus.FAILED
        assert [e.sequence for e in watcher.take()] == [4] and watcher.terminal_at == 4
    assert ended == [T] and env.counted(TaskStatus.FAILED) == 1
    assert await env.active() == [] and await env.outcomes() == {"e": 1, "f": 1}
    # Written FAILED again: not counted again. Resumed: unfinished again.
    await tasks.commit(T, fence=0, fields=fields_of(status=TaskStatus.FAILED), agent=AGENT)
    assert await env.outcomes() == {"e": 1, "f": 1}
    await tasks.commit(T, fence=0, fields=fields_of(status=TaskStatus.PENDING), agent=AGENT)
    assert await env.active() == [T]
    await tasks.commit(T, fence=0, fields=fields_of(status=TaskStatus.SUCCEEDED), agent=AGENT)
    assert await env.outcomes() == {"e": 2, "f": 1} and ended == [T, T, T]


async def test_a_watcher_gets_the_last_events_before_the_bookkeeping_of_the_end(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RunTask's stream ends on the terminal event: it must not wait for the agents' load count or the
    end hook (issue 45: their round trip was on every task's latency), which still run, in order."""
    tasks, held, order = env.tasks, asyncio.Event(), []
    ended = env.load.ended

    async def slow_count(*args: Any, **kwargs: Any) -> None:
        order.append("count")
        await held.wait()
        await ended(*args, **kwargs)

    async def on_end(task_id: str) -> None:
        order.append("on_end")

    monkeypatch.setattr(env.load, "ended", slow_count)
    tasks.on_end = on_end
    await tasks.create(T, new_task(), event("created"), env.queue)
    with tasks.feed.subscribe(T) as watcher:
        commit = asyncio.ensure_future(
            tasks.commit(T, fence=0, fields=fields_of(status=TaskStatus.SUCCEEDED), events=[event("end")], agent=AGENT)
        )
        assert await watcher.wait(5)
        assert [(e.sequence, e.message) for e in watcher.take()] == [(2, "end")] and watcher.terminal_at == 2
        assert order == ["count"] and not commit.done() and await env.active() == [T]  # still counting
        held.set()
        assert (await commit).status == TaskStatus.SUCCEEDED
    assert order == ["count", "on_end"] and await env.active() == [] and await env.outcomes() == {"e": 1}


async def test_commit_defaults_keep_fence_lease_ttl_and_count_under_no_agent(env: Env) -> None:
    await env.tasks.create(T, new_task(), event("created"), env.queue)
    result = await env.tasks.commit(T, fence=0, fields=fields_of(status=TaskStatus.RUNNING))
    record = await env.tasks.load(T)
    assert result.fence == 0 and record.fence == 0 and record.lease_until_ms == 0
    assert await env.store.redis.ttl(env.store.keys.task(T)) == -1
    assert env.counted(TaskStatus.RUNNING, agent="") == 1


async def test_commit_stores_the_prompt_and_sets_or_clears_the_ttl_of_all_three_keys(env: Env) -> None:
    await env.tasks.create(T, new_task(), event("created"), env.queue)
    keys = [env.store.keys.task(T), env.store.keys.task_events(T), env.store.keys.task_prompts(T)]
    await env.tasks.commit(T, fence=0, prompt=(3, b"the prompt"), ttl_s=500, expect_status=TaskStatus.PENDING)
    assert await env.store.redis.hget(keys[2], "3") == b"the prompt"
    assert [495 < await env.store.redis.ttl(k) <= 500 for k in keys] == [True] * 3
    await env.tasks.commit(T, fence=0, ttl_s=-1)
    assert [await env.store.redis.ttl(k) for k in keys] == [-1] * 3


async def test_commit_refusals_are_typed_and_name_the_task(env: Env) -> None:
    tasks = env.tasks
    with pytest.raises(NotFoundError) as missing:
        await tasks.commit(T, fence=0, fields={"answer": "x"})
    assert missing.value.metadata["task_id"] == T
    await tasks.commit(T, fence=None, fields=fields_of(status=TaskStatus.PENDING), events=[event("created")])
    with pytest.raises(TaskExistsError) as exists:
        await tasks.commit(T, fence=None, fields=fields_of(status=TaskStatus.PENDING))
    assert exists.value.metadata == {"status": "PENDING"} and T in exists.value.message
    taken = await tasks.commit(T, fence=0, bump_fence=True)
    with pytest.raises(StaleOwnerError) as stale:
        await tasks.commit(T, fence=0, fields={"answer": "late"})
    assert stale.value.metadata == {"task_id": T, "fence": "0", "current_fence": str(taken.fence)}
    with pytest.raises(WrongStatusError) as wrong:
        await tasks.commit(T, fence=1, expect_status=TaskStatus.WAITING_APPROVAL, fields={"answer": "x"})
    assert wrong.value.status == TaskStatus.PENDING and "PENDING, not WAITING_APPROVAL" in wrong.value.message
    assert (await tasks.load(T)).answer == ""


async def test_a_run_that_raised_ends_failed_if_it_still_holds_the_task(env: Env) -> None:
    tasks = env.tasks
    await tasks.create(T, new_task(), event("created"), env.queue)
    record = await tasks.acquire(T, CONSUMER, lease_ms=60_000, if_pending=event("run"), if_taken_over=event("x"))
    assert isinstance(record, TaskRecord)
    record = await tasks.load(T)
    await tasks.commit(T, fence=record.fence, fields=fields_of(cursor=Cursor(step=2)))
    record = await tasks.load(T)
    before = int(time.time() * 1000)
    with tasks.feed.subscribe(T) as watcher:
        await tasks.fail_unexpectedly(record, KeyError("boom"), ttl_s=300)
    (seen,) = watcher.take()
    assert (seen.task_id, seen.sequence, seen.status) == (T, record.last_sequence + 1, TaskStatus.FAILED)
    failed = await tasks.load(T)
    assert failed.status == TaskStatus.FAILED and failed.lease_until_ms == 0
    assert failed.error is not None and failed.error.code == ErrorCode.INTERNAL
    assert failed.error.message == "the dispatcher failed unexpectedly: KeyError"
    assert before <= failed.update_time_ms <= int(time.time() * 1000)
    assert 295 < await env.store.redis.ttl(env.store.keys.task(T)) <= 300
    last = (await env.stream())[-1][1]
    assert (last.kind, last.status, last.step) == (EventKind.STATUS, TaskStatus.FAILED, 2)
    assert last.message == "status FAILED: " + str(failed.error) and last.error is not None
    assert env.counted(TaskStatus.FAILED) == 1
    # Our own error is kept as it is; a run that lost the task writes nothing and raises nothing.
    await tasks.commit(T, fence=record.fence, fields=fields_of(status=TaskStatus.RUNNING))
    await tasks.fail_unexpectedly(record, AgentmeshError(ErrorCode.NOT_FOUND, "agent ops is gone"), ttl_s=300)
    kept = (await tasks.load(T)).error
    assert kept is not None and (kept.code, kept.message) == (ErrorCode.NOT_FOUND, "agent ops is gone")
    await tasks.commit(T, fence=record.fence, fields=fields_of(status=TaskStatus.RUNNING), bump_fence=True)
    await tasks.fail_unexpectedly(record, KeyError("late"), ttl_s=300)
    assert (await tasks.load(T)).status == TaskStatus.RUNNING


async def test_light_reads_of_a_task(env: Env) -> None:
    tasks = env.tasks
    assert not await tasks.exists(T)
    for read in (tasks.load, tasks.status, tasks.creator):
        with pytest.raises(NotFoundError) as missing:
            await read(T)
        assert missing.value.metadata["task_id"] == T
    await tasks.create(T, {**new_task(), "creator": "alice"}, event("created"), env.queue)
    assert await tasks.exists(T)
    assert await tasks.status(T) == (TaskStatus.PENDING, 1)
    assert await tasks.creator(T) == ("alice", "")
    await env.store.redis.hset(env.store.keys.task(T), "creator_agent", "planner")
    assert await tasks.creator(T) == ("alice", "planner")
    await env.store.redis.hset(env.store.keys.task(T), "creator", b"\xffalice")  # not UTF-8: shown, not raised
    assert await tasks.creator(T) == ("\ufffdalice", "planner")
    before: Any = await env.store.redis.time()
    now = await tasks.redis_time_ms()
    after: Any = await env.store.redis.time()
    assert before[0] * 1000 + before[1] // 1000 <= now <= after[0] * 1000 + after[1] // 1000


async def test_redis_time_is_read_in_whole_milliseconds(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    async def time_reply() -> tuple[int, int]:
        return (1_700_000_000, 999_000)  # TIME: seconds, microseconds

    monkeypatch.setattr(env.store.redis, "time", time_reply)
    assert await env.tasks.redis_time_ms() == 1_700_000_000_999


async def test_handoff_trees_list_their_tasks_and_expire_after_twice_the_task_ttl(env: Env) -> None:
    assert await env.tasks.tree("root") == []
    await env.tasks.add_to_tree("root", "t-b")
    await env.tasks.add_to_tree("root", "t-a")
    assert await env.tasks.tree("root") == ["t-a", "t-b"]
    ttl = await env.store.redis.ttl(env.store.keys.task_tree("root"))
    assert DispatcherSettings().task_ttl_s * 2 - 5 < ttl <= DispatcherSettings().task_ttl_s * 2


async def test_parked_tasks_come_due_at_their_expiry_once_per_hold(env: Env) -> None:
    tasks = env.tasks
    now = await tasks.redis_time_ms()
    await tasks.index_approval("t-1", "ap-1", now - 10)
    await tasks.index_approval("t-2", "ap-2", now - 5)
    await tasks.index_approval("t-3", "ap-3", 0)  # expiry unknown: looked at again in a minute
    score = await env.store.redis.zscore(tasks.waiting_key, "t-3 ap-3")
    assert score is not None and now + 55_000 < score <= int(time.time() * 1000) + 60_000
    assert await tasks.due_approvals(1, 30_000) == [("t-1", "ap-1")]
    assert await tasks.due_approvals(10, 30_000) == [("t-2", "ap-2")]  # t-1 is held meanwhile
    assert await tasks.due_approvals(10, 30_000) == []
    await tasks.reindex_approval("t-1", "ap-1", now - 1)
    await tasks.reindex_approval("t-9", "ap-9", now - 1)  # removed meanwhile: never added back
    await tasks.unindex_approval("t-2", "ap-2")
    assert await tasks.due_approvals(10, 30_000) == [("t-1", "ap-1")]
    members: Any = await env.store.redis.zrange(tasks.waiting_key, 0, -1)
    assert sorted(m.decode() for m in members) == ["t-1 ap-1", "t-3 ap-3"]
    # Task ids hold no space; everything after the first one is the approval id.
    await tasks.index_approval("t-4", "ap 4", now - 1)
    assert ("t-4", "ap 4") in await tasks.due_approvals(10, 30_000)


async def test_each_operation_is_measured_under_its_own_name(env: Env) -> None:
    tasks = env.tasks
    await tasks.create(T, new_task(), event("created"), env.queue)
    await tasks.acquire(T, CONSUMER, lease_ms=1000, if_pending=event("run"), if_taken_over=event("x"))
    await tasks.commit(T, fence=1, events=[event("e")])
    await tasks.load(T)
    await tasks.exists(T)
    await tasks.status(T)
    await tasks.creator(T)
    await tasks.redis_time_ms()
    await tasks.add_to_tree("root", T)
    await tasks.tree("root")
    await tasks.index_approval(T, "ap", 1)
    await tasks.reindex_approval(T, "ap", 2)
    await tasks.unindex_approval(T, "ap")
    await tasks.due_approvals(1, 1)
    assert env.ops() == {
        "load scripts",
        "create task",
        "acquire task",
        "commit task",
        "load task",
        "task exists",
        "task status",
        "task creator",
        "time",
        "task tree",
        "index approval",
        "unindex approval",
        "due approvals",
        "create consumer group",
    }
