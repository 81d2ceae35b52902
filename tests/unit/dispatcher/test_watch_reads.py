"""What a watch reads from Redis on the replica that runs the task (issue 45): RunTask, which started
the task and knows its status, reads only the events first (no MULTI with the status), and a final
event whose commit left the task terminal ends the watch without reading the status again."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from agentmesh.store import Store
from dispatcher_svc.model import TaskEvent, TaskStatus
from dispatcher_svc.tasks import TaskStore
from tests.unit.dispatcher.test_feed import TASK, commit, create, finish, replica


async def _collect(watch: Any) -> list[TaskEvent]:
    return [e async for e in watch if e.sequence]


async def test_an_opened_watch_reads_the_events_alone_and_ends_at_a_local_terminal_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, log = replica(store)
    await create(here)
    status_reads: list[str] = []
    original = TaskStore.status

    async def counted(self: TaskStore, task_id: str) -> tuple[TaskStatus, int]:
        status_reads.append(task_id)
        return await original(self, task_id)

    monkeypatch.setattr(TaskStore, "status", counted)
    with here.feed.running(TASK):
        watch = log.watch(TASK, 0, opened=(TaskStatus.PENDING, 1))
        first = await anext(watch)  # subscribed, and the first read (the events alone) done
        await commit(here, "a", "b")
        await finish(here)
        rest = await _collect(watch)
    assert [(e.sequence, e.message) for e in [first, *rest]] == [
        (1, "created"),
        (2, "a"),
        (3, "b"),
        (4, "status SUCCEEDED"),
    ]
    assert log.reads == Counter({"XRANGE": 1})  # `read`, not `_open`: no status read with it
    assert status_reads == []  # the terminal commit was published with its end: no read after it


async def test_a_final_event_from_the_stream_still_asks_for_the_status(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminal commit made by another replica is not in this feed: the status is read to end."""
    here, log = replica(store)
    there, _ = replica(store)
    await create(here)
    status_reads: list[str] = []
    original = TaskStore.status

    async def counted(self: TaskStore, task_id: str) -> tuple[TaskStatus, int]:
        status_reads.append(task_id)
        return await original(self, task_id)

    monkeypatch.setattr(TaskStore, "status", counted)
    watch = log.watch(TASK, 0, opened=(TaskStatus.PENDING, 1))
    await anext(watch)
    await finish(there)
    rest = await _collect(watch)
    assert [e.message for e in rest] == ["status SUCCEEDED"]
    assert status_reads == [TASK]


async def test_a_watch_given_the_events_its_caller_wrote_reads_nothing_first_and_misses_nothing(store: Store) -> None:
    # RunTask of a task it created (issue 45): the created event is sent as written, not read back; a
    # commit that landed before the watch subscribed (a run on this replica is quick) is then a gap in
    # the feed, filled from the stream: the events are the stream's, gap-free, as without `written`.
    here, log = replica(store)
    await create(here)
    [created] = await replica(store)[1].read(TASK)  # as the caller wrote it: the stream's own
    await commit(here, "before the watch")
    with here.feed.running(TASK):
        watch = log.watch(TASK, 0, opened=(TaskStatus.PENDING, 1), written=[created])
        first = await anext(watch)
        assert log.reads == Counter()  # the first event came from the caller
        await commit(here, "a")
        await finish(here)
        rest = await _collect(watch)
    assert [(e.sequence, e.message) for e in [first, *rest]] == [
        (1, "created"),
        (2, "before the watch"),
        (3, "a"),
        (4, "status SUCCEEDED"),
    ]
    assert log.reads == Counter({"XRANGE": 1})  # the gap's fill


async def test_written_events_that_are_not_all_of_them_are_read_from_the_stream(store: Store) -> None:
    here, log = replica(store)
    await create(here)
    await commit(here, "x")
    created, _ = await replica(store)[1].read(TASK)
    with here.feed.running(TASK):
        watch = log.watch(TASK, 0, opened=(TaskStatus.PENDING, 2), written=[created])
        await finish(here)
        events = await _collect(watch)
    assert [e.message for e in events] == ["created", "x", "status SUCCEEDED"]
    assert log.reads["XRANGE"] == 1
