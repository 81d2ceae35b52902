"""Creating a task: the task hash, its first event, its queue entry, and on a single Redis its first run.

`TaskStore.create` (tasks.py) is this module's `create`. On a single Redis it is one script
(CREATE_TAKE_LUA): the task, its entry in ListTasks' index and its agent's set, its queue entry, the read
of the next entry for this replica and, when that entry is the task's own and the caller asked for it
(`FirstRun`), the task taken for this replica: fence 1, RUNNING and its event, as an acquire would write
them. The run then starts without an acquire round trip (issue 45). On a Cluster (keys in several slots)
or with durable writes waiting for replicas, the task, then its entry, then the run's own acquire.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dispatcher_svc.model import TaskEvent, TaskStatus
from dispatcher_svc.model_json import event_to_json
from dispatcher_svc.queue import TaskQueue, taken_entries
from dispatcher_svc.task_record import TaskRecord

if TYPE_CHECKING:
    from dispatcher_svc.tasks import TaskStore

_OK = 1


@dataclass(frozen=True)
class FirstRun:
    """How the replica creating a task takes it in the same step, if its own entry is the one read."""

    lease_ms: int
    """The lease a run holds from its acquisition (the worker's claim idle time)."""
    event: TaskEvent
    """The RUNNING event an acquisition of a PENDING task appends (the worker's `status RUNNING on ...`)."""


@dataclass(frozen=True)
class Created:
    """What `TaskStore.create` did."""

    created: bool
    """False: a task with this id existed already (the queue got a harmless extra entry)."""
    taken: list[tuple[str, str]]
    """Queue entries (entry id, task id) read for this replica in the same step, to run here."""
    acquired: TaskRecord | None = None
    """The new task as taken for this replica in the same step (`FirstRun`): its run needs no acquire."""
    sent_at: float = field(default=0.0, compare=False)
    """time.monotonic() when the create was sent: when the lease of `acquired` was last known held."""


async def create(
    tasks: TaskStore,
    task_id: str,
    fields: Mapping[str, str],
    event: TaskEvent,
    queue: TaskQueue,
    *,
    take: bool = False,
    first_run: FirstRun | None = None,
) -> Created:
    """Creates the task and queues it in one round trip; with `take`, also reads the next new queue
    entry for this replica (normally this task's own) in that round trip, and with `first_run` takes
    the task for this replica when it is (a single Redis only; elsewhere the run acquires it)."""
    store = tasks.store
    agent = fields.get("agent_id", "")
    listed = int(fields.get("create_ms") or 0)  # ListTasks' index (task_index.py), first
    if not tasks.pipelined:
        # Cluster: task and queue on different primaries; durable writes wait for replicas. So the
        # task first, then its entry; the run acquires the task itself.
        args: list[str | int | bytes] = ["", "", "0", 0, tasks.settings.event_maxlen, 0, len(fields), "", "", "0"]
        for key, value in fields.items():
            args += [key, value]
        args.append(event_to_json(event))
        queue_args = [task_id, queue.group if take else "", queue.consumer]
        async with store.guard("create task"):
            await store.redis.zadd(tasks.index_key, {task_id: listed}, nx=True)
            commit_reply = await tasks.commit_script(keys=tasks.commit_keys(task_id), args=args)
            queue_reply = await queue.enqueue_script(keys=[queue.key], args=queue_args)
        created = await _count_created(tasks, task_id, agent, int(commit_reply[0]) == _OK)
        return Created(created=created, taken=taken_entries(queue_reply))
    keys = [store.keys.task(task_id), store.keys.task_events(task_id), queue.key, tasks.index_key]
    if tasks.agent_load is not None and agent:  # no crash between the task and its agent's set
        keys.append(store.keys.agent_active(agent))
    run = first_run if take else None
    script_args: list[str | int | bytes] = [
        task_id,
        listed,
        listed or int(time.time() * 1000),
        queue.group if take else "",
        queue.consumer,
        tasks.settings.event_maxlen,
        "1" if tasks.settings.pack_events else "0",
        event_to_json(event),
        "" if run is None else run.lease_ms,
        "" if run is None else event_to_json(run.event),
        0 if run is None else run.event.time_ms,
        len(fields),
    ]
    for key, value in fields.items():
        script_args += [key, value]
    sent_at = time.monotonic()
    async with store.guard("create task"):
        reply: Any = await tasks.create_script(keys=keys, args=script_args)
    created = await _count_created(tasks, task_id, agent, int(reply[0]) == _OK, loaded=True)
    taken = taken_entries([reply[1], reply[2]])
    flat = reply[3]
    if not flat or run is None:
        return Created(created=created, taken=taken, sent_at=sent_at)
    return Created(created=created, taken=taken, acquired=tasks.taken(task_id, flat, run.event), sent_at=sent_at)


async def _count_created(tasks: TaskStore, task_id: str, agent: str, created: bool, loaded: bool = False) -> bool:
    """Counts a created task PENDING, and in its agent's set unless `loaded` (its create put it there)."""
    if created:
        tasks.metrics.task_status(agent, TaskStatus.PENDING.name)
        if tasks.agent_load is not None and not loaded:
            await tasks.agent_load.entered(agent, task_id)
    return created
