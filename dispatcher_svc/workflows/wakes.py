"""Waking a run's owner when one of its steps ends, instead of letting the run wait for the next poll.

A run moves only when an advance finds its steps finished. Polling every `workflows.poll_interval_s`
makes every step of a run wait up to a poll interval after it ended (at the shipped 1 s, about 0.5 s per
node on average: most of a workflow's overhead over plain tasks). So a step's end (an agent step's task
entering a final status, on whichever replica ran it; a tool step's result, written by the replica that
called it) appends the run's id to one stream, `<prefix>:wfwake`; every replica's loop blocks on that
stream between its polls and advances the runs named at once. Only the run's lease holder can advance it
(other replicas' acquire answers None at the cost of one script call), and the poll still runs, so a wake
that is lost (a replica that dies between the end and the append, a trimmed or expired stream) only costs the poll's
delay. One key: nothing here spans Cluster slots.
"""

from __future__ import annotations

from typing import Any

from agentmesh.store import Store

__all__ = ["MAXLEN", "TTL_S", "Wakes"]

MAXLEN = 10_000
"""Entries the stream keeps (approximately): readers read it at least every second, so only the newest matter."""
TTL_S = 3600
"""The stream expires this long after its last wake."""


class Wakes:
    """The wake stream of one store (see the module doc)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.key = f"{store.keys.prefix}:wfwake"
        # A blocking read holds its connection: never past half the socket timeout (as task watches).
        self.max_block_ms = max(10, int(store.settings.socket_timeout_s * 500))

    async def wake(self, run_id: str) -> None:
        async with self.store.guard("wake workflow run"):
            pipe = self.store.redis.pipeline(transaction=False)  # one key, one round trip
            pipe.xadd(self.key, {"r": run_id}, maxlen=MAXLEN, approximate=True)
            pipe.expire(self.key, TTL_S)  # an idle deployment keeps no stale wakes
            await pipe.execute()

    async def last_id(self) -> str:
        """The newest entry's id ("0-0" for none): where a reader starts, to see only wakes from now on."""
        async with self.store.guard("read workflow wakes"):
            newest: Any = await self.store.redis.xrevrange(self.key, "+", "-", count=1)
        if not newest:
            return "0-0"
        entry_id = newest[0][0]
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def wait(self, after: str, timeout_s: float) -> tuple[list[str], str]:
        """The run ids woken after entry `after` (each once, in order), waiting up to `timeout_s` (capped at
        `max_block_ms`) for the first; and the id to read after next."""
        block_ms = max(1, min(self.max_block_ms, int(timeout_s * 1000)))
        async with self.store.guard("wait for workflow wakes", blocking=True):
            reply: Any = await self.store.redis.xread({self.key: after}, count=512, block=block_ms)
        runs: dict[str, None] = {}
        for _, entries in reply or ():
            for entry_id, fields in entries:
                after = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                run_id = (fields or {}).get(b"r", (fields or {}).get("r"))
                if run_id:
                    runs[run_id.decode() if isinstance(run_id, bytes) else str(run_id)] = None
        return list(runs), after
