"""The `am:tasks` work queue: which replica works on which task (consumer group, claims, renewals).

Ownership (docs/design.md §7): `StartTask` puts the task id on the `am:tasks` stream; replicas read it
through one consumer group, so a message has one owner at a time. The owner renews its claim
(XCLAIM JUSTID, which resets the entry's idle time) while it works; a replica that dies stops
renewing, and another one takes the entry with XAUTOCLAIM once it has been idle `claim_idle_s`.

The task hashes and event streams the entries point to are `dispatcher_svc.tasks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.exceptions as rexc

from agentmesh.lua_source import package_lua
from agentmesh.store import Store

ENQUEUE_LUA = package_lua("dispatcher_svc", "enqueue")

TOUCH_LUA = package_lua("dispatcher_svc", "touch")

ACK_IF_MINE_LUA = package_lua("dispatcher_svc", "ack_if_mine")


def taken_entries(reply: Any) -> list[tuple[str, str]]:
    """The entries an ENQUEUE_LUA reply read for this replica (entry id, task id)."""
    if len(reply) < 2 or not reply[1]:
        return []
    # A script returns an entry's fields flat; XREADGROUP's reply as redis-py parses it, as a dict.
    return TaskQueue._entries([(msg_id, dict(zip(flat[::2], flat[1::2], strict=True))) for msg_id, flat in reply[1]])


@dataclass(frozen=True)
class QueueStats:
    """The queue as one look saw it (for the metrics)."""

    waiting: int
    """Entries no replica has read yet."""
    claimed: int
    """Entries read and not yet acknowledged: tasks being run (or whose owner died, until reclaimed)."""
    oldest_waiting_s: float
    """Age of the oldest waiting entry, by Redis's clock (entry ids are its milliseconds); 0 when none."""


class TaskQueue:
    """The `am:tasks` stream and its consumer group: who works on which task."""

    def __init__(self, store: Store, group: str, consumer: str) -> None:
        self.store = store
        self.group = group
        self.consumer = consumer
        self.key = store.keys.tasks_stream()
        self._touch = store.script("dispatcher_touch", TOUCH_LUA)
        self.enqueue_script = store.script("dispatcher_enqueue", ENQUEUE_LUA, durable=True)
        self._ack_if_mine = store.script("dispatcher_ack_if_mine", ACK_IF_MINE_LUA)

    async def ensure_group(self) -> None:
        """Creates the consumer group (from the stream's start, so nothing queued is missed)."""
        try:
            async with self.store.guard("create consumer group"):
                await self.store.redis.xgroup_create(self.key, self.group, id="0", mkstream=True)
        except rexc.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def enqueue(self, task_id: str) -> str:
        async with self.store.guard("enqueue task"):
            msg_id = await self.store.durable(self.key, "XADD", self.key, "*", "task", task_id)
        return msg_id.decode() if isinstance(msg_id, bytes) else str(msg_id)

    @staticmethod
    def _entries(raw: Any) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for msg_id, fields in raw or ():
            if not fields:
                continue
            task = fields.get(b"task")
            if task:
                found.append((msg_id.decode(), task.decode()))
        return found

    async def read(self, count: int, block_ms: int) -> list[tuple[str, str]]:
        """New entries for this consumer (msg id, task id), waiting up to `block_ms`."""
        try:
            async with self.store.guard("read tasks", blocking=True):
                reply: Any = await self.store.redis.xreadgroup(
                    self.group, self.consumer, {self.key: ">"}, count=count, block=block_ms
                )
        except rexc.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_group()
            return []
        return [entry for _, entries in reply or () for entry in self._entries(entries)]

    async def autoclaim(self, min_idle_ms: int, count: int) -> list[tuple[str, str]]:
        """Entries whose owner has not renewed them for `min_idle_ms`, now claimed by this consumer."""
        claimed: list[tuple[str, str]] = []
        start = "0-0"
        for _ in range(16):  # bounded scan per pass
            async with self.store.guard("claim tasks"):
                reply_claim: Any = await self.store.redis.xautoclaim(
                    self.key, self.group, self.consumer, min_idle_ms, start_id=start, count=count
                )
            start = reply_claim[0].decode() if isinstance(reply_claim[0], bytes) else str(reply_claim[0])
            claimed += self._entries(reply_claim[1])
            if start == "0-0" or len(claimed) >= count:
                break
        return claimed

    async def stats(self) -> QueueStats:
        """Depth and lag of the queue in three round trips. Finished entries are deleted (`done`), so
        the stream holds exactly the waiting and the claimed ones."""
        async with self.store.guard("queue stats"):
            pipe = self.store.redis.pipeline(transaction=False)
            pipe.xinfo_groups(self.key)
            pipe.xlen(self.key)
            groups, length = await pipe.execute()
            # Not in the pipeline: a cluster client refuses a pipelined TIME (it has no key to route by).
            seconds, micros = await self.store.redis.time()
        group = next((g for g in groups if _text(g.get("name")) == self.group), None)
        if group is None:
            return QueueStats(waiting=int(length), claimed=0, oldest_waiting_s=0.0)
        claimed = int(group.get("pending") or 0)
        waiting = max(0, int(length) - claimed)
        oldest = 0.0
        if waiting:
            async with self.store.guard("queue stats"):
                first = await self.store.redis.xrange(
                    self.key, min="(" + _text(group.get("last-delivered-id")), max="+", count=1
                )
            if first:
                now_ms = int(seconds) * 1000 + int(micros) // 1000
                oldest = max(0.0, (now_ms - int(_text(first[0][0]).split("-")[0])) / 1000)
        return QueueStats(waiting=waiting, claimed=claimed, oldest_waiting_s=oldest)

    async def touch(self, msg_id: str) -> bool:
        """Renews our claim on an entry; False if another consumer holds it now."""
        async with self.store.guard("renew claim"):
            return bool(await self._touch(keys=[self.key], args=[self.group, self.consumer, msg_id]))

    async def ack_if_mine(self, msg_id: str) -> bool:
        """Acknowledges and deletes an entry if this consumer still holds it (never another's claim)."""
        async with self.store.guard("ack task"):
            return bool(await self._ack_if_mine(keys=[self.key], args=[self.group, self.consumer, msg_id]))

    async def done(self, msg_id: str) -> None:
        """Acknowledges and deletes an entry: the task is finished or parked."""
        async with self.store.guard("ack task"):
            pipe = self.store.redis.pipeline(transaction=False)
            pipe.xack(self.key, self.group, msg_id)
            pipe.xdel(self.key, msg_id)
            await pipe.execute()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
