"""Circuit breakers shared by every tool_svc replica through Redis (issue 28; docs/design.md §5).

The same state machine as `breaker.Breakers` (closed -> open -> half-open probe -> ramping -> closed),
kept in one Redis hash per (agent instance, tool), `am:brk:{<subject>}`, and moved by Lua scripts on
Redis time, so every replica sees one breaker: `failure_threshold` consecutive failures anywhere open
it for everyone, one probe is admitted fleet-wide, and the ramp's share is counted once.

A replica does not ask Redis before every call: while its copy of a breaker says closed with no
failures and is younger than `tools.breaker.sync_s`, a call is admitted and its success not reported.
Every failure is reported at once (the reply tells the replica whether the breaker opened), a success
is reported while failures are counted, and a breaker that is not closed is asked about on every
call. So another replica learns that a breaker opened within `sync_s`, or at its own first failure;
"consecutive" counts the successes other replicas saw since their copy last said zero.
A breaker's hash expires once it has been closed and quiet for a while (idle breakers cost nothing).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from agentmesh.errors import AgentmeshError
from agentmesh.lua_source import package_lua
from agentmesh.store import Store
from tool_svc.breaker import BreakerConfig, Breakers, State

__all__ = ["SharedBreakers", "breaker_subject"]

# The scripts' sources are tool_svc/lua/*.lua. Redis TIME in ms (`now`), shared by both: it takes the
# `{NOW_MS}` line of breaker_admit.lua and precedes breaker_record.lua.
_NOW_MS: Final = package_lua("tool_svc", "now_ms")

# KEYS[1]: the breaker hash. ARGV: open ms, ramp ms, ramp start fraction, probe lease ms.
# Returns {admitted 0/1, state, failures, retry_after_ms}.
# A breaker without a hash (closed, quiet) is answered before Redis's clock is read (issue 45).
ADMIT_LUA: Final = package_lua("tool_svc", "breaker_admit").replace("\n{NOW_MS}\n", _NOW_MS)

# KEYS[1]: the breaker hash. ARGV: '1' success / '0' failure / 'release' (a probe without a verdict),
# failure threshold, ramp ms, idle ttl ms. Returns {state, failures}.
RECORD_LUA: Final = _NOW_MS + package_lua("tool_svc", "breaker_record")

# A half-open probe that never reports (its replica died) holds the probe slot this long at most.
_PROBE_LEASE_MS: Final = 30_000
# A breaker's hash lives this long past open + ramp after its last change.
_IDLE_MS: Final = 600_000


def breaker_subject(instance: str, tool: str) -> str:
    """The hash tag of one breaker: `<instance>|<tool>`, hashed when it could not be a key."""
    subject = f"{instance}|{tool}"
    if len(subject) <= 200 and all(ch.isprintable() and not ch.isspace() and ch not in "{}" for ch in subject):
        return subject
    return "sha256:" + hashlib.sha256(subject.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class _Copy:
    """What this replica last learnt of a breaker, and when (monotonic)."""

    state: State
    failures: int
    at: float


class SharedBreakers:
    """The breakers of every replica, in Redis (module docstring); the interface of `Breakers`, async."""

    def __init__(
        self, store: Store, config: BreakerConfig, *, sync_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.config = config
        self.sync_s = sync_s
        self.clock = clock
        self._copies: OrderedDict[tuple[str, str], _Copy] = OrderedDict()
        self._admit = store.script("tool_breaker_admit", ADMIT_LUA)
        self._record = store.script("tool_breaker_record", RECORD_LUA)

    def key(self, instance: str, tool: str) -> str:
        return f"{self.store.keys.prefix}:brk:{{{breaker_subject(instance, tool)}}}"

    def _remember(self, instance: str, tool: str, state: bytes | str, failures: int) -> _Copy:
        text = state.decode() if isinstance(state, bytes) else str(state)
        copy = self._copies[(instance, tool)] = _Copy(text, failures, self.clock())  # type: ignore[arg-type]
        self._copies.move_to_end((instance, tool))
        while len(self._copies) > self.config.max_entries:
            self._copies.popitem(last=False)
        return copy

    def _fresh(self, instance: str, tool: str) -> _Copy | None:
        copy = self._copies.get((instance, tool))
        if copy is None or self.clock() - copy.at >= self.sync_s:
            return None
        return copy

    def census(self) -> list[tuple[str, str, int]]:
        """(tool, state, number of breakers) as this replica last learnt them from Redis (the metrics'
        `agentmesh.tool.breakers`; every replica reports its copies, which agree within `sync_s`)."""
        counts: dict[tuple[str, str], int] = {}
        for (_, tool), copy in list(self._copies.items()):  # list(): a copy, safe off the event loop
            counts[(tool, copy.state)] = counts.get((tool, copy.state), 0) + 1
        return [(tool, state, count) for (tool, state), count in sorted(counts.items())]

    def state(self, instance: str, tool: str) -> State:
        """This replica's copy of the breaker's state (closed when it has none)."""
        copy = self._copies.get((instance, tool))
        return copy.state if copy is not None else "closed"

    async def admit(self, instance: str, tool: str, *, fallback_tool: str = "") -> AgentmeshError | None:
        """None when the call may go ahead; else CIRCUIT_OPEN with a retry hint and the fallback."""
        copy = self._fresh(instance, tool)
        if copy is not None and copy.state == "closed" and copy.failures == 0:
            return None
        c = self.config
        args = [int(c.open_s * 1000), int(c.ramp_s * 1000), c.ramp_start_fraction, _PROBE_LEASE_MS]
        async with self.store.guard("circuit breaker"):
            admitted, state, failures, retry_ms = await self._admit(keys=[self.key(instance, tool)], args=args)
        copy = self._remember(instance, tool, state, int(failures))
        if int(admitted):
            return None
        why = {
            "open": f"{copy.failures} consecutive failures",
            "half_open": "a probe call is testing the upstream",
            "ramping": "the breaker is letting traffic back in gradually",
        }.get(copy.state, copy.state)
        return Breakers._open_error(tool, why, int(retry_ms) / 1000, fallback_tool)

    async def record(self, instance: str, tool: str, *, success: bool) -> None:
        """The outcome of an admitted call: every failure, and a success while failures are counted."""
        copy = self._fresh(instance, tool)
        if success and copy is not None and copy.state == "closed" and copy.failures == 0:
            return
        await self._send(instance, tool, "1" if success else "0")

    async def release_probe(self, instance: str, tool: str) -> None:
        """An admitted call ended without a verdict (e.g. cancelled): let another probe through."""
        copy = self._copies.get((instance, tool))
        if copy is not None and copy.state == "half_open":
            await self._send(instance, tool, "release")

    async def _send(self, instance: str, tool: str, verdict: str) -> None:
        c = self.config
        ttl_ms = int((c.open_s + c.ramp_s) * 1000) + _IDLE_MS
        args = [verdict, c.failure_threshold, int(c.ramp_s * 1000), ttl_ms]
        async with self.store.guard("circuit breaker"):
            state, failures = await self._record(keys=[self.key(instance, tool)], args=args)
        self._remember(instance, tool, state, int(failures))
