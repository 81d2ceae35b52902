"""A replica's background loops beside reading and claiming tasks (dispatcher_svc.worker): the
approval-expiry sweeper and the queue's metrics sampler; and the context a run starts in. Both loops
check `stopped` as well as being cancelled: the Redis client sometimes swallows a cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable

from agentmesh import callctx
from agentmesh.errors import UnavailableError
from agentmesh.metrics import Metrics
from dispatcher_svc.queue import TaskQueue

log = logging.getLogger("dispatcher_svc.worker")


def detached_context() -> contextvars.Context:
    """The context a run starts in: the current one without the incoming call's deadline and token.

    A task queued by StartTask/RunTask on this replica is spawned inside that call; a run outlives it,
    and with the call's deadline inherited every downstream call failed DEADLINE_EXCEEDED ("before
    the call was sent") once it had passed (found by `make chaos --no-resume`, issue 49). The run
    sends its own task token and deadline with every call (`run.downstream`)."""
    context = contextvars.copy_context()
    context.run(callctx.deadline_var.set, None)
    context.run(callctx.identity_token_var.set, None)
    return context


async def sweep_loop(sweep: Callable[[], Awaitable[int]], interval_s: float, stopped: Callable[[], bool]) -> None:
    """One pass of `sweep` (Dispatcher.sweep_approvals: the tasks it resumed) every `interval_s`."""
    while not stopped():
        await asyncio.sleep(interval_s)
        try:
            resumed = await sweep()
        except UnavailableError as exc:
            log.warning("cannot sweep expired approvals: %s", exc)
            continue
        except Exception:
            # This loop must never die: a task whose approval expired would stay parked for good.
            log.exception("sweeping expired approvals failed; retrying")
            continue
        if resumed:
            log.info("resumed %d task(s) whose approval expired", resumed)


async def metrics_loop(
    queue: TaskQueue, metrics: Metrics, running: Callable[[], int], interval_s: float, stopped: Callable[[], bool]
) -> None:
    """Samples the queue's depth and lag and this replica's running tasks every `interval_s` (every
    replica samples the one shared queue)."""
    while not stopped():
        try:
            stats = await queue.stats()
        except UnavailableError as exc:
            log.debug("cannot sample the task queue: %s", exc)
        except Exception:  # never let the loop die: the gauges would freeze at their last value
            log.exception("sampling the task queue failed; retrying")
        else:
            metrics.task_queue(stats.waiting, stats.claimed, stats.oldest_waiting_s)
        metrics.tasks_running(running())
        await asyncio.sleep(interval_s)
