"""What capability routing (routing.py) reads about each agent: its depth and its recent FAILED share.

- **Depth** is the number of the agent's unfinished tasks: a sorted set per agent,
  `am:agentload:{<agent>}:active`, member the task id, score the time (ms) it was (re)added. Members,
  not a counter: every add and remove is idempotent, so a retried or repeated write never counts
  twice. The set cannot share the task's slot (one set per agent, one slot per task). A new task joins
  it in its create's script (task_create.py), just before the task's own write (issue 45; a create of a task that
  exists adds it too: harmless, see repair); on a cluster, or with durable writes, after that write,
  and again when it is first acquired, since a crash may come between. A task resumed joins it after
  the write that resumed it, a task taken over on the acquire that takes it; it leaves it after the
  write that finished it: a crash between leaves it off by one, and both ways heal. A task missing
  from it is added back when it is next taken over; a finished task left in it is dropped by
  `repair`, which re-reads the tasks behind the older members and removes a member only if nobody
  re-added it meanwhile (`DROP_IF_SAME_LUA`: its score unchanged).
- **Outcomes**: per agent, the hash `am:agentload:{<agent>}:ended` counts per minute the tasks that
  ended (`<minute>:e`) and those that ended FAILED (`<minute>:f`), counted once, by the commit that
  ended the task (the commit script reports the status before it). The first end of a minute in
  each process runs `END_LUA`, which removes the task from the set and counts it in one step, and
  drops the minutes that left the window and refreshes the hash's TTL; the other ends send its
  HINCRBY and ZREM as plain commands in one round trip (issue 45: the script run was one more).

Failures to update these are logged, never raised: the task's own commit succeeded and stands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentmesh.config import RoutingSettings
from agentmesh.errors import AgentmeshError
from agentmesh.lua_source import package_lua
from agentmesh.store import Store
from dispatcher_svc.model import TERMINAL, TaskStatus

log = logging.getLogger("dispatcher_svc.agent_load")

DROP_IF_SAME_LUA = package_lua("dispatcher_svc", "agent_load_drop")

END_LUA = package_lua("dispatcher_svc", "agent_load_end")

REPAIR_GRACE_MS = 10_000
"""Members younger than this are not re-checked (just added: their task is as the set says)."""
_REPAIR_BATCH = 200


def _now_ms() -> int:
    return int(time.time() * 1000)


def _int(value: Any) -> int:
    return int(value) if value is not None else 0


class AgentLoad:
    """The agents' depth and outcome counters in Redis (see the module docstring)."""

    def __init__(self, store: Store, settings: RoutingSettings) -> None:
        self.store = store
        self.settings = settings
        self._drop = store.script("agent_load_drop", DROP_IF_SAME_LUA)
        self._end = store.script("agent_load_end", END_LUA)
        self._repaired_at = 0.0
        self._trimmed: dict[str, int] = {}
        """Agent -> the minute this process last trimmed its outcome hash and refreshed its TTL: once a
        minute is enough (the window is whole minutes; the TTL outlasts it by two), not every end."""

    @property
    def window_minutes(self) -> int:
        return -(-self.settings.failed_window_s // 60)

    # -- writes, after the task's own commit -----------------------------------------------------

    async def entered(self, agent: str, task_id: str) -> None:
        """The task is unfinished (created, resumed, acquired): a member of the agent's set."""
        if not agent:
            return
        try:
            key = self.store.keys.agent_active(agent)
            await self.store.call("agent load", self.store.redis.zadd(key, {task_id: _now_ms()}))
        except AgentmeshError as exc:
            log.warning("agent %s: cannot count task %s as unfinished: %s", agent, task_id, exc.message)

    async def ended(self, agent: str, task_id: str, status: TaskStatus, *, first: bool) -> None:
        """The task finished with `status`; `first`: this write finished it (its outcome is counted)."""
        if not agent:
            return
        keys = self.store.keys
        minute = _now_ms() // 60_000
        trim = first and self._trimmed.get(agent) != minute
        args: list[str | int] = [task_id, "1" if first else "", "1" if status == TaskStatus.FAILED else ""]
        args += [minute, minute - self.window_minutes + 1, self.window_minutes * 60 + 120, "1" if trim else ""]
        try:
            async with self.store.guard("agent load"):
                if trim:
                    await self._end(keys=[keys.agent_active(agent), keys.agent_outcomes(agent)], args=args)
                else:
                    await self._end_plainly(agent, task_id, status, minute, first=first)
        except AgentmeshError as exc:
            log.warning("agent %s: cannot count task %s as ended: %s", agent, task_id, exc.message)
            return
        if trim:
            self._trimmed[agent] = minute

    async def _end_plainly(self, agent: str, task_id: str, status: TaskStatus, minute: int, *, first: bool) -> None:
        """END_LUA's work without its trim as plain commands, one round trip: the script run itself was
        one more command per task (issue 45). Counted before the removal: a connection lost half-way
        leaves the task in the set (repair drops it), never an end uncounted."""
        pipe = self.store.redis.pipeline(transaction=False)
        if first:
            outcomes = self.store.keys.agent_outcomes(agent)
            pipe.hincrby(outcomes, f"{minute}:e", 1)
            if status == TaskStatus.FAILED:
                pipe.hincrby(outcomes, f"{minute}:f", 1)
        pipe.zrem(self.store.keys.agent_active(agent), task_id)
        await pipe.execute()

    # -- reads, for routing --------------------------------------------------------------------

    async def depths(self, agents: Sequence[str]) -> dict[str, int]:
        """Each agent's number of unfinished tasks (one round trip)."""
        return (await self.signals(agents))[0]

    async def signals(self, agents: Sequence[str]) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
        """Each agent's depth, and its (tasks ended, tasks ended FAILED) over the window: one round trip."""
        first = _now_ms() // 60_000 - self.window_minutes + 1
        keys = self.store.keys
        async with self.store.guard("agent load read"):
            pipe = self.store.redis.pipeline(transaction=False)
            for agent in agents:
                pipe.zcard(keys.agent_active(agent))
                pipe.hgetall(keys.agent_outcomes(agent))
            replies = iter(await pipe.execute())
        depths: dict[str, int] = {}
        counts: dict[str, tuple[int, int]] = {}
        for agent in agents:
            depths[agent] = _int(next(replies))
            ended = failed = 0
            for name, value in next(replies).items():
                minute, _, kind = (name.decode() if isinstance(name, bytes) else str(name)).partition(":")
                if not minute.isdigit() or int(minute) < first:
                    continue  # left the window: the next END_LUA drops it
                if kind == "e":
                    ended += int(value)
                elif kind == "f":
                    failed += int(value)
            counts[agent] = (ended, failed)
        return depths, counts

    # -- repair ------------------------------------------------------------------------------

    async def repair(self, agent: str, grace_ms: int | None = None) -> int:
        """Drops the members of `agent`'s set whose task finished, is gone or is another agent's (a crash
        between a task's last commit and its removal); returns how many. Live members are re-scored, so
        each is re-read once per grace period at most."""
        key = self.store.keys.agent_active(agent)
        cutoff = _now_ms() - (REPAIR_GRACE_MS if grace_ms is None else grace_ms)
        async with self.store.guard("agent load repair"):
            old: Any = await self.store.redis.zrangebyscore(
                key, "-inf", cutoff, start=0, num=_REPAIR_BATCH, withscores=True
            )
            if not old:
                return 0
            pipe = self.store.redis.pipeline(transaction=False)
            for member, _ in old:
                task_id = member.decode() if isinstance(member, bytes) else str(member)
                pipe.hmget(self.store.keys.task(task_id), ["status", "agent_id"])
            states = await pipe.execute()
            stale: list[Any] = []
            live: dict[Any, int] = {}
            for (member, score), (status, owner) in zip(old, states, strict=True):
                finished = status is None or int(status) in TERMINAL
                if finished or (owner or b"").decode() != agent:
                    stale += [member, repr(score)]
                else:
                    live[member] = _now_ms()
            if live:
                await self.store.redis.zadd(key, live, xx=True)
            return int(await self._drop(keys=[key], args=stale)) if stale else 0

    def repairing(
        self, agents: Callable[[], Sequence[str]], sweep: Callable[[], Awaitable[int]]
    ) -> Callable[[], Awaitable[int]]:
        """`sweep` (the worker's periodic pass), then `repair` of every agent at most once per
        `routing.repair_interval_s`."""

        async def run() -> int:
            done = await sweep()
            if time.monotonic() - self._repaired_at >= self.settings.repair_interval_s:
                self._repaired_at = time.monotonic()
                for agent in agents():
                    try:
                        await self.repair(agent)
                    except AgentmeshError as exc:
                        log.warning("agent %s: cannot repair its task count: %s", agent, exc.message)
            return done

        return run
