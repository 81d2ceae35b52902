"""LocalFeed / Subscription on their own, then EventLog.watch fed by them against the real test Redis.

The watch tests build TaskStore + EventLog directly on the test Store (no worker, no loop), so each
test decides exactly who commits what and through which process's feed: `here` is the replica the
watcher is on, `there` another replica on the same Redis with its own LocalFeed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import pytest

from agentmesh.chat import ToolCall, Usage
from agentmesh.config import DispatcherSettings, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.errors import AgentmeshError, ErrorCode, NotFoundError, UnavailableError, Violation
from agentmesh.store import Store
from dispatcher_svc import events as events_module
from dispatcher_svc.events import EventLog
from dispatcher_svc.feed import LocalFeed
from dispatcher_svc.model import (
    EventKind,
    ExecStats,
    PayloadRef,
    PendingApproval,
    TaskEvent,
    TaskStatus,
    ToolOutcome,
    ToolOutput,
)
from dispatcher_svc.server import event_pb
from dispatcher_svc.tasks import TaskRecord, TaskStore, fields_of

TASK = "t-feed"

QUIET_S = 60.0
"""Longer than any test: no heartbeat and (where patched in) no timed poll, so every stream read
a watch makes is one it decided it needed."""


def event(task_id: str, message: str, sequence: int = 0, kind: EventKind = EventKind.STEP_STARTED) -> TaskEvent:
    return TaskEvent(task_id, sequence, kind, 1_700_000_000_000, TaskStatus.RUNNING, message=message)


# ---------------------------------------------------------------------------------------------
# LocalFeed and Subscription, no Redis
# ---------------------------------------------------------------------------------------------


def test_publish_reaches_every_subscriber_of_that_task_and_no_other() -> None:
    feed = LocalFeed()
    with feed.subscribe("a") as a1, feed.subscribe("a") as a2, feed.subscribe("b") as b:
        feed.publish("a", [event("a", "x", 1)])
        assert [e.message for e in a1.take()] == ["x"]
        assert [e.message for e in a2.take()] == ["x"]  # each watcher has its own buffer
        assert b.take() == []
        feed.publish("c", [event("c", "nobody listens", 1)])  # no subscriber: dropped, no error
        assert (a1.take(), a2.take(), b.take()) == ([], [], [])


def test_take_drains_everything_in_publish_order() -> None:
    feed = LocalFeed()
    with feed.subscribe(TASK) as sub:
        feed.publish(TASK, [event(TASK, "1", 1), event(TASK, "2", 2)])
        feed.publish(TASK, [event(TASK, "3", 3)])
        assert [e.sequence for e in sub.take()] == [1, 2, 3]
        assert sub.take() == []
        feed.publish(TASK, [event(TASK, "4", 4)])
        assert [e.sequence for e in sub.take()] == [4]


async def test_wait_returns_true_when_something_is_published_meanwhile() -> None:
    feed = LocalFeed()
    with feed.subscribe(TASK) as sub:
        asyncio.get_running_loop().call_soon(feed.publish, TASK, [event(TASK, "late", 1)])
        # The timeout is far beyond the test: only the publish can end this wait.
        assert await asyncio.wait_for(sub.wait(QUIET_S), 5) is True
        assert [e.message for e in sub.take()] == ["late"]


async def test_wait_returns_true_at_once_when_events_are_already_buffered() -> None:
    feed = LocalFeed()
    with feed.subscribe(TASK) as sub:
        feed.publish(TASK, [event(TASK, "early", 1)])
        assert await asyncio.wait_for(sub.wait(QUIET_S), 5) is True


async def test_wait_returns_false_when_nothing_is_published_before_the_timeout() -> None:
    feed = LocalFeed()
    with feed.subscribe(TASK) as sub, feed.subscribe("other") as _:
        feed.publish("other", [event("other", "not ours", 1)])
        assert await sub.wait(0.02) is False
        assert sub.take() == []


def test_overflow_beyond_the_buffer_limit_sets_missed_and_drops_the_buffer() -> None:
    feed = LocalFeed(buffer_limit=3)
    with feed.subscribe(TASK) as sub:
        feed.publish(TASK, [event(TASK, "1", 1), event(TASK, "2", 2)])
        feed.publish(TASK, [event(TASK, "3", 3)])  # exactly the limit: still buffered
        assert not sub.missed
        assert [e.sequence for e in sub.take()] == [1, 2, 3]
        feed.publish(TASK, [event(TASK, "4", 4), event(TASK, "5", 5)])
        feed.publish(TASK, [event(TASK, "6", 6), event(TASK, "7", 7)])  # 4 > 3
        assert sub.missed
        assert sub.take() == []  # what was buffered is gone too: the watcher must read the stream
        feed.publish(TASK, [event(TASK, "8", 8)])
        assert sub.take() == []  # nothing is buffered until the watcher has caught up
        sub.missed = False  # what the watch does once it read the stream
        feed.publish(TASK, [event(TASK, "9", 9)])
        assert [e.sequence for e in sub.take()] == [9]


async def test_wait_returns_true_at_once_after_an_overflow() -> None:
    feed = LocalFeed(buffer_limit=1)
    with feed.subscribe(TASK) as sub:
        feed.publish(TASK, [event(TASK, "1", 1), event(TASK, "2", 2)])
        assert sub.take() == []
        assert await asyncio.wait_for(sub.wait(QUIET_S), 5) is True


def test_leaving_the_subscribe_block_unregisters_the_subscription() -> None:
    feed = LocalFeed()
    with feed.subscribe(TASK) as first:
        with feed.subscribe(TASK):
            assert feed.subscribers(TASK) == 2
        assert feed.subscribers(TASK) == 1
    assert feed.subscribers(TASK) == 0
    feed.publish(TASK, [event(TASK, "after", 1)])
    assert first.take() == []  # not buffered for a watcher that left
    with pytest.raises(RuntimeError), feed.subscribe(TASK):
        raise RuntimeError("the watcher's stream broke")
    assert feed.subscribers(TASK) == 0  # also when the block ends by an exception


def test_running_nests_per_task() -> None:
    feed = LocalFeed()
    assert not feed.is_running(TASK)
    with feed.running(TASK):
        with feed.running(TASK):  # e.g. a stale run still unwinding while the new one started
            assert feed.is_running(TASK)
            assert not feed.is_running("other")
        assert feed.is_running(TASK)  # one run ended, the other still runs here
    assert not feed.is_running(TASK)
    with pytest.raises(RuntimeError), feed.running(TASK):
        raise RuntimeError("the run crashed")
    assert not feed.is_running(TASK)


# ---------------------------------------------------------------------------------------------
# EventLog.watch with the feed, against the real test Redis
# ---------------------------------------------------------------------------------------------


class CountingLog(EventLog):
    """An EventLog that counts its stream reads: XRANGE (`read`, `_open`) and XREAD BLOCK (`_read_blocking`)."""

    def __init__(
        self, store: Store, tasks: TaskStore, heartbeat_interval_s: float, foreign_poll_s: float | None = None
    ) -> None:
        super().__init__(store, tasks, heartbeat_interval_s, foreign_poll_s)
        self.reads: Counter[str] = Counter()

    async def read(self, task_id: str, after: int = 0, count: int = 1000) -> list[TaskEvent]:
        self.reads["XRANGE"] += 1
        return await super().read(task_id, after, count)

    async def _open(self, task_id: str, after: int, count: int = 1000) -> tuple[TaskStatus, int, list[TaskEvent]]:
        self.reads["XRANGE"] += 1  # the catch-up read, sent with the status read in one MULTI
        return await super()._open(task_id, after, count)

    async def _read_blocking(self, task_id: str, after: int) -> list[TaskEvent]:
        self.reads["XREAD"] += 1
        return await super()._read_blocking(task_id, after)


def replica(
    store: Store, feed: LocalFeed | None = None, foreign_poll_s: float | None = None
) -> tuple[TaskStore, CountingLog]:
    """One dispatcher process's TaskStore and EventLog (its own LocalFeed unless given one)."""
    tasks = TaskStore(store, DispatcherSettings(), feed)
    return tasks, CountingLog(store, tasks, QUIET_S, foreign_poll_s)


