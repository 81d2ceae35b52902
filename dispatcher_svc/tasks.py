"""Task state in Redis: one hash per task and its event stream (records, fenced commits, leases).

The work queue is `dispatcher_svc.queue`, the Lua scripts `dispatcher_svc.task_scripts`. Every
write to a task is one Lua script (`COMMIT_LUA`) that checks the writer's fencing number first:
acquiring a task increments `fence`, so a stale owner (paused, partitioned, slow) that wakes up after
another replica took over has its next write refused and stops. The same script appends the write's
events to the stream with contiguous sequences (ids `0-<seq>`): state and log never disagree.

Keys: `am:task:{<id>}` (hash), `:events` (stream) and `:prompts` (each step's provider request,
`dispatcher_svc.prompts`) share a hash tag (one slot, one TTL); `am:tasks`, `am:tasks:waiting`
(parked tasks by approval expiry, for the sweeper) and `am:tasks:index` (every task by create time,
for ListTasks: `dispatcher_svc.task_index`) are touched by single commands or their own scripts.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentmesh.config import DispatcherSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.metrics import Metrics
from agentmesh.store import Store
from dispatcher_svc import task_create
from dispatcher_svc.agent_load import AgentLoad
from dispatcher_svc.feed import LocalFeed
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.model_json import event_to_json
from dispatcher_svc.queue import ENQUEUE_LUA
from dispatcher_svc.task_create import Created, FirstRun
from dispatcher_svc.task_record import (
    STATUS_FIELDS,
    CallState,
    Cursor,
    StaleOwnerError,
    TaskExistsError,
    TaskRecord,
    WrongStatusError,
    fields_of,
    parse_status,
    task_not_found,
)
from dispatcher_svc.task_scripts import ACQUIRE_LUA, COMMIT_LUA, CREATE_TAKE_LUA, DUE_APPROVALS_LUA

# The record types live in task_record.py; importers of this module keep finding them here.
__all__ = [
    "STATUS_FIELDS",
    "UNKNOWN_EXPIRY_RECHECK_MS",
    "CallState",
    "CommitResult",
    "Created",
    "Cursor",
    "FirstRun",
    "StaleOwnerError",
    "TaskExistsError",
    "TaskRecord",
    "TaskStore",
    "WrongStatusError",
    "fields_of",
    "parse_status",
    "task_not_found",
]

UNKNOWN_EXPIRY_RECHECK_MS = 60_000
"""An approval without a known expiry is looked at this often (tool_svc says whether it expired)."""

_OK, _STALE, _WRONG_STATUS, _MISSING, _EXISTS = 1, 0, -1, -2, -3


@dataclass(frozen=True)
class CommitResult:
    fence: int
    status: TaskStatus
    last_sequence: int


class TaskStore:
    """Reads and fenced writes of task hashes and event streams."""

    def __init__(
        self,
        store: Store,
        settings: DispatcherSettings,
        feed: LocalFeed | None = None,
        metrics: Metrics | None = None,
        agent_load: AgentLoad | None = None,
    ) -> None:
        self.store = store
        self.agent_load = agent_load
        """The agents' unfinished-task sets and outcome counters (agent_load.py), kept after each write."""
        self.settings = settings
        self.metrics = metrics or Metrics()  # every status a commit enters (`agentmesh.tasks`)
        self.feed = feed if feed is not None else LocalFeed()  # also gets this process's committed events
        self.on_end: Callable[[str], Awaitable[None]] | None = None
        """Awaited with the task id after a commit that ended a task (wakes a workflow run: wakes.py)."""
        self.commit_script = store.script("dispatcher_commit", COMMIT_LUA, durable=True)
        self.create_script = store.script("dispatcher_create_take", CREATE_TAKE_LUA, durable=True)
        self._acquire = store.script("dispatcher_acquire", ACQUIRE_LUA, durable=True)
        self._due = store.script("dispatcher_due_approvals", DUE_APPROVALS_LUA)
        self.pipelined = store.cluster is None and not store.settings.cluster_wait_replicas
        """A single Redis, writes not waiting for replicas: a create is one script (task_create.py)."""
        self.index_key = store.keys.tasks_index()
        """Every task id by create time (ms), written before the task: ListTasks' index (task_index.py)."""
        self.waiting_key = f"{store.keys.prefix}:tasks:waiting"
        """Parked tasks ("<task id> <approval id>") by their approval's expiry (ms): the expiry sweeper's
        index, a superset of them (added before the task parks, removed after it left WAITING_APPROVAL: a
        crash leaves a stale member, which the sweeper drops, never a parked task it cannot find)."""

    def _keys(self, task_id: str) -> list[str]:
        return [self.store.keys.task(task_id), self.store.keys.task_events(task_id)]

    def commit_keys(self, task_id: str) -> list[str]:
        return [*self._keys(task_id), self.store.keys.task_prompts(task_id)]

    async def load(self, task_id: str) -> TaskRecord:
        """The task; NotFoundError naming task_id when there is none."""
        raw: Any = await self.store.call("load task", self.store.redis.hgetall(self.store.keys.task(task_id)))
        if not raw:
            raise task_not_found(task_id)
        return TaskRecord.from_hash(raw)

    async def exists(self, task_id: str) -> bool:
        found: Any = await self.store.call("task exists", self.store.redis.exists(self.store.keys.task(task_id)))
        return bool(found)

    async def status(self, task_id: str) -> tuple[TaskStatus, int]:
        """The task's status and last sequence (a light read); NotFoundError naming task_id."""
        raw: Any = await self.store.call(
            "task status", self.store.redis.hmget(self.store.keys.task(task_id), list(STATUS_FIELDS))
        )
        return parse_status(task_id, raw)

    async def creator(self, task_id: str) -> tuple[str, str]:
        """(creator subject, creator agent id) of the task (a light read); NotFoundError naming task_id."""
        raw: Any = await self.store.call(
            "task creator",
            self.store.redis.hmget(self.store.keys.task(task_id), ["status", "creator", "creator_agent"]),
        )
        if raw[0] is None:
            raise task_not_found(task_id)
        creator, agent = (value.decode("utf-8", "replace") if value else "" for value in raw[1:])
        return creator, agent

    async def acquire(
        self, task_id: str, consumer: str, *, lease_ms: int, if_pending: TaskEvent, if_taken_over: TaskEvent
    ) -> TaskRecord | TaskStatus | None:
        """Takes the task for `consumer` in one round trip: the record with the new fence; the status
        when there is nothing to run (finished, parked, gone: UNSPECIFIED); None when a live owner holds it."""
        args: list[str | int] = [
            consumer,
            lease_ms,
            self.settings.event_maxlen,
            event_to_json(if_pending),
            event_to_json(if_taken_over),
            if_pending.time_ms,
        ]
        async with self.store.guard("acquire task"):
            reply: Any = await self._acquire(keys=self._keys(task_id), args=args)
        code = int(reply[0])
        if code == _MISSING:
            return TaskStatus.UNSPECIFIED
        if code == 0:
            return TaskStatus(int(reply[1]))
        if code == -1:
            return None
        record = self.taken(task_id, reply[2], if_pending if int(reply[3]) == TaskStatus.PENDING else if_taken_over)
        # A new task joined its agent's set in its create's own script (issue 45); else this heals it.
        if self.agent_load is not None and (int(reply[3]) != TaskStatus.PENDING or not self.pipelined):
            await self.agent_load.entered(record.agent_id, task_id)
        return record

    def taken(self, task_id: str, flat: Sequence[bytes], appended: TaskEvent) -> TaskRecord:
        """The record a script that took a task returned (field/value pairs, later ones win), counted
        RUNNING; its watchers here get the RUNNING event it appended from memory, as a commit's."""
        record = TaskRecord.from_hash(dict(zip(flat[::2], flat[1::2], strict=True)))
        self.metrics.task_status(record.agent_id, TaskStatus.RUNNING.name)
        if self.feed.subscribers(task_id):
            self.feed.publish(task_id, [appended.with_sequence(record.last_sequence)])
        return record

    async def load_scripts(self) -> None:
        """Loads the scripts a create sends (a start-up check that Redis runs them; each reloads on NOSCRIPT)."""
        async with self.store.guard("load scripts"):
            await self.store.redis.script_load(CREATE_TAKE_LUA)
            await self.store.redis.script_load(COMMIT_LUA)
            await self.store.redis.script_load(ENQUEUE_LUA)

    create = task_create.create
    """Creates the task and queues it in one round trip; with `take`, also reads the next new queue entry
    for this replica, and with `first_run` takes the task when that entry is its own (task_create.py)."""

    async def redis_time_ms(self) -> int:
        now: Any = await self.store.call("time", self.store.redis.time())
        seconds, micros = now
        return int(seconds) * 1000 + int(micros) // 1000

    async def fail_unexpectedly(self, record: TaskRecord, exc: Exception, *, ttl_s: int) -> None:
        """Ends a run that raised: FAILED with the error (INTERNAL, naming only its type, for one
        that is not ours), if the run still holds the task; a refused write is left as it is."""
        err = (
            exc
            if isinstance(exc, AgentmeshError)  # e.g. the task's agent was removed from the configuration
            else AgentmeshError(ErrorCode.INTERNAL, f"the dispatcher failed unexpectedly: {type(exc).__name__}")
        )
        now = int(time.time() * 1000)
        event = TaskEvent(
            task_id=record.task_id,
            sequence=0,
            kind=EventKind.STATUS,
            time_ms=now,
            status=TaskStatus.FAILED,
            step=record.cursor.step,
            message=f"status FAILED: {err}",
            error=err,
        )
        with contextlib.suppress(AgentmeshError):
            await self.commit(
                record.task_id,
                fence=record.fence,
                fields=fields_of(status=TaskStatus.FAILED, error=err, update_ms=now, lease_until=0),
                events=[event],
                ttl_s=ttl_s,
                agent=record.agent_id,
            )

    async def commit(
        self,
        task_id: str,
        *,
        fence: int | None,
        fields: Mapping[str, str] | None = None,
        events: Sequence[TaskEvent] = (),
        expect_status: TaskStatus | None = None,
        bump_fence: bool = False,
        lease_ms: int = 0,
        ttl_s: int = 0,
        prompt: tuple[int, bytes] | None = None,
        agent: str = "",
    ) -> CommitResult:
        """Applies `fields` and appends `events` atomically if the task's fence is still `fence`; `prompt`
        (step, record: dispatcher_svc.prompts) stores a step's prompt in the same write. A status set is
        counted in the metrics under `agent`. `fence=None` creates the task (TaskExistsError if it exists);
        StaleOwnerError when another owner took over, WrongStatusError when `expect_status` does not hold."""
        args: list[str | int | bytes] = [
            "" if fence is None else str(fence),
            "" if expect_status is None else str(int(expect_status)),
            "1" if bump_fence else "0",
            lease_ms,
            self.settings.event_maxlen,
            ttl_s,
            len(fields or {}),
            *((str(prompt[0]), prompt[1]) if prompt is not None else ("", "")),
            "1" if self.settings.pack_events else "0",
        ]
        for key, value in (fields or {}).items():
            args += [key, value]
        args += [event_to_json(e) for e in events]
        async with self.store.guard("commit task"):
            reply = await self.commit_script(keys=self.commit_keys(task_id), args=args)
        code, current_fence, status_num, last_seq = (int(x) for x in reply[:4])
        status = TaskStatus(status_num) if status_num in TaskStatus._value2member_map_ else TaskStatus.UNSPECIFIED
        if code == _OK:
            # First: RunTask's stream need not wait for the bookkeeping's round trip below (issue 45).
            if events and self.feed.subscribers(task_id):  # most commits have no watcher here
                first = last_seq - len(events) + 1
                ended = last_seq if status.terminal else -1
                self.feed.publish(task_id, [e.with_sequence(first + i) for i, e in enumerate(events)], ended)
            if entered := (fields or {}).get("status"):
                self.metrics.task_status(agent, TaskStatus(int(entered)).name)
                await self._count(task_id, agent, TaskStatus(int(entered)), int(reply[4]))
                if self.on_end is not None and TaskStatus(int(entered)).terminal:
                    await self.on_end(task_id)
            return CommitResult(current_fence, status, last_seq)
        if code == _STALE:
            raise StaleOwnerError(
                f"task {task_id}: fence {fence} is stale (now {current_fence}); another owner took over",
                metadata={"task_id": task_id, "fence": str(fence), "current_fence": str(current_fence)},
            )
        if code == _WRONG_STATUS:
            raise WrongStatusError(
                f"task {task_id} is {status.name}, not {expect_status.name if expect_status else ''}", status
            )
        if code == _MISSING:
            raise task_not_found(task_id)
        raise TaskExistsError(f"task {task_id} already exists", metadata={"status": status.name})

    # -- handoff trees (issue 44) ----------------------------------------------------------------

    async def add_to_tree(self, root_task_id: str, task_id: str) -> None:
        """Records a task a handoff created under its root (before the task: a cancel finds it)."""
        key = self.store.keys.task_tree(root_task_id)
        async with self.store.guard("task tree"):
            await self.store.redis.sadd(key, task_id)
            await self.store.redis.expire(key, self.settings.task_ttl_s * 2)

    async def tree(self, root_task_id: str) -> list[str]:
        """The tasks handoffs created under a root task."""
        key = self.store.keys.task_tree(root_task_id)
        raw: Any = await self.store.call("task tree", self.store.redis.smembers(key))
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in raw or ())

    async def _count(self, task_id: str, agent: str, entered: TaskStatus, before: int) -> None:
        """The agent's load after a commit that set a status: a task ending leaves its set (its outcome
        counted if this commit ended it), a task resumed joins it again."""
        if self.agent_load is None:
            return
        was_finished = before in TaskStatus._value2member_map_ and TaskStatus(before).terminal
        if entered.terminal:
            await self.agent_load.ended(agent, task_id, entered, first=not was_finished)
        elif was_finished:
            await self.agent_load.entered(agent, task_id)

    # -- the index of parked tasks, read by the approval-expiry sweeper ----------------------------

    async def index_approval(self, task_id: str, approval_id: str, expire_ms: int) -> None:
        """Adds (or re-scores) a parked task: due when its approval expires."""
        score = expire_ms or int(time.time() * 1000) + UNKNOWN_EXPIRY_RECHECK_MS
        async with self.store.guard("index approval"):
            await self.store.redis.zadd(self.waiting_key, {_waiting_member(task_id, approval_id): score})

    async def reindex_approval(self, task_id: str, approval_id: str, due_ms: int) -> None:
        """Makes an indexed task due again at `due_ms` (never re-adds one removed meanwhile)."""
        async with self.store.guard("index approval"):
            await self.store.redis.zadd(self.waiting_key, {_waiting_member(task_id, approval_id): due_ms}, xx=True)

    async def unindex_approval(self, task_id: str, approval_id: str) -> None:
        async with self.store.guard("unindex approval"):
            await self.store.redis.zrem(self.waiting_key, _waiting_member(task_id, approval_id))

    async def due_approvals(self, limit: int, hold_ms: int) -> list[tuple[str, str]]:
        """Parked tasks whose approval is due, as (task id, approval id), taken for `hold_ms`."""
        async with self.store.guard("due approvals"):
            reply: Any = await self._due(keys=[self.waiting_key], args=[hold_ms, limit])
        due: list[tuple[str, str]] = []
        for raw in reply or ():
            task_id, _, approval_id = (raw.decode() if isinstance(raw, bytes) else str(raw)).partition(" ")
            due.append((task_id, approval_id))
        return due


def _waiting_member(task_id: str, approval_id: str) -> str:
    return f"{task_id} {approval_id}"  # task ids never hold a space
