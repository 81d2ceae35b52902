"""What keeps workflow runs moving on a set of replicas: an index of the runs to look at and when, and
the firing of schedule ticks. Every replica may call `tick`; the run's fence and lease (runs.py) make
one of them advance a run at a time, and a tick's derived run id makes it one run.

Keys: `<prefix>:wfruns:due` (sorted set: run id -> when to advance it next, ms), `<prefix>:wfruns:all`
(sorted set: run id -> start ms, what ListWorkflowRuns pages) and
`<prefix>:wfsched:{<workflow>}` (hash: the last tick fired and its run id). Single-key commands only,
so nothing here spans Cluster slots. A run is indexed before it is created, so a crash between the two
leaves an index entry without a run (dropped at its next look), never a run nobody advances.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from agentmesh.errors import AgentmeshError, NotFoundError
from agentmesh.store import Store
from dispatcher_svc.workflows.executor import Executor
from dispatcher_svc.workflows.runs import RunExistsError, StaleRunOwnerError
from dispatcher_svc.workflows.schedules import due_tick, should_fire, tick_run_id
from dispatcher_svc.workflows.state import RunStatus
from dispatcher_svc.workflows.validate import Workflow

__all__ = ["ORPHAN_S", "Driver"]

log = logging.getLogger("dispatcher_svc.workflows.driver")

ORPHAN_S = 60.0
"""An index entry whose run does not exist this long after it was due is dropped."""


class Driver:
    """Advances due runs and fires due schedule ticks for one replica (see the module doc)."""

    def __init__(self, store: Store, executor: Executor, *, poll_s: float = 1.0, batch: int = 64) -> None:
        self.store = store
        self.executor = executor
        self.poll_s = poll_s
        self.batch = batch
        self.index_key = f"{store.keys.prefix}:wfruns:due"
        self.list_key = f"{store.keys.prefix}:wfruns:all"
        """Every run by start time (ms), for listing; indexed before the run exists, as the due index."""

    def _schedule_key(self, workflow: str) -> str:
        return f"{self.store.keys.prefix}:wfsched:{{{workflow}}}"

    async def _index(self, run_id: str, due_s: float) -> None:
        async with self.store.guard("index workflow run"):
            await self.store.redis.zadd(self.index_key, {run_id: int(due_s * 1000)})

    async def submit(
        self, run_id: str, workflow: Workflow, run_input: Any, meta: Mapping[str, str] | None = None
    ) -> None:
        """Starts a run and indexes it for advancing now; RunExistsError when the id is taken."""
        now = self.executor.clock()
        await self._index(run_id, now)
        async with self.store.guard("index workflow run for listing"):
            await self.store.redis.zadd(self.list_key, {run_id: int(now * 1000)})
        await self.executor.start(run_id, workflow, run_input, meta)

    async def tick(self) -> dict[str, RunStatus | None]:
        """Advances every run that is due now; returns what became of each."""
        now = self.executor.clock()
        async with self.store.guard("due workflow runs"):
            due = await self.store.redis.zrangebyscore(
                self.index_key, "-inf", int(now * 1000), start=0, num=self.batch, withscores=True
            )
        done: dict[str, RunStatus | None] = {}
        for raw, score in (tuple(pair) for pair in due):
            run_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            try:
                status = await self.executor.advance(run_id)
            except StaleRunOwnerError:
                status = None  # another replica took the run over between our acquire and our write
            except NotFoundError:
                # Indexed but not (yet) created: a submit under way, or one that crashed between the two.
                if float(score) / 1000 < now - ORPHAN_S:
                    await self._drop(run_id)
                else:
                    await self._index(run_id, now + self.poll_s)
                continue
            except AgentmeshError as err:
                # Redis or a service failed mid-advance: nothing was committed; look again later, and go on
                # with the other runs (one run's failure must not starve them).
                log.warning("workflow run %s: advance failed, will retry: %s", run_id, err)
                await self._index(run_id, now + self.poll_s)
                continue
            done[run_id] = status
            if status is None:
                # Finished, or another replica holds it: look again after a lease; a finished run leaves then.
                finished = await self._finished(run_id)
                if finished:
                    await self._drop(run_id)
                else:
                    await self._index(run_id, now + self.executor.lease_ms / 1000)
            elif status == RunStatus.RUNNING:
                await self._index(run_id, now + self.poll_s)
            else:
                await self._drop(run_id)
        return done

    async def _finished(self, run_id: str) -> bool:
        try:
            return (await self.executor.runs.load(run_id)).status != RunStatus.RUNNING
        except NotFoundError:
            return True

    async def _drop(self, run_id: str) -> None:
        async with self.store.guard("unindex workflow run"):
            await self.store.redis.zrem(self.index_key, run_id)

    async def fire_schedules(
        self, catalog: Mapping[str, Workflow], meta: Callable[[Workflow], Mapping[str, str]] | None = None
    ) -> list[str]:
        """Starts the run of every due schedule tick (once across replicas); returns the run ids this
        replica started. `meta` gives what to record with a scheduled run (the identity it acts under)."""
        now = datetime.fromtimestamp(self.executor.clock(), UTC)
        started: list[str] = []
        for name, workflow in catalog.items():
            schedule = workflow.definition.schedule
            if schedule is None:
                continue
            key = self._schedule_key(name)
            async with self.store.guard("read workflow schedule"):
                raw = await self.store.redis.hgetall(key)
            fields = {
                (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in raw.items()
            }
            last = datetime.fromisoformat(fields["tick"]) if fields.get("tick") else None
            tick = due_tick(schedule, last, now)
            if tick is None:
                continue
            previous = fields.get("run", "")
            if previous and not should_fire(schedule, not await self._finished(previous)):
                continue
            run_id = tick_run_id(name, tick)
            try:
                await self.submit(run_id, workflow, schedule.input, None if meta is None else meta(workflow))
                started.append(run_id)
            except RunExistsError:
                pass  # another replica fired this tick
            async with self.store.guard("write workflow schedule"):
                await self.store.redis.hset(key, mapping={"tick": tick.isoformat(), "run": run_id})
        return started
