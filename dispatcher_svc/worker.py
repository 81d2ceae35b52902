"""A replica's share of the work: reads `am:tasks` through the consumer group, claims orphans, runs tasks.

- New entries come with XREADGROUP (blocking briefly, below the Redis socket timeout).
- Entries whose owner stopped renewing for `claim_idle_s` are taken with XAUTOCLAIM.
- Acquiring a task increments its fence (tasks.py); a task whose lease is still held by a live
  owner is not taken (a duplicate entry is acknowledged, a claimed one left for later).
- While a task runs, its lease and queue entry are renewed every `claim_idle_s / 3`; when the
  renewal finds the fence moved (another owner, or a cancellation) the run is cancelled at once.
- At most `max_concurrent_tasks` run at a time; further entries stay in the stream for other replicas.
  A task this replica queues itself (StartTask, RunTask) is read for it in the same step when it
  has room (`slot`), so the replica that accepted a task normally runs it.
- On shutdown each running task is handed back: cancelled, its lease released and the task
  re-queued, so another replica continues it at once instead of after the idle timeout.
- Every `approval_sweep_interval_s` the expiry sweeper (`sweep`, Dispatcher.sweep_approvals) resumes
  parked tasks whose approval expired with nobody resolving it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator

from agentmesh.config import DispatcherSettings
from agentmesh.errors import AgentmeshError, UnavailableError
from agentmesh.metrics import Metrics
from dispatcher_svc.events import now_ms
from dispatcher_svc.lease import Lease, NoProgressError, suspended_at
from dispatcher_svc.model import EventKind, TaskEvent, TaskStatus
from dispatcher_svc.queue import TaskQueue
from dispatcher_svc.run.loop import AgentLoop
from dispatcher_svc.run.next_step import RunResult
from dispatcher_svc.tasks import FirstRun, StaleOwnerError, TaskRecord, TaskStore
from dispatcher_svc.worker_loops import detached_context, metrics_loop, sweep_loop

log = logging.getLogger("dispatcher_svc.worker")

STOP_TIMEOUT_S = 5.0
"""How long stop() waits for cancelled readers and runs."""


class Worker:
    """Runs this replica's tasks."""

    def __init__(
        self,
        *,
        tasks: TaskStore,
        queue: TaskQueue,
        loop: AgentLoop,
        settings: DispatcherSettings,
        sweep: Callable[[], Awaitable[int]] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.tasks = tasks
        self.metrics = metrics or Metrics()
        self.sweep = sweep
        """One pass of the approval-expiry sweeper (returns the tasks it resumed); None: no sweeper."""
        self.queue = queue
        self.loop = loop
        self.settings = settings
        self.consumer = queue.consumer
        self.claim_idle_ms = int(settings.claim_idle_s * 1000)
        socket_timeout = tasks.store.settings.socket_timeout_s
        self.block_ms = max(10, int(min(1.0, socket_timeout * 0.5) * 1000))
        self._running: dict[str, asyncio.Task[None]] = {}
        self._stale: set[str] = set()
        self._renewers: set[asyncio.Task[None]] = set()
        self._given_up: set[str] = set()
        """Runs cancelled by the liveness rule (lease.py): their tasks are handed back, not acked."""
        self._background: set[asyncio.Task[bool]] = set()
        self._deferred: dict[str, tuple[str, bool]] = {}
        """task id -> (entry, claimed) read while a run of that task was still going here."""
        self._slot_freed = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False
        self._reserved = 0
        """Slots held for tasks this replica is queueing and means to run itself (`slot`)."""

    def _stopped(self) -> bool:
        return self._stopping

    @property
    def running(self) -> int:
        return len(self._running)

    async def run_ended(self, task_id: str) -> None:
        """Returns once this replica's run of `task_id`, if one is under way, has ended. A run goes on a
        moment after its final event (the answer is appended to the session after the terminal commit)."""
        run = self._running.get(task_id)
        if run is not None:
            await asyncio.wait({run})

    async def start(self) -> None:
        await self.queue.ensure_group()
        self._loops = [
            asyncio.create_task(self._read_loop(), name="dispatcher-read"),
            asyncio.create_task(self._claim_loop(), name="dispatcher-claim"),
        ]
        if self.sweep is not None:
            sweeper = sweep_loop(self.sweep, self.settings.approval_sweep_interval_s, self._stopped)
            self._loops.append(asyncio.create_task(sweeper, name="dispatcher-sweep"))
        if self.metrics.enabled:
            sampler = metrics_loop(
                self.queue, self.metrics, lambda: self.running, self.settings.queue_metrics_interval_s, self._stopped
            )
            self._loops.append(asyncio.create_task(sampler, name="dispatcher-queue-metrics"))

    async def stop(self) -> None:
        """Stops reading, and hands every running task back to the queue."""
        self._stopping = True
        await self._cancel_all(list(self._loops), "queue readers")
        await self._cancel_all(list(self._running.values()), "task runs")
        for renewer in self._renewers:  # of runs that did not stop in time: their leases lapse
            renewer.cancel()

    async def _cancel_all(self, tasks: list[asyncio.Task[None]], what: str) -> None:
        """Cancels and awaits, but never longer than STOP_TIMEOUT_S: shutdown must be bounded.

        A run still busy then (e.g. a client library that ignores cancellation mid-read) is left;
        its entry stays pending in the stream and another replica claims it after claim_idle_s.
        """
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
        if pending:
            log.warning("%d %s did not stop within %.0fs; leaving them", len(pending), what, STOP_TIMEOUT_S)

    def _free(self) -> int:
        return self.settings.max_concurrent_tasks - len(self._running) - self._reserved

    @contextlib.contextmanager
    def slot(self) -> Iterator[bool]:
        """Holds a slot while a task is being queued: True if this replica will take it up (it is
        running and has room). Entries read for it go to `take`, inside the block."""
        if self._stopping or not self._loops or self._free() <= 0:
            yield False
            return
        self._reserved += 1
        try:
            yield True
        finally:
            self._reserved -= 1
            self._slot_freed.set()

    def first_run(self, task_id: str) -> FirstRun:
        """How a task this replica queues in a `slot` is taken in its create's own step (task_create.py)."""
        event = self._running_event(task_id, now_ms(), f"status RUNNING on {self.consumer}")
        return FirstRun(self.claim_idle_ms, event)

    def take(self, entries: list[tuple[str, str]], acquired: tuple[TaskRecord, float] | None = None) -> None:
        """Runs the entry `slot`'s holder read for this replica (entry id, task id): in its slot. `acquired`:
        (record, when its lease was sent) of a task its create took for this replica (no acquire then)."""
        for msg_id, task_id in entries:
            mine = acquired if acquired is not None and acquired[0].task_id == task_id else None
            self._spawn(msg_id, task_id, claimed=False, acquired=mine)

    def _admit(self, msg_id: str, task_id: str, *, claimed: bool) -> None:
        """Runs an entry the read or claim loop got, or, with no room left, queues it again for
        the other replicas. (A read asks for the room there was when it began to wait; a task
        queued here meanwhile may have taken that.)"""
        if task_id in self._running or self._free() > 0:
            self._spawn(msg_id, task_id, claimed=claimed)  # (a second entry of a running task waits there)
            return
        requeue = asyncio.create_task(self._requeue(msg_id, task_id))
        self._background.add(requeue)
        requeue.add_done_callback(self._background.discard)

    async def _requeue(self, msg_id: str, task_id: str) -> bool:
        try:
            await self.queue.enqueue(task_id)  # first: a crash in between leaves a duplicate, never nothing
        except UnavailableError as exc:
            log.warning("task %s: cannot queue it again (%s); it will be claimed after the idle timeout", task_id, exc)
            return False
        return await self._ack_if_mine(msg_id)

    async def _read_loop(self) -> None:
        # The flag as well as cancellation: the Redis client sometimes swallows a cancel mid-command.
        while not self._stopping:
            if self._free() <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            try:
                entries = await self.queue.read(self._free(), self.block_ms)
            except UnavailableError as exc:
                log.warning("cannot read the task queue: %s", exc)
                await asyncio.sleep(1.0)
                continue
            except Exception:
                # This loop must never die: entries never delivered are not claimable by XAUTOCLAIM,
                # so a dead reader would leave new tasks PENDING for good.
                log.exception("reading the task queue failed; retrying")
                await asyncio.sleep(1.0)
                continue
            for msg_id, task_id in entries:
                self._admit(msg_id, task_id, claimed=False)

    async def _claim_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.settings.claim_interval_s)
            free = self._free()
            if free <= 0:
                continue
            try:
                entries = await self.queue.autoclaim(self.claim_idle_ms, free)
            except UnavailableError as exc:
                log.warning("cannot claim orphaned tasks: %s", exc)
                continue
            except Exception:
                log.exception("claiming orphaned tasks failed; retrying")
                continue
            for msg_id, task_id in entries:
                log.info("claimed task %s (entry %s) after its owner went idle", task_id, msg_id)
                self._admit(msg_id, task_id, claimed=True)

    def _spawn(
        self, msg_id: str, task_id: str, *, claimed: bool, acquired: tuple[TaskRecord, float] | None = None
    ) -> None:
        if self._stopping:
            # Read while stopping: left pending in the stream, another replica claims it (one taken by
            # its create once its lease lapses, as after a crash).
            return
        if task_id in self._running:
            # Already running here under another entry. Not dropped: that run may end without having
            # run the task (its entry was read before the task existed, or it was parked and is being
            # resumed), so this entry is taken up when it ends; a task already done is then just acked.
            earlier = self._deferred.get(task_id)
            if earlier is not None and not earlier[1] and earlier[0] != msg_id:
                # One deferred entry per task is enough. Not the same entry claimed again (it went
                # idle while deferred): acking it would leave the deferred run without an entry.
                self._ack_soon(earlier[0])
            self._deferred[task_id] = (msg_id, claimed)  # (its run acquires: a record taken here is stale)
            return
        self._running[task_id] = asyncio.create_task(
            self._run(msg_id, task_id, claimed, acquired), name=f"task-{task_id}", context=detached_context()
        )

    def _ack_soon(self, msg_id: str) -> None:
        ack = asyncio.create_task(self._ack_if_mine(msg_id))
        self._background.add(ack)
        ack.add_done_callback(self._background.discard)

    async def _ack_if_mine(self, msg_id: str, *, finished: bool = False) -> bool:
        try:
            if finished:
                # The run made the task terminal: whoever holds the entry now (a replica that claimed it
                # meanwhile finds the task finished) has nothing to run. No XPENDING check (issue 45).
                await self.queue.done(msg_id)
                return True
            return await self.queue.ack_if_mine(msg_id)
        except UnavailableError as exc:
            log.warning("cannot acknowledge entry %s: %s", msg_id, exc)
            return False

    async def acquire(self, task_id: str, *, claimed: bool) -> TaskRecord | bool | None:
        """Takes ownership: the record with our new fence; None if there is nothing to run (ack the
        entry); False if a live owner holds the task (leave a claimed entry pending for later)."""
        now = now_ms()
        result = await self.tasks.acquire(
            task_id,
            self.consumer,
            lease_ms=self.claim_idle_ms,
            if_pending=self._running_event(task_id, now, f"status RUNNING on {self.consumer}"),
            if_taken_over=self._running_event(
                task_id, now, f"status RUNNING: resumed on {self.consumer} after its owner stopped"
            ),
        )
        if result is None:
            return False if claimed else None
        if isinstance(result, TaskStatus):
            return None
        return result

    def _running_event(self, task_id: str, now: int, message: str) -> TaskEvent:
        attributes = {"owner": self.consumer}
        return TaskEvent(task_id, 0, EventKind.STATUS, now, TaskStatus.RUNNING, message=message, attributes=attributes)

    async def _run(
        self, msg_id: str, task_id: str, claimed: bool, acquired: tuple[TaskRecord, float] | None = None
    ) -> None:
        # Run here from its acquisition on: a watcher here waits for this process's commits (the
        # acquisition's RUNNING event first), it does not block on the stream (issue 45).
        with self.tasks.feed.running(task_id):
            await self._run_here(msg_id, task_id, claimed, acquired)

    async def _run_here(
        self, msg_id: str, task_id: str, claimed: bool, acquired: tuple[TaskRecord, float] | None
    ) -> None:
        me = asyncio.current_task()
        assert me is not None
        renewer: asyncio.Task[None] | None = None
        record: TaskRecord | None = None
        try:
            if acquired is not None:  # taken by its create (task_create.py): `sent` is when that was sent
                record, sent = acquired
            else:
                sent = time.monotonic()
                got = await self.acquire(task_id, claimed=claimed)
                if got is None:
                    await self._ack_if_mine(msg_id)
                    return
                if got is False:
                    return
                assert isinstance(got, TaskRecord)
                record = got
            lease = Lease(
                self.tasks,
                task_id,
                record.fence,
                self.settings.claim_idle_s,
                confirmed_at=sent,
                liveness_s=self.settings.liveness_window_s,
            )
            renewer = asyncio.create_task(self._renew(msg_id, lease, me))
            self._renewers.add(renewer)
            result = await self.loop.run(record, lease)
            log.info("task %s: run ended %s", task_id, result.value)
            await self._ack_if_mine(msg_id, finished=result is RunResult.FINISHED)
        except asyncio.CancelledError:
            if task_id in self._stale:
                await self._ack_if_mine(msg_id)
                return  # swallowed: the renewer cancelled us, nobody awaits this cancellation
            if task_id in self._given_up and record is not None:
                await self._hand_back(msg_id, record)  # resumed from its last checkpoint
                return  # swallowed, as above
            if self._stopping and record is not None:
                await self._hand_back(msg_id, record)
            raise
        except UnavailableError as exc:
            # Redis is down: leave the entry pending; this or another replica claims it later.
            log.warning("task %s interrupted, will be claimed again: %s", task_id, exc)
        except Exception as exc:
            if isinstance(exc, AgentmeshError):
                log.warning("task %s failed: %s", task_id, exc)
            else:
                log.exception("task %s: unexpected failure", task_id)
            if record is not None:
                await self.tasks.fail_unexpectedly(record, exc, ttl_s=self.settings.task_ttl_s)
            await self._ack_if_mine(msg_id)
        finally:
            if renewer is not None:
                renewer.cancel()
                self._renewers.discard(renewer)
            self._stale.discard(task_id)
            self._given_up.discard(task_id)
            self._running.pop(task_id, None)
            deferred = self._deferred.pop(task_id, None)
            if deferred is not None:
                self._spawn(deferred[0], task_id, claimed=deferred[1])
            self._slot_freed.set()

    async def _renew(self, msg_id: str, lease: Lease, run: asyncio.Task[None]) -> None:
        interval = self.settings.claim_idle_s / 3
        entry_lost = False
        while True:
            await asyncio.sleep(interval)
            try:
                await lease.keep()
                if not entry_lost and not await self.queue.touch(msg_id):
                    # Claimed by another consumer or acknowledged: queue a new entry, so the task
                    # is still claimed by someone if this replica dies (acquire drops the spare one).
                    entry_lost = True
                    log.info("task %s: entry %s is no longer ours; queued it again", lease.task_id, msg_id)
                    await self.queue.enqueue(lease.task_id)
            except StaleOwnerError:
                log.info("task %s: fence moved (taken over or cancelled); stopping its run", lease.task_id)
                self._stale.add(lease.task_id)
                run.cancel()
                return
            except NoProgressError as exc:
                if not run.done():  # a run that has just ended has nothing left to give up
                    log.warning("%s: giving up its claim; handed back (waiting in %s)", exc, suspended_at(run))
                    self._given_up.add(lease.task_id)
                    run.cancel()
                return
            except AgentmeshError as exc:
                log.warning("task %s: cannot renew the claim: %s", lease.task_id, exc)

    async def _hand_back(self, msg_id: str, record: TaskRecord) -> None:
        """Shutdown: release the lease and re-queue, so another replica continues at once."""
        try:
            await self.tasks.commit(record.task_id, fence=record.fence, fields={"lease_until": "0"})
            await self.queue.enqueue(record.task_id)
            await self._ack_if_mine(msg_id)
            log.info("task %s handed back to the queue", record.task_id)
        except AgentmeshError as exc:
            log.warning("task %s: not handed back (%s); it will be claimed after the idle timeout", record.task_id, exc)
