"""`dispatcher.pack_events` (issue 45): a commit's events as one stream entry, read back as the same
events, in order, gap-free, from any sequence, beside entries of one event each (a stream written partly
before the setting was turned on; on by default since)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agentmesh.config import DispatcherSettings
from agentmesh.store import Store
from dispatcher_svc.events import decode_entries, now_ms
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.tasks import TaskStore, fields_of
from tests.unit.dispatcher.conftest import MakeRig
from tests.unit.dispatcher.fakes import FakeTools
from tests.unit.dispatcher.test_commit_commands import commands, spent
from tests.unit.dispatcher.test_loop import calculator, one_call_then_answer

TASK = "t-packed"


def event(message: str) -> TaskEvent:
    return TaskEvent(task_id=TASK, sequence=0, kind=EventKind.STATUS, time_ms=now_ms(), message=message)


async def test_a_packed_commit_is_one_xadd_read_back_as_its_events(store: Store) -> None:
    plain = TaskStore(store, DispatcherSettings(pack_events=False))
    packed = TaskStore(store, DispatcherSettings())  # on by default
    await plain.commit(TASK, fence=None, fields=fields_of(status=TaskStatus.PENDING), events=[event("created")])
    await plain.commit(TASK, fence=0, events=[event("a"), event("b")])  # written before the switch
    before = await commands(store)
    result = await packed.commit(TASK, fence=0, events=[event("c"), event("d"), event("e")])
    assert await spent(store, before) == Counter({"evalsha": 1, "hmget": 1, "hset": 1, "xadd": 1})
    assert result.last_sequence == 6
    await packed.commit(TASK, fence=0, events=[event("f")])  # one event: an entry any release reads
    stream: Any = await store.redis.xrange(store.keys.task_events(TASK))
    assert [entry_id.decode() for entry_id, _ in stream] == ["0-1", "0-2", "0-3", "0-6", "0-7"]
    assert [sorted(fields) for _, fields in stream] == [[b"e"]] * 3 + [[b"b"]] + [[b"e"]]
    for after in range(8):
        events = decode_entries(TASK, stream, after)
        assert [e.sequence for e in events] == list(range(after + 1, 8))
        assert [e.message for e in events] == ["created", "a", "b", "c", "d", "e", "f"][after:]


async def test_a_task_with_packed_events_streams_the_same_events_from_any_sequence(make_rig: MakeRig) -> None:
    runs = []
    for pack in (False, True):
        rig = await make_rig(one_call_then_answer, FakeTools({"calc": calculator}), dispatcher={"pack_events": pack})
        task_id = await rig.start("add 2 and 3")
        events = await rig.events(task_id)
        assert events[-1].status == TaskStatus.SUCCEEDED
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        stream: Any = await rig.store.redis.xrange(rig.store.keys.task_events(task_id))
        # The ended task is read back from the stream: every suffix, whichever entry it starts in.
        for after in range(len(events) + 1):
            assert await rig.events(task_id, after=after) == events[after:]
        runs.append(([(e.kind, e.status, e.step) for e in events], len(stream)))  # messages name the replica
    (plain, plain_entries), (packed, packed_entries) = runs
    assert packed == plain
    assert packed_entries < plain_entries == len(plain)