async def create(tasks: TaskStore, task_id: str = TASK) -> None:
    await tasks.commit(
        task_id, fence=None, fields=fields_of(status=TaskStatus.PENDING), events=[event(task_id, "created")]
    )


async def commit(tasks: TaskStore, *messages: str, task_id: str = TASK) -> None:
    await tasks.commit(task_id, fence=0, events=[event(task_id, m) for m in messages])


def final(task_id: str = TASK, status: TaskStatus = TaskStatus.SUCCEEDED) -> TaskEvent:
    return TaskEvent(task_id, 0, EventKind.STATUS, 1_700_000_000_000, status, message=f"status {status.name}")


async def finish(tasks: TaskStore, task_id: str = TASK, status: TaskStatus = TaskStatus.SUCCEEDED) -> None:
    await tasks.commit(task_id, fence=0, fields=fields_of(status=status), events=[final(task_id, status)])


class Watcher:
    """EventLog.watch consumed in the background, as a WatchTask stream would (heartbeats dropped)."""

    def __init__(self, log: EventLog, task_id: str = TASK, after: int = 0, *, hold_after: Sequence[int] = ()) -> None:
        self.events: list[TaskEvent] = []
        self._log = log
        self._task_id = task_id
        self._after = after
        self._task: asyncio.Task[None] | None = None
        self._holds = {count: asyncio.Event() for count in hold_after}
        """A slow client: after that many events the watch stays suspended (not waiting for the
        feed) until `release(count)`."""

    async def _collect(self) -> None:
        async for e in self._log.watch(self._task_id, self._after):
            if e.sequence:
                self.events.append(e)
                hold = self._holds.get(len(self.events))
                if hold is not None:
                    await hold.wait()

    def release(self, count: int) -> None:
        self._holds[count].set()

    async def __aenter__(self) -> Watcher:
        self._task = asyncio.create_task(self._collect())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        if not self._task.done():
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def received(self, count: int, timeout_s: float = 10.0) -> None:
        """Waits until the watcher has yielded `count` events."""
        assert self._task is not None
        deadline = time.monotonic() + timeout_s
        while len(self.events) < count:
            if self._task.done():
                self._task.result()  # its exception, if it failed
                raise AssertionError(f"the watch ended after {self.messages()}, expected {count} events")
            assert time.monotonic() < deadline, f"the watcher got {self.messages()}, expected {count} events"
            await asyncio.sleep(0.005)

    async def finished(self, timeout_s: float = 10.0) -> list[TaskEvent]:
        """Every event, once the watch ended (after the final one)."""
        assert self._task is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        except TimeoutError:
            raise AssertionError(f"the watch did not end; it got {self.messages()}") from None
        return self.events

    def messages(self) -> list[tuple[int, str]]:
        return [(e.sequence, e.message) for e in self.events]


