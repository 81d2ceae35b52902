"""A run's lease on its task (fenced renewals through `TaskStore.commit`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dispatcher_svc.tasks import TaskStore

__all__ = ["Lease"]


class Lease:
    """An owner's claim on a task, checked before every downstream call of its run.

    Another replica can take the task only once `lease_until` (Redis time) has passed, which is at
    least `claim_idle_s` after the last fenced renewal. A run therefore calls out only while its
    last confirmation is younger than half that (local monotonic time, measured from when the
    renewal was sent); otherwise it renews first, and a stale owner (paused, partitioned) learns it
    lost the task from the refused renewal before it can write anything downstream.
    """

    def __init__(self, tasks: TaskStore, task_id: str, fence: int, claim_idle_s: float, confirmed_at: float) -> None:
        self.tasks = tasks
        self.task_id = task_id
        self.fence = fence
        self.claim_idle_s = claim_idle_s
        self.confirmed_at = confirmed_at

    async def renew(self) -> None:
        """Extends the lease if the fence is still ours; StaleOwnerError otherwise."""
        sent = time.monotonic()
        await self.tasks.commit(self.task_id, fence=self.fence, lease_ms=int(self.claim_idle_s * 1000))
        self.confirmed_at = sent

    async def ensure(self) -> None:
        if time.monotonic() - self.confirmed_at > self.claim_idle_s / 2:
            await self.renew()
