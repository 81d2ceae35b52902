"""A run's lease on its task (fenced renewals through `TaskStore.commit`), kept only while the run
makes progress (the liveness rule, issue 39)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dispatcher_svc.tasks import TaskStore

__all__ = ["Lease", "NoProgressError", "suspended_at"]


class NoProgressError(Exception):
    """The run made no progress for the liveness window: its claim is given up, not renewed."""


class Lease:
    """An owner's claim on a task, checked before every downstream call of its run.

    Another replica can take the task only once `lease_until` (Redis time) has passed, which is at
    least `claim_idle_s` after the last fenced renewal. A run therefore calls out only while its
    last confirmation is younger than half that (local monotonic time, measured from when the
    renewal was sent); otherwise it renews first, and a stale owner (paused, partitioned) learns it
    lost the task from the refused renewal before it can write anything downstream.

    The liveness rule: the worker renews the claim in the background (`keep`) only while the run
    makes progress: a downstream call answered (whatever the answer) or a checkpoint landed
    (`progressed`) within the last `liveness_s`. A run stuck longer (e.g. on a Redis pool that
    never frees a connection for it) would otherwise hold its task RUNNING for good; instead its
    claim is given up (NoProgressError) and the task resumed from its last checkpoint.
    """

    def __init__(
        self,
        tasks: TaskStore,
        task_id: str,
        fence: int,
        claim_idle_s: float,
        confirmed_at: float,
        *,
        liveness_s: float = 0.0,
    ) -> None:
        self.tasks = tasks
        self.task_id = task_id
        self.fence = fence
        self.claim_idle_s = claim_idle_s
        self.confirmed_at = confirmed_at
        self.liveness_s = liveness_s
        """0: no liveness rule (the claim is renewed as long as the run lasts)."""
        self.progressed_at = confirmed_at

    async def renew(self) -> None:
        """Extends the lease if the fence is still ours; StaleOwnerError otherwise."""
        sent = time.monotonic()
        await self.tasks.commit(self.task_id, fence=self.fence, lease_ms=int(self.claim_idle_s * 1000))
        self.confirmed_at = sent

    async def ensure(self) -> None:
        if time.monotonic() - self.confirmed_at > self.claim_idle_s / 2:
            await self.renew()

    def progressed(self) -> None:
        """The run did something: a downstream call answered, or a checkpoint landed."""
        self.progressed_at = time.monotonic()

    def idle_s(self) -> float:
        """Seconds since the run last made progress."""
        return time.monotonic() - self.progressed_at

    async def keep(self) -> None:
        """The background renewal: `renew`, or NoProgressError once the run has made no progress
        for `liveness_s`."""
        if self.liveness_s and self.idle_s() > self.liveness_s:
            raise NoProgressError(
                f"task {self.task_id}: no progress for {self.idle_s():.0f}s (liveness window {self.liveness_s:g}s)"
            )
        await self.renew()


def suspended_at(run: asyncio.Task[None]) -> str:
    """Where a run waits (its innermost coroutine frames), for the log line of a claim given up."""
    frames: list[str] = []
    link: object = run.get_coro()
    while link is not None and len(frames) < 50:
        frame = getattr(link, "cr_frame", None) or getattr(link, "gi_frame", None)
        if frame is not None:
            frames.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})")
        link = getattr(link, "cr_await", None) or getattr(link, "gi_yieldfrom", None)
    return " <- ".join(reversed(frames[-3:])) or "?"
