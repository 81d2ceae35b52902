"""ListTasks' index: every task id in one sorted set scored by its create time (ms).

Key `am:tasks:index` (`Keys.tasks_index`). `TaskStore.create` adds the id (ZADD NX) *before* the task
hash is written: in the same pipeline on a standalone Redis, as a write of its own on a Cluster (the
index and the task live in different slots). So the index is a superset of the tasks: a member whose
hash is missing (a create that failed after the ZADD, a task expired after `task_ttl_s`) is skipped
on read and removed by `prune`, which the approval sweeper runs at most once a minute.

Pages are read newest first by `PAGE_LUA` with a keyset cursor (create ms, task id): a task created
while a client pages scores above the cursor, so it never shifts the entries still to come (no
duplicates, no gaps). Tasks stored before the index existed are added once by `backfill` (SCAN over
the task hashes), guarded by a marker key so it runs once per Redis, and by a lock so replicas
starting together do not all do it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from agentmesh.lua_source import package_lua
from agentmesh.store import Store

__all__ = ["PAGE_LUA", "PRUNE_INTERVAL_S", "IndexEntry", "TaskIndex"]

log = logging.getLogger("dispatcher_svc.task_index")

PRUNE_INTERVAL_S = 60.0
"""`maybe_prune` prunes at most this often per replica."""
PRUNE_BATCH = 1000
"""Entries looked at per prune, oldest first (expired tasks are the oldest)."""
PRUNE_MIN_AGE_MS = 300_000
"""Entries younger than this are never pruned (their task may be being created)."""
BACKFILL_LOCK_S = 300

PAGE_LUA = package_lua("dispatcher_svc", "task_index_page")


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One member of the index: its position (create ms, task id) is a keyset cursor."""

    create_ms: int
    task_id: str


class TaskIndex:
    """Writes, pages, prunes and backfills `am:tasks:index`."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.key = store.keys.tasks_index()
        self.marker_key = f"{self.key}:backfilled"
        self.lock_key = f"{self.key}:backfill-lock"
        self._page = store.script("dispatcher_task_index_page", PAGE_LUA)
        self._pruned_at = float("-inf")

    async def add(self, task_id: str, create_ms: int) -> None:
        """Indexes one task (ZADD NX: a repeated create keeps the first score)."""
        async with self.store.guard("index task"):
            await self.store.redis.zadd(self.key, {task_id: create_ms}, nx=True)

    async def page(
        self, count: int, *, after: IndexEntry | None = None, min_ms: int | None = None, max_ms: int | None = None
    ) -> list[IndexEntry]:
        """Up to `count` entries newest first, after `after`, with min_ms <= create ms <= max_ms."""
        args: list[str | int] = [
            "+inf" if max_ms is None else max_ms,
            "-inf" if min_ms is None else min_ms,
            "" if after is None else after.create_ms,
            "" if after is None else after.task_id,
            count,
        ]
        async with self.store.guard("list tasks"):
            reply: Any = await self._page(keys=[self.key], args=args)
        return [IndexEntry(int(float(_text(reply[i + 1]))), _text(reply[i])) for i in range(0, len(reply), 2)]

    async def prune(self, limit: int = PRUNE_BATCH) -> int:
        """Removes up to `limit` of the oldest entries whose task hash is gone (entries older than
        PRUNE_MIN_AGE_MS only); returns how many."""
        async with self.store.guard("prune task index"):
            # Young entries are left alone: on a Cluster the ZADD precedes its task hash by a round trip.
            young = int(time.time() * 1000) - PRUNE_MIN_AGE_MS
            raw: Any = await self.store.redis.zrangebyscore(self.key, "-inf", f"({young}", start=0, num=limit)
            ids = [_text(member) for member in raw]
            if not ids:
                return 0
            pipe = self.store.redis.pipeline(transaction=False)
            for task_id in ids:
                pipe.exists(self.store.keys.task(task_id))
            found = await pipe.execute()
            gone = [task_id for task_id, there in zip(ids, found, strict=True) if not there]
            if gone:
                await self.store.redis.zrem(self.key, *gone)
        return len(gone)

    async def maybe_prune(self) -> int:
        """`prune`, if this replica has not pruned in the last PRUNE_INTERVAL_S (the sweeper calls it)."""
        now = time.monotonic()
        if now - self._pruned_at < PRUNE_INTERVAL_S:
            return 0
        self._pruned_at = now
        return await self.prune()

    async def backfill(self) -> int:
        """Indexes the task hashes stored before the index existed, once per Redis: -1 when done
        already or another replica holds the lock, else the number of tasks seen."""
        redis = self.store.redis
        async with self.store.guard("backfill task index"):
            if await redis.exists(self.marker_key):
                return -1
            if not await redis.set(self.lock_key, "1", nx=True, ex=BACKFILL_LOCK_S):
                return -1
            try:
                seen = 0
                batch: list[str] = []
                pattern = f"{self.store.keys.prefix}:task:{{*}}"
                async for raw in redis.scan_iter(match=pattern, count=1000, _type="hash"):
                    batch.append(_text(raw))
                    if len(batch) >= 500:
                        seen += await self._index_hashes(batch)
                        batch = []
                if batch:
                    seen += await self._index_hashes(batch)
                await redis.set(self.marker_key, str(seen))
            finally:
                await redis.delete(self.lock_key)
        if seen:
            log.info("task index: backfilled %d tasks stored before it existed", seen)
        return seen

    async def _index_hashes(self, keys: list[str]) -> int:
        pipe = self.store.redis.pipeline(transaction=False)
        for key in keys:
            pipe.hmget(key, ["task_id", "create_ms"])
        rows = await pipe.execute()
        members: dict[str, int] = {}
        for task_id, create_ms in rows:
            if task_id:
                members[_text(task_id)] = int(create_ms or 0)
        if members:
            await self.store.redis.zadd(self.key, members, nx=True)
        return len(members)


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
