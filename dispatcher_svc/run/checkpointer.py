"""A run's checkpoints: every write of its cursor and events is one fenced commit (tasks.py).

A stale owner's commit is refused (StaleOwnerError), so a task taken over never gets a write from
its previous owner. A step's first checkpoint may be in flight while read-only calls run
(`checkpoint_behind`); everything with an effect waits for it (`settle`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from agentmesh.errors import UnavailableError
from agentmesh.redacted import redact_free_text
from dispatcher_svc.events import now_ms
from dispatcher_svc.model import EventKind, PendingApproval, TaskEvent, TaskStatus
from dispatcher_svc.run.state import RunState
from dispatcher_svc.tasks import TaskStore, fields_of

log = logging.getLogger("dispatcher_svc.loop")


class Checkpointer:
    """Events and fenced commits of one run."""

    def __init__(
        self, state: RunState, tasks: TaskStore, *, task_ttl_s: int, on_commit: Callable[[], None] | None = None
    ) -> None:
        self.state = state
        self.tasks = tasks
        self.task_ttl_s = task_ttl_s
        self.on_commit = on_commit
        """Told of every commit that landed (the lease's liveness rule: the run made progress)."""
        # A step-start checkpoint still on its way to Redis (see `checkpoint_behind`).
        self._in_flight: asyncio.Task[None] | None = None

    def event(self, kind: EventKind, message: str = "", **fields: object) -> TaskEvent:
        status = fields.pop("status", self.state.status)
        assert isinstance(status, TaskStatus)
        return TaskEvent(
            task_id=self.state.record.task_id,
            sequence=0,
            kind=kind,
            time_ms=now_ms(),
            status=status,
            step=self.state.cursor.step,
            # The task's events are stored and streamed to clients: a message quoting a tool's or a
            # model's text (arguments, an error) is masked (agentmesh.redacted).
            message=redact_free_text(message),
            **fields,  # type: ignore[arg-type]
        )

    async def commit(
        self,
        events: Sequence[TaskEvent] = (),
        *,
        status: TaskStatus | None = None,
        **fields: object,
    ) -> None:
        await self.settle()
        await self._write(*self._checkpoint(events, status, fields), prompt=self._take_prompt())

    def checkpoint_behind(self, events: Sequence[TaskEvent]) -> None:
        """Starts a checkpoint without waiting for it; `settle()` waits for it.

        Only read-only calls (BuildContext, DiscoverTools) may overlap it: whatever has an effect,
        or costs money (Generate), comes after `settle()`, so a stale owner is still stopped before
        it does anything, and a crash meanwhile resumes from the previous checkpoint as before.
        """
        assert self._in_flight is None, "one checkpoint in flight at a time"
        # Serialised now: the cursor changes while the write is on its way.
        self._in_flight = asyncio.ensure_future(self._write(*self._checkpoint(events, None, {})))

    async def settle(self) -> None:
        """Waits for the checkpoint in flight, if any, raising what it raised (StaleOwnerError)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            await in_flight

    def abandon_in_flight(self) -> None:
        """The run ends with a checkpoint still in flight: it completes on its own (a commit is
        atomic); its outcome no longer matters to this run, but must not go unobserved."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.add_done_callback(lambda done: done.cancelled() or done.exception())

    async def note(self, events: Sequence[TaskEvent]) -> bool:
        """Appends events that change nothing else (an outage wait's): a fenced commit without the
        cursor, whose in-memory state may be half-way through a step. Best effort: False when Redis
        could not take it; StaleOwnerError when another owner has the task."""
        await self.settle()
        try:
            result = await self.tasks.commit(self.state.record.task_id, fence=self.state.fence, events=events)
        except UnavailableError as exc:
            log.info("task %s: event not written (%s)", self.state.record.task_id, exc)
            return False
        self.state.record.last_sequence = result.last_sequence
        self._landed()
        return True

    def _landed(self) -> None:
        if self.on_commit is not None:
            self.on_commit()

    async def index_approval(self, pending: PendingApproval) -> None:
        """Indexes a parking task's approval (before it parks: the expiry sweeper must find it)."""
        await self.tasks.index_approval(self.state.record.task_id, pending.approval_id, pending.expire_time_ms)

    def _take_prompt(self) -> tuple[int, bytes] | None:
        """The step prompt waiting for the next commit (prompts.py): it goes with the reply's checkpoint."""
        prompt, self.state.prompt = self.state.prompt, None
        return prompt

    def _checkpoint(
        self, events: Sequence[TaskEvent], status: TaskStatus | None, fields: dict[str, object]
    ) -> tuple[dict[str, str], Sequence[TaskEvent], int]:
        """The hash fields, events and TTL of a commit of the current state."""
        state = self.state
        if status is not None:
            state.status = status
        values = fields_of(
            status=status,
            step=state.cursor.step,
            usage=state.usage,
            cursor=state.cursor,
            update_ms=now_ms(),
            **fields,  # type: ignore[arg-type]
        )
        terminal = status is not None and status.terminal
        parked = status in (TaskStatus.WAITING_APPROVAL, TaskStatus.WAITING_CHILD)
        if terminal or parked:
            values["lease_until"] = "0"
        return values, tuple(events), self.task_ttl_s if terminal else 0

    async def _write(
        self,
        values: dict[str, str],
        events: Sequence[TaskEvent],
        ttl_s: int,
        *,
        prompt: tuple[int, bytes] | None = None,
    ) -> None:
        state = self.state
        result = await self.tasks.commit(
            state.record.task_id,
            fence=state.fence,
            fields=values,
            events=events,
            ttl_s=ttl_s,
            prompt=prompt,
            agent=state.agent.id,
        )
        state.record.last_sequence = result.last_sequence
        self._landed()