def assert_once_in_order(seen: Sequence[TaskEvent], messages: Sequence[str]) -> None:
    assert [(e.sequence, e.message) for e in seen] == list(enumerate(messages, start=1))


async def test_a_watcher_of_a_task_running_here_gets_every_commit_from_memory(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No timed poll: a commit that did not come through the feed would never arrive (the test fails).
    monkeypatch.setattr(events_module, "FOREIGN_POLL_S", QUIET_S)
    here, log = replica(store)
    await create(here)
    expected = ["created"]
    with here.feed.running(TASK):
        async with Watcher(log) as watcher:
            await watcher.received(1)
            for i in range(40):
                batch = [f"e{i}.{j}" for j in range(i % 3 + 1)]  # 1-3 events a commit: per-event sequences
                await commit(here, *batch)
                expected += batch
            await finish(here)
            seen = await watcher.finished()
    assert_once_in_order(seen, [*expected, "status SUCCEEDED"])
    # One catch-up read for 42 commits: everything after it came from memory, and never XREAD BLOCK.
    assert log.reads == Counter({"XRANGE": 1})


async def test_another_replicas_commit_reaches_a_watcher_of_a_task_running_here_by_the_poll(store: Store) -> None:
    # The poll interval as dispatcher.foreign_event_poll_s sets it (the module default is 0.5 s).
    here, log = replica(store, foreign_poll_s=0.05)
    there, _ = replica(store)  # same Redis, its own LocalFeed: its commits are never published here
    await create(here)
    with here.feed.running(TASK):
        async with Watcher(log) as watcher:
            await watcher.received(1)
            await commit(here, "local 1")
            await watcher.received(2)
            await commit(there, "approval resolved elsewhere")
            # Nothing is committed here meanwhile: only the poll of the stream can deliver it.
            await watcher.received(3)
            await commit(here, "local 2")
            await watcher.received(4)
            await finish(there, status=TaskStatus.CANCELLED)  # a CancelTask served by the other replica
            seen = await watcher.finished()
    assert_once_in_order(seen, ["created", "local 1", "approval resolved elsewhere", "local 2", "status CANCELLED"])
    assert log.reads["XREAD"] == 0  # the watch never blocks on the stream while the task runs here


async def test_a_gap_in_the_local_feed_is_filled_from_the_stream(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # No timed poll: the other replica's event can only arrive because the local one showed a gap.
    monkeypatch.setattr(events_module, "FOREIGN_POLL_S", QUIET_S)
    here, log = replica(store)
    there, _ = replica(store)
    await create(here)
    with here.feed.running(TASK):
        async with Watcher(log) as watcher:
            await watcher.received(1)
            await commit(there, "foreign")  # sequence 2: in the stream only
            await commit(here, "local")  # sequence 3: published here, one past what the watcher has
            await finish(here)
            seen = await watcher.finished()
    assert_once_in_order(seen, ["created", "foreign", "local", "status SUCCEEDED"])
    assert log.reads == Counter({"XRANGE": 2})  # the catch-up, and one read for the gap


async def test_a_gap_between_buffered_events_is_filled_from_the_stream(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_module, "FOREIGN_POLL_S", QUIET_S)
    here, log = replica(store)
    there, _ = replica(store)
    await create(here)
    with here.feed.running(TASK):
        async with Watcher(log, hold_after=[1]) as watcher:
            await watcher.received(1)
            # While the client is slow, the buffer gets 2, 4 and 5: the first one follows on, 3 is elsewhere.
            await commit(here, "local 1")
            await commit(there, "foreign")
            await commit(here, "local 2")
            await finish(here)
            watcher.release(1)
            seen = await watcher.finished()
    assert_once_in_order(seen, ["created", "local 1", "foreign", "local 2", "status SUCCEEDED"])
    assert log.reads == Counter({"XRANGE": 2})


async def test_events_that_overflow_the_buffer_are_all_delivered_in_order_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No timed poll: dropped events can only come back because the overflow was noticed.
    monkeypatch.setattr(events_module, "FOREIGN_POLL_S", QUIET_S)
    here, log = replica(store, LocalFeed(buffer_limit=2))
    await create(here)
    burst = [f"burst {i}" for i in range(10)]
    with here.feed.running(TASK):
        async with Watcher(log, hold_after=[12]) as watcher:
            await watcher.received(1)
            await commit(here, *burst)  # 10 events in one commit, the buffer holds 2; the watcher waits
            await watcher.received(11)
            await commit(here, "after the burst")  # fits again: from memory
            await watcher.received(12)
            # The client is slow (the watch is not waiting on the feed) and the overflowing commit
            # holds the task's final event: no later publish could reveal the loss.
            await here.commit(
                TASK,
                fence=0,
                fields=fields_of(status=TaskStatus.SUCCEEDED),
                events=[event(TASK, "last 1"), event(TASK, "last 2"), final()],
            )
            watcher.release(12)
            seen = await watcher.finished()
    assert_once_in_order(seen, ["created", *burst, "after the burst", "last 1", "last 2", "status SUCCEEDED"])
    assert log.reads == Counter({"XRANGE": 3})  # the catch-up and one per overflow, none for the event that fit


def representative_events(task_id: str) -> list[TaskEvent]:
    """Events with every optional part the loop fills in, through every JSON field of the stream."""
    t = 1_700_000_123_456
    plan = ToolCall("c-2", "restart", '{"svc": "payment-svc", "force": true}')
    pending = PendingApproval(
        approval_id="ap-1",
        plan=plan,
        impact="restarts payment-svc (3 pods)",
        arguments_sha256=plan.arguments_sha256(),
        expire_time_ms=t + 600_000,
        requested_by="ops",
    )
    contract = AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "arguments violate the schema",
        violations=[Violation("$.order_id", "pattern", "^ORD-", '"ord-1"', "use ORD-2025-0001")],
        metadata={"tool": "lookup"},
    )
    throttled = AgentmeshError(
        ErrorCode.RATE_LIMITED, "429 from upstream", retryable=True, retry_after=1.5, fallback_tool="cached_status"
    )
    denied = AgentmeshError(ErrorCode.PERMISSION_DENIED, "needs write", missing_permission="dev:ops:write")
    fatal = AgentmeshError(ErrorCode.DANGEROUS_OPERATION, "rm -rf / is destructive")
    ref = PayloadRef("ref-1", task_id, 48_000, "application/json", "ab" * 32, t + 3_600_000)
    running = TaskStatus.RUNNING

    def ev(kind: EventKind, message: str, status: TaskStatus = running, **fields: object) -> TaskEvent:
        return TaskEvent(task_id, 0, kind, t, status, 3, message, **fields)  # type: ignore[arg-type]

    return [
        ev(EventKind.STEP_STARTED, "step 3"),
        ev(
            EventKind.CONTEXT,
            "context 1234 tokens",
            usage=Usage(1234, 0),
            attributes={"context_tokens": "1234", "tools_offered": "lookup,restart", "note": "é ✓"},
        ),
        ev(EventKind.MODEL_REPLY, "model asked for 1 tool call(s): lookup", usage=Usage(1300, 42)),
        ev(EventKind.TOOL_CALL, "call lookup", tool_call=ToolCall("c-1", "lookup", '{"order_id":"ord-1"}')),
        ev(
            EventKind.TOOL_RESULT,
            "lookup: output",
            tool_result=ToolOutcome(
                "c-1", "lookup", output=ToolOutput(inline="shipped", result_type="text"), stats=ExecStats(1, 12.5)
            ),
        ),
        ev(
            EventKind.TOOL_RESULT,
            "lookup: offloaded",
            tool_result=ToolOutcome(
                "c-1",
                "lookup",
                output=ToolOutput(ref=ref, digest="48 kB of JSON", result_type="structured", redacted=True),
                stats=ExecStats(2, 830.25, True, 48_000),
            ),
        ),
        ev(
            EventKind.TOOL_RESULT,
            "lookup: error",
            tool_result=ToolOutcome("c-1", "lookup", error=contract, stats=ExecStats(1, 3.0)),
            error=contract,
        ),
        ev(EventKind.CORRECTION, "correction 1 of 2", error=contract, attributes={"attempt": "1"}),
        ev(EventKind.FALLBACK, "fallback offered", error=throttled),
        ev(EventKind.TOOL_RESULT, "status: denied", tool_result=ToolOutcome("c-3", "status", error=denied)),
        ev(EventKind.TOOL_RESULT, "restart: pending", tool_result=ToolOutcome("c-2", "restart", pending=pending)),
        ev(
            EventKind.APPROVAL_REQUIRED,
            "approval needed",
            TaskStatus.WAITING_APPROVAL,
            tool_call=plan,
            pending_approval=pending,
        ),
        ev(EventKind.STATUS, "status WAITING_APPROVAL", TaskStatus.WAITING_APPROVAL, pending_approval=pending),
        ev(EventKind.INCIDENT, "incident: DANGEROUS_OPERATION", TaskStatus.ABORTED, error=fatal),
        ev(EventKind.ANSWER, "answer", attributes={"answer_chars": "12"}),
    ]


async def test_a_locally_published_event_converts_exactly_like_the_same_event_read_from_the_stream(
    store: Store,
) -> None:
    here, log = replica(store)
    await create(here)
    sent = representative_events(TASK)
    with here.feed.subscribe(TASK) as sub:
        await here.commit(TASK, fence=0, events=sent)  # one commit: sequences 2.. assigned by Redis
        published = sub.take()
    stored = await log.read(TASK, after=1)
    assert [e.sequence for e in published] == [e.sequence for e in stored] == list(range(2, len(sent) + 2))
    for mine, theirs in zip(published, stored, strict=True):
        assert event_pb(mine) == event_pb(theirs), f"event {mine.sequence} ({mine.message!r}) differs by path"


async def test_a_watch_opens_with_one_round_trip_that_reads_the_status_and_the_events_before_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, log = replica(store)
    await create(here)
    await commit(here, "a", "b")
    sent: list[tuple[bool, list[str]]] = []  # (MULTI?, commands) of each pipeline sent
    pipeline = type(store.redis.pipeline())
    execute = pipeline.execute

    async def recorded(self: Any, raise_on_error: bool = True) -> Any:
        sent.append((self.is_transaction, [str(args[0]) for args, _ in self.command_stack]))
        return await execute(self, raise_on_error)

    monkeypatch.setattr(pipeline, "execute", recorded)
    with here.feed.running(TASK):
        async with Watcher(log, after=1) as watcher:
            await watcher.received(2)
            await finish(here)
            seen = await watcher.finished()
    assert [(e.sequence, e.message) for e in seen] == [(2, "a"), (3, "b"), (4, "status SUCCEEDED")]
    assert sent == [(True, ["HMGET", "XRANGE"])]  # the status and the catch-up in one MULTI
    assert log.reads == Counter({"XRANGE": 1})  # and no separate read after it


async def test_a_watch_of_an_unknown_task_is_not_found_naming_task_id(store: Store) -> None:
    _, log = replica(store)
    with pytest.raises(NotFoundError) as caught:
        async for _ in log.watch("t-nope"):
            pass
    assert caught.value.violations[0].path == "task_id"
    assert caught.value.metadata["task_id"] == "t-nope"


async def test_a_watch_with_redis_down_is_unavailable(fresh_redis: LocalRedis) -> None:
    store = await Store.connect(RedisSettings(url=fresh_redis.url, socket_timeout_s=0.5), "dev")
    try:
        here, log = replica(store)
        await create(here)
        fresh_redis.kill()
        with pytest.raises(UnavailableError, match="redis unavailable during open watch"):
            async for _ in log.watch(TASK):
                pass
    finally:
        await store.close()


async def test_the_running_event_of_an_acquire_here_reaches_a_watcher_here_from_memory(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No timed poll: an event that did not come through the feed would never arrive (the test fails).
    monkeypatch.setattr(events_module, "FOREIGN_POLL_S", QUIET_S)
    here, log = replica(store)
    await create(here)

    async def take(consumer: str) -> None:
        record = await here.acquire(
            TASK,
            consumer,
            lease_ms=1,  # expires at once: the second consumer takes over from the first
            if_pending=event(TASK, f"pending, taken by {consumer}", kind=EventKind.STATUS),
            if_taken_over=event(TASK, f"taken over by {consumer}", kind=EventKind.STATUS),
        )
        assert isinstance(record, TaskRecord)

    with here.feed.running(TASK):
        async with Watcher(log) as watcher:
            await watcher.received(1)
            await take("a")
            await watcher.received(2)
            await asyncio.sleep(0.01)
            await take("b")
            await watcher.received(3)
            await here.commit(TASK, fence=2, fields=fields_of(status=TaskStatus.SUCCEEDED), events=[final()])
            seen = await watcher.finished()
    assert_once_in_order(seen, ["created", "pending, taken by a", "taken over by b", "status SUCCEEDED"])
    assert log.reads == Counter({"XRANGE": 1})  # only the watch's opening read: no gap to fill
