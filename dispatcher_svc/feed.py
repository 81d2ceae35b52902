"""In-process delivery of committed task events to this replica's own watchers.

Redis is the source of truth for a task's events (events.py). Reading each commit back from the
stream is most of what a watcher costs, though, and the common case is a watcher (RunTask, or
WatchTask routed to the same replica) of a task that this very process runs. So every commit this
process makes is also published here, after Redis accepted it, with its sequence numbers; such a
watcher takes those from memory. It still reads the stream for anything it cannot prove it has:
a gap in the sequences, a buffer that overflowed, and, on a timer while the task runs here, the
events another replica may commit meanwhile (CancelTask, ResolveApproval).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from dispatcher_svc.model import TaskEvent

BUFFER_LIMIT = 1024
"""Events one subscription holds before it gives up buffering (the watcher reads the stream)."""


class Subscription:
    """The events published for one task since this watcher subscribed, until it takes them."""

    def __init__(self, limit: int = BUFFER_LIMIT) -> None:
        self._limit = limit
        self._events: list[TaskEvent] = []
        self._waiter: asyncio.Future[None] | None = None
        self.missed = False
        """Events were dropped (the buffer was full): the watcher must read the stream."""
        self.terminal_at = -1
        """The last sequence of the latest commit published, if that commit left the task terminal
        (-1 otherwise): a final event with this sequence was the log's last, as a status read right
        after that commit would have told (the watcher spares that read: issue 45)."""

    def push(self, events: Sequence[TaskEvent], terminal_at: int = -1) -> None:
        self.terminal_at = terminal_at
        if self.missed or len(self._events) + len(events) > self._limit:
            self._events.clear()
            self.missed = True
        else:
            self._events.extend(events)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> list[TaskEvent]:
        """Everything buffered, oldest first; the buffer is empty after."""
        events, self._events = self._events, []
        return events

    async def wait(self, timeout_s: float) -> bool:
        """Waits until something is published (True) or `timeout_s` passes (False)."""
        if self._events or self.missed:
            return True
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout_s, _time_out, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        return bool(self._events) or self.missed


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class LocalFeed:
    """Fans this process's committed events out to its subscribed watchers (one event loop)."""

    def __init__(self, buffer_limit: int = BUFFER_LIMIT) -> None:
        self._buffer_limit = buffer_limit
        self._subscriptions: dict[str, set[Subscription]] = {}
        self._running: Counter[str] = Counter()

    def publish(self, task_id: str, events: Sequence[TaskEvent], terminal_at: int = -1) -> None:
        """Events Redis has just accepted for `task_id`, with their sequence numbers; `terminal_at`:
        the commit's last sequence if it left the task terminal, else -1."""
        for subscription in self._subscriptions.get(task_id, ()):
            subscription.push(events, terminal_at)

    @contextmanager
    def subscribe(self, task_id: str, opened: Subscription | None = None) -> Iterator[Subscription]:
        """Buffers the task's events published from now on, while the block lasts; `opened`, one `open`
        made earlier, is used instead (and closed with the block)."""
        subscription = opened if opened is not None else self.open(task_id)
        try:
            yield subscription
        finally:
            self.close(task_id, subscription)

    def open(self, task_id: str) -> Subscription:
        """A subscription from now on, until `close` (RunTask's, opened before its task is created)."""
        subscription = Subscription(self._buffer_limit)
        self._subscriptions.setdefault(task_id, set()).add(subscription)
        return subscription

    def close(self, task_id: str, subscription: Subscription) -> None:
        """Ends a subscription (again: nothing)."""
        subscribers = self._subscriptions.get(task_id)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscriptions[task_id]

    @contextmanager
    def running(self, task_id: str) -> Iterator[None]:
        """Marks the task as run by this process while the block lasts: its commits come from here."""
        self._running[task_id] += 1
        try:
            yield
        finally:
            self._running[task_id] -= 1
            if self._running[task_id] <= 0:
                del self._running[task_id]

    def is_running(self, task_id: str) -> bool:
        return task_id in self._running

    def subscribers(self, task_id: str) -> int:
        return len(self._subscriptions.get(task_id, ()))
