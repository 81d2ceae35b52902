"""Per-agent token bucket (docs/design.md §5): the Store's one atomic Lua script on Redis (`token_bucket`,
`agentmesh/lua/token_bucket.lua`, taken as a lease), so every tool_svc replica draws from the same bucket
(`am:rl:{tool:<agent>}`) and Redis time is the only clock.

To spare a Redis round trip on every call, a replica may take a small batch of tokens at once and spend
them locally for at most `_LEASE_TTL_S`: at most 10 % of the capacity (and `local_batch`), so a replica
can never hold much of an agent's budget, and tokens it does not spend in time are dropped. The limit
therefore never gets looser than configured, only slightly stricter; small buckets (capacity < 20) are
exact, one Redis call per tool call.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable

from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from tool_svc.call import CallState
from tool_svc.model import Outcome

_LEASE_TTL_S = 1.0
_LEASE_SHARE = 0.1
_MAX_LEASES = 10_000


def bucket_subject(agent: str) -> str:
    """The bucket's subject: `tool:<agent>`, hashed when the id has characters a key cannot hold."""
    subject = f"tool:{agent}"
    if len(subject) <= 200 and all(ch.isprintable() and not ch.isspace() and ch not in "{}" for ch in subject):
        return subject
    return "tool:sha256:" + hashlib.sha256(agent.encode("utf-8", "surrogatepass")).hexdigest()


class RateLimit:
    """Pipeline step: RATE_LIMITED (with retry_after) once the agent's bucket is empty."""

    def __init__(
        self,
        store: Store | None,
        *,
        capacity: float,
        refill_per_second: float,
        local_batch: int = 16,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.capacity = capacity
        self.refill_per_second = refill_per_second
        self.batch = max(1, min(local_batch, math.floor(capacity * _LEASE_SHARE)))
        self.clock = clock
        self._leases: OrderedDict[str, tuple[int, float]] = OrderedDict()

    async def __call__(self, call: CallState) -> Outcome | None:
        if self.store is None:
            return None
        agent = call.caller.agent
        held = self._leases.get(agent)
        now = self.clock()
        if held is not None and held[0] > 0 and now < held[1]:
            self._leases[agent] = (held[0] - 1, held[1])
            return None
        key = self.store.keys.ratelimit(bucket_subject(agent))
        async with self.store.guard("rate limit"):
            # The Store's one token bucket, as a lease: at least 1 token, up to the batch, by Redis time.
            _, _, retry_ms, taken = await self.store.script("token_bucket")(
                keys=[key], args=[self.capacity, self.refill_per_second, "", 1, self.batch]
            )
        if int(taken) >= 1:
            if int(taken) > 1:
                self._leases[agent] = (int(taken) - 1, now + _LEASE_TTL_S)
                self._leases.move_to_end(agent)
                while len(self._leases) > _MAX_LEASES:
                    self._leases.popitem(last=False)
            return None
        retry_after = int(retry_ms) / 1000
        return AgentmeshError(
            ErrorCode.RATE_LIMITED,
            f"agent {agent} exceeded its tool call rate ({self.capacity:g} burst, "
            f"{self.refill_per_second:g}/s); retry after {retry_after:.2f}s",
            retry_after=retry_after,
        )
