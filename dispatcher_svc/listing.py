"""ListTasks and ListApprovals: filtered, paged reads of the task index and of the waiting set.

- **ListTasks** pages `am:tasks:index` (task_index.py) newest first with a keyset cursor carried in a
  signed page token (pagetoken.py), loads each task's hash, skips the ids whose hash is gone, and keeps
  the tasks that match the filters and that the caller may see: the rule of GetTask (access.py), the
  task's creator or an operator. At most MAX_EXAMINED index entries are looked at per call: when the
  filters skip that many, the page is short (maybe empty) and a next_page_token continues.
- **ListApprovals** reads the set of parked tasks (`am:tasks:waiting`, the approval sweeper's index),
  keeps those still WAITING_APPROVAL on that approval, visible to the caller and matching the filters,
  oldest first (the time the task parked, then its id).

page_size: 0 reads as DEFAULT_PAGE_SIZE, more than MAX_PAGE_SIZE as MAX_PAGE_SIZE, negative is
INVALID_REQUEST. Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentmesh.errors import AgentmeshError, InvalidRequestError
from agentmesh.identity_value import Identity
from dispatcher_svc.access import Creator, is_creator, is_operator
from dispatcher_svc.model import PendingApproval, Task, TaskStatus
from dispatcher_svc.pagetoken import PageCursor, PageTokens, filter_hash
from dispatcher_svc.task_index import IndexEntry, TaskIndex
from dispatcher_svc.tasks import TaskRecord, TaskStore

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_EXAMINED",
    "MAX_PAGE_SIZE",
    "ApprovalFilter",
    "Listing",
    "TaskApproval",
    "TaskFilter",
    "page_size_of",
]

log = logging.getLogger("dispatcher_svc.listing")

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
MAX_EXAMINED = 1000
"""Index entries looked at per ListTasks call at most."""
MAX_WAITING = 10_000
"""Parked tasks ListApprovals reads at most."""
APPROVAL_KINDS = ("", "approval", "settlement")
VIEW_FIELDS = (
    *("task_id", "agent_id", "goal", "status", "step", "usage", "answer", "error", "session_id", "request_id"),
    *("pending", "last_sequence", "create_ms", "update_ms", "creator", "creator_agent"),
    *("output_json", "output_schema", "parent_task_id", "root_task_id", "child_task_id"),
)
"""The hash fields a listed task needs (not the loop's cursor, which can be large)."""


def page_size_of(value: int) -> int:
    if value < 0:
        raise InvalidRequestError("page_size", f"must be >= 0 (0 for {DEFAULT_PAGE_SIZE}), got {value}")
    return min(value, MAX_PAGE_SIZE) if value else DEFAULT_PAGE_SIZE


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """ListTasks' filters; empty / None matches everything."""

    agent_id: str = ""
    status: TaskStatus = TaskStatus.UNSPECIFIED
    created_by: str = ""
    root_task_id: str = ""
    """The task that opened a conversation or a handoff tree: it, the tasks continuing its session and
    the tasks its handoffs created."""
    created_after_ms: int | None = None
    """Inclusive."""
    created_before_ms: int | None = None
    """Exclusive."""

    def digest(self) -> str:
        return filter_hash(
            {
                "agent": self.agent_id,
                "status": int(self.status),
                "by": self.created_by,
                "root": self.root_task_id,
                "after": "" if self.created_after_ms is None else self.created_after_ms,
                "before": "" if self.created_before_ms is None else self.created_before_ms,
            }
        )

    def matches(self, record: TaskRecord) -> bool:
        return (
            (not self.agent_id or record.agent_id == self.agent_id)
            and self.status in (TaskStatus.UNSPECIFIED, record.status)
            and (not self.created_by or record.creator == self.created_by)
            and (not self.root_task_id or self.root_task_id in (record.session_id, record.task_id, record.root))
        )


@dataclass(frozen=True, slots=True)
class ApprovalFilter:
    """ListApprovals' filters."""

    agent_id: str = ""
    kind: str = ""
    """"approval", "settlement" or "" for both."""

    def digest(self) -> str:
        return filter_hash({"agent": self.agent_id, "kind": self.kind})


@dataclass(frozen=True, slots=True)
class TaskApproval:
    """A task waiting for a human."""

    task_id: str
    agent_id: str
    kind: str
    """"approval" or "settlement"."""
    pending: PendingApproval
    wait_time_ms: int
    created_by: str
    goal: str


def _visible(caller: Identity, record: TaskRecord) -> bool:
    return is_operator(caller) or is_creator(caller, Creator(record.creator, record.creator_agent))


class Listing:
    """The two list operations over one TaskStore and its index."""

    def __init__(self, tasks: TaskStore, index: TaskIndex, secret: str | None) -> None:
        self.tasks = tasks
        self.index = index
        self.task_tokens = PageTokens(secret, "tasks")
        self.approval_tokens = PageTokens(secret, "approvals")

    async def _load(self, task_ids: Sequence[str]) -> list[TaskRecord | None]:
        if not task_ids:
            return []
        store = self.tasks.store
        async with store.guard("list tasks"):
            pipe = store.redis.pipeline(transaction=False)
            for task_id in task_ids:
                pipe.hmget(store.keys.task(task_id), list(VIEW_FIELDS))
            rows: list[Any] = await pipe.execute()
        records: list[TaskRecord | None] = []
        for row in rows:
            fields = {name.encode(): value for name, value in zip(VIEW_FIELDS, row, strict=True) if value is not None}
            records.append(TaskRecord.from_hash(fields) if b"status" in fields else None)
        return records

    async def list_tasks(
        self, filters: TaskFilter, page_size: int, page_token: str, *, caller: Identity
    ) -> tuple[list[Task], str]:
        """One page of the tasks `caller` may see, newest first, and the next page's token ("" at the end)."""
        size = page_size_of(page_size)
        after, before = filters.created_after_ms, filters.created_before_ms
        if after is not None and before is not None and before <= after:
            raise InvalidRequestError("created_before", "must be later than created_after")
        digest = filters.digest()
        cursor: IndexEntry | None = None
        if page_token:
            parsed = self.task_tokens.parse(page_token, digest)
            cursor = IndexEntry(parsed.ms, parsed.id)
        found: list[Task] = []
        examined = 0
        ended = False
        while len(found) < size and examined < MAX_EXAMINED:
            want = min(MAX_EXAMINED - examined, max(size - len(found), 100))
            entries = await self.index.page(
                want, after=cursor, min_ms=after, max_ms=None if before is None else before - 1
            )
            records = await self._load([e.task_id for e in entries])
            used = 0
            for entry, record in zip(entries, records, strict=True):
                cursor, used, examined = entry, used + 1, examined + 1
                if record is not None and filters.matches(record) and _visible(caller, record):
                    found.append(record.view())
                    if len(found) >= size:
                        break
            if len(entries) < want:
                ended = used == len(entries)
                break
        if ended or cursor is None:
            return found, ""
        return found, self.task_tokens.issue(PageCursor(cursor.create_ms, cursor.task_id), digest)

    async def list_approvals(
        self, filters: ApprovalFilter, page_size: int, page_token: str, *, caller: Identity
    ) -> tuple[list[TaskApproval], str]:
        """One page of the tasks waiting for a human that `caller` may see, oldest first."""
        size = page_size_of(page_size)
        if filters.kind not in APPROVAL_KINDS:
            raise InvalidRequestError("kind", f"unknown kind {filters.kind!r}")
        digest = filters.digest()
        cursor = self.approval_tokens.parse(page_token, digest) if page_token else None
        store = self.tasks.store
        raw: Any = await store.call("list approvals", store.redis.zrange(self.tasks.waiting_key, 0, MAX_WAITING - 1))
        parked: dict[str, str] = {}
        for member in raw:
            task_id, _, approval_id = (member.decode() if isinstance(member, bytes) else str(member)).partition(" ")
            parked.setdefault(task_id, approval_id)
        waiting: list[TaskApproval] = []
        for record in await self._load(list(parked)):
            if record is None or record.status != TaskStatus.WAITING_APPROVAL or record.pending is None:
                continue
            pending = record.pending
            kind = "settlement" if pending.is_settlement else "approval"
            if (
                (filters.agent_id and record.agent_id != filters.agent_id)
                or (filters.kind and kind != filters.kind)
                or not _visible(caller, record)
            ):
                continue
            waiting.append(
                TaskApproval(
                    task_id=record.task_id,
                    agent_id=record.agent_id,
                    kind=kind,
                    pending=pending,
                    wait_time_ms=record.update_time_ms,
                    created_by=record.creator,
                    goal=record.goal,
                )
            )
        waiting.sort(key=lambda w: (w.wait_time_ms, w.task_id))
        if cursor is not None:
            waiting = [w for w in waiting if (w.wait_time_ms, w.task_id) > (cursor.ms, cursor.id)]
        page = waiting[:size]
        if len(waiting) <= size:
            return page, ""
        last = page[-1]
        return page, self.approval_tokens.issue(PageCursor(last.wait_time_ms, last.task_id), digest)

    def sweeping(self, sweep: Callable[[], Awaitable[int]]) -> Callable[[], Awaitable[int]]:
        """`sweep` (the approval sweeper's pass), then the index's prune at most once a minute."""

        async def run() -> int:
            resumed = await sweep()
            try:
                await self.index.maybe_prune()
            except AgentmeshError as exc:
                log.warning("cannot prune the task index: %s", exc.message)
            return resumed

        return run

    async def backfill(self) -> None:
        """Indexes the tasks stored before the index existed (once per Redis); never fails the start."""
        try:
            await self.index.backfill()
        except AgentmeshError as exc:
            log.warning("cannot backfill the task index: %s", exc.message)
