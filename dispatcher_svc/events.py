"""A task's event log: a Redis Stream per task, read back in order, live, with heartbeats.

Events are written only by `TaskStore.commit` (atomically with the state they describe), under
stream ids `0-<sequence>`, so a watcher resumes exactly after the last sequence it saw
(`WatchTask(after_sequence)`) and sees every later event once. The stream is capped by MAXLEN
(approximate); a watcher that asks for events older than the oldest kept one gets the log from
there on, with `attributes["events_trimmed"]` on the first event it receives.

A watch follows the task: it ends after the terminal STATUS event that holds the task's current
status, the last event of its log. A FAILED task resumed by StartTask logs more events after its
FAILED one, so a watch passes that FAILED event on and goes on to the resumed run's end. While
nothing happens (a task waiting for an approval, a long model call) the watcher gets a HEARTBEAT
every `heartbeat_interval_s`, so proxies and meshes keep the stream open.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from agentmesh.errors import NotFoundError
from agentmesh.store import Store
from dispatcher_svc.feed import Subscription
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.model_json import event_from_dict, event_from_json
from dispatcher_svc.tasks import STATUS_FIELDS, TaskStore, parse_status

FOREIGN_POLL_S = 0.5
"""While a watched task runs in this process, how often the stream is read for events that other
replicas commit (a CancelTask or ResolveApproval served elsewhere): their delay, at most. The
default of `dispatcher.foreign_event_poll_s`."""


def now_ms() -> int:
    return int(time.time() * 1000)


def heartbeat(task_id: str) -> TaskEvent:
    """A heartbeat: sequence 0, no state."""
    return TaskEvent(task_id=task_id, sequence=0, kind=EventKind.HEARTBEAT, time_ms=now_ms())


def is_final(event: TaskEvent) -> bool:
    """Whether this event ends the task as it stands (a FAILED task may still be resumed, and a
    resumed task logs more events: `EventLog.watch` ends only at the last of them)."""
    return event.kind == EventKind.STATUS and event.status.terminal


class EventLog:
    """Reads the events of tasks."""

    def __init__(
        self, store: Store, tasks: TaskStore, heartbeat_interval_s: float, foreign_poll_s: float | None = None
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.heartbeat_interval_s = heartbeat_interval_s
        self.foreign_poll_s = FOREIGN_POLL_S if foreign_poll_s is None else foreign_poll_s
        # A blocking read must end before the socket timeout, or redis-py reports a dead server.
        self.block_ms = max(10, int(min(heartbeat_interval_s, store.settings.socket_timeout_s * 0.5) * 1000))

    async def read(self, task_id: str, after: int = 0, count: int = 1000) -> list[TaskEvent]:
        """Events with a sequence above `after` (of at most `count` stream entries)."""
        key = self.store.keys.task_events(task_id)
        raw: Any = await self.store.call("read events", self.store.redis.xrange(key, min=f"0-{after + 1}", count=count))
        return decode_entries(task_id, raw, after)

    async def _open(self, task_id: str, after: int, count: int = 1000) -> tuple[TaskStatus, int, list[TaskEvent]]:
        """The task's status and last sequence, and its events above `after`, in one round trip (a
        MULTI, so both describe the same moment); NotFoundError naming task_id."""
        pipe = self.store.redis.pipeline(transaction=True)
        pipe.hmget(self.store.keys.task(task_id), list(STATUS_FIELDS))
        pipe.xrange(self.store.keys.task_events(task_id), min=f"0-{after + 1}", count=count)
        raw_status, raw_events = await self.store.call("open watch", pipe.execute())
        status, last_sequence = parse_status(task_id, raw_status)
        return status, last_sequence, decode_entries(task_id, raw_events, after)

    async def watch(
        self,
        task_id: str,
        after: int = 0,
        *,
        admit: Callable[[], Awaitable[None]] | None = None,
        opened: tuple[TaskStatus, int] | None = None,
        written: Sequence[TaskEvent] = (),
        subscription: Subscription | None = None,
    ) -> AsyncIterator[TaskEvent]:
        """Every event after `after`, then live ones, until the task's final event; heartbeats between.

        Events this process commits come from its LocalFeed while the task runs here; everything
        else (catching up, gaps, other replicas' commits) comes from the stream. `admit`, when given,
        is awaited first and raises to refuse the watcher (the dispatcher's access check). `opened`:
        the task's status and last sequence as the caller just read or wrote them (RunTask: the task
        it started), so only the events are read first, not the status with them (issue 45). `written`:
        the events the caller wrote up to that last sequence; when they are every one after `after`,
        they are sent as they are and nothing is read first. `subscription`: the feed's, opened by the
        caller before it wrote them (so this watch misses none of the later commits here); closed here.
        """
        if admit is not None:
            await admit()
        after = max(after, 0)
        feed = self.tasks.feed
        with feed.subscribe(task_id, subscription) as local:
            # What happened before we subscribed is only in the stream: read with the status.
            before: list[TaskEvent] | None = None
            if opened is None:
                status, last_sequence, before = await self._open(task_id, after)  # NotFoundError if unknown
            else:
                status, last_sequence = opened
                if [e.sequence for e in written] == list(range(after + 1, last_sequence + 1)) and written:
                    before = list(written)  # all of them: the stream would answer the same
            if status.terminal and last_sequence <= after:
                return  # nothing more will come
            # A terminal event ends the watch only if it is the last event of the log: the task's
            # sequence when it was last read, and where it stood terminal then (-1: not terminal).
            known_last = last_sequence
            terminal_at = last_sequence if status.terminal else -1
            last = after
            must_read = before is None  # opened: the first read is of the events alone
            first_read: list[TaskEvent] | None = before
            last_sent = time.monotonic()
            while True:
                mine = local.take()
                if local.missed:
                    local.missed = False
                    must_read = True
                if first_read is not None:
                    stored, first_read = first_read, None
                elif must_read:
                    must_read = False
                    stored = await self.read(task_id, last)
                elif mine:
                    stored = []
                elif feed.is_running(task_id):
                    until_heartbeat = self.heartbeat_interval_s - (time.monotonic() - last_sent)
                    wait_s = min(self.foreign_poll_s, max(0.0, until_heartbeat))
                    if await local.wait(wait_s):
                        continue
                    stored = await self.read(task_id, last)  # another replica's commits (cancel, approval)
                else:
                    stored = await self._read_blocking(task_id, last)
                delivered = False
                # The stream is the truth: a jump in it means trimmed events; a jump in ours, a gap.
                for candidate, from_stream in [*((e, True) for e in stored), *((e, False) for e in mine)]:
                    event = candidate
                    if event.sequence <= last:
                        continue
                    if event.sequence > last + 1:
                        if not from_stream:
                            must_read = True
                            break
                        if last == after:
                            trimmed = str(event.sequence - after - 1)
                            event = replace(event, attributes={**event.attributes, "events_trimmed": trimmed})
                    last = event.sequence
                    delivered = True
                    yield event
                    last_sent = time.monotonic()
                    if is_final(event) and event.sequence >= known_last:
                        if event.sequence == terminal_at or (not from_stream and event.sequence == local.terminal_at):
                            return
                        current = await self._current(task_id)
                        if current is None:
                            return  # expired: nothing can follow
                        known_last = max(known_last, current[1])
                        if current[0].terminal and current[1] <= event.sequence:
                            return
                if delivered or must_read:
                    continue
                if time.monotonic() - last_sent >= self.heartbeat_interval_s:
                    # The log may have been trimmed past a terminal event, or expired: stop then.
                    status, last_sequence = await self.tasks.status(task_id)
                    if status.terminal and last_sequence <= last:
                        return
                    yield heartbeat(task_id)
                    last_sent = time.monotonic()

    async def _current(self, task_id: str) -> tuple[TaskStatus, int] | None:
        """The task's status and last sequence now; None once it has expired."""
        try:
            return await self.tasks.status(task_id)
        except NotFoundError:
            return None

    async def _read_blocking(self, task_id: str, after: int) -> list[TaskEvent]:
        """Events above `after`, waiting up to `block_ms` for the first one."""
        key = self.store.keys.task_events(task_id)
        async with self.store.guard("watch events", blocking=True):
            reply: Any = await self.store.redis.xread({key: f"0-{after}"}, count=256, block=self.block_ms)
        return [event for _, entries in reply or () for event in decode_entries(task_id, entries, after)]


def decode_entries(task_id: str, entries: Any, after: int = 0) -> list[TaskEvent]:
    """The events above `after` in stream entries read from a task's stream, in order.

    An entry `0-<sequence>` holds one event (field `e`), or, written with `dispatcher.pack_events`, the
    events of one commit ending at that sequence (field `b`, a JSON array: issue 45). A read from
    `0-<after + 1>` can start inside a packed entry: the events up to `after` are left out here.
    """
    events: list[TaskEvent] = []
    for msg_id, fields in entries:
        sequence = int(msg_id.split(b"-", 1)[1])
        one = fields.get(b"e")
        if one is not None:
            if sequence > after:
                events.append(event_from_json(task_id, sequence, one))
            continue
        packed = json.loads(fields[b"b"])
        first = sequence - len(packed) + 1
        events += [event_from_dict(task_id, first + i, data) for i, data in enumerate(packed) if first + i > after]
    return events
