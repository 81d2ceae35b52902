"""Circuit breaker per (agent, tool), or per (agent instance, tool) (docs/design.md §5).

Scope (`tools.breaker.scope`): `agent` (the default) keys a breaker by the calling agent and the tool, so
a breaker one task opened against a failing upstream is open for the agent's next task too (the
dispatcher gives every task its own instance, `<agent>/<task>`, so an instance-scoped breaker starts
closed again with every task); `instance` keys it by the token's instance (one breaker per task).
Either way every replica shares it (below).

closed --(failure_threshold consecutive failures)--> open --(open_s)--> half-open: one probe admitted
  probe fails  -> open again
  probe passes -> ramping: the admitted share of calls grows linearly from ramp_start_fraction to 1 over
                  ramp_s (deterministic: each call earns `share` credit, a call is admitted per whole
                  credit), any failure re-opens, and after ramp_s the breaker is closed.

`Breakers` keeps the state of one replica in memory (entries bounded, least recently used go
first): what tool_svc uses without Redis, and with `tools.breaker.shared: false`. By default the
breakers are shared by every replica through Redis (`shared_breaker.SharedBreakers`, issue 28).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agentmesh.errors import AgentmeshError, ErrorCode
from tool_svc.call import CallState
from tool_svc.model import Caller, Outcome, ToolResult

if TYPE_CHECKING:
    from tool_svc.shared_breaker import SharedBreakers

log = logging.getLogger("tool_svc.breaker")

State = Literal["closed", "open", "half_open", "ramping"]


@dataclass(frozen=True)
class BreakerConfig:
    failure_threshold: int = 5
    open_s: float = 30.0
    ramp_s: float = 30.0
    ramp_start_fraction: float = 0.25
    max_entries: int = 10_000


@dataclass
class Breaker:
    """One breaker's state."""

    state: State = "closed"
    failures: int = 0
    opened_at: float = 0.0
    probe_in_flight: bool = False
    ramp_started: float = 0.0
    credit: float = 0.0


class Breakers:
    """All breakers of this replica; `admit` before a call, `record` after it."""

    def __init__(self, config: BreakerConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], Breaker] = OrderedDict()

    def state(self, instance: str, tool: str) -> State:
        entry = self._entries.get((instance, tool))
        if entry is None:
            return "closed"
        self._advance(entry)
        return entry.state

    def census(self) -> list[tuple[str, str, int]]:
        """(tool, state, number of breakers) for every tool and state present, as `state` would read
        them now, without changing any (a metrics collector calls this, possibly off the event loop)."""
        now = self.clock()
        counts: dict[tuple[str, str], int] = {}
        # list(): one C-level copy, so a concurrent insert on the loop cannot break the iteration.
        for (_, tool), entry in list(self._entries.items()):
            state: str = entry.state
            if state == "open" and now - entry.opened_at >= self.config.open_s:
                state = "half_open"
            elif state == "ramping" and now - entry.ramp_started >= self.config.ramp_s:
                state = "closed"
            counts[(tool, state)] = counts.get((tool, state), 0) + 1
        return [(tool, state, count) for (tool, state), count in sorted(counts.items())]

    def _get(self, key: tuple[str, str]) -> Breaker:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = Breaker()
            while len(self._entries) > self.config.max_entries:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return entry

    def _advance(self, entry: Breaker) -> None:
        now = self.clock()
        if entry.state == "open" and now - entry.opened_at >= self.config.open_s:
            entry.state = "half_open"
            entry.probe_in_flight = False
        elif entry.state == "ramping" and now - entry.ramp_started >= self.config.ramp_s:
            entry.state = "closed"
            entry.failures = 0

    def share(self, entry: Breaker) -> float:
        """The share of calls a ramping breaker admits now."""
        if self.config.ramp_s <= 0:
            return 1.0
        progress = (self.clock() - entry.ramp_started) / self.config.ramp_s
        start = self.config.ramp_start_fraction
        return min(1.0, start + (1.0 - start) * max(0.0, progress))

    def admit(self, instance: str, tool: str, *, fallback_tool: str = "") -> AgentmeshError | None:
        """None when the call may go ahead; else CIRCUIT_OPEN with a retry hint and the fallback."""
        entry = self._get((instance, tool))
        self._advance(entry)
        now = self.clock()
        if entry.state == "closed":
            return None
        if entry.state == "half_open":
            if not entry.probe_in_flight:
                entry.probe_in_flight = True
                return None
            return self._open_error(tool, "a probe call is testing the upstream", 1.0, fallback_tool)
        if entry.state == "ramping":
            entry.credit += self.share(entry)
            if entry.credit >= 1.0:
                entry.credit -= 1.0
                return None
            return self._open_error(tool, "the breaker is letting traffic back in gradually", 0.5, fallback_tool)
        remaining = max(0.0, self.config.open_s - (now - entry.opened_at))
        return self._open_error(tool, f"{entry.failures} consecutive failures", remaining, fallback_tool)

    def record(self, instance: str, tool: str, *, success: bool) -> None:
        """The outcome of an admitted call: a failure is an upstream fault (timeout, unavailable, crash)."""
        entry = self._get((instance, tool))
        self._advance(entry)
        now = self.clock()
        if success:
            if entry.state == "half_open":
                entry.state, entry.ramp_started, entry.credit = "ramping", now, 0.0
                entry.probe_in_flight = False
                if self.config.ramp_s <= 0:
                    entry.state = "closed"
            entry.failures = 0
            return
        entry.failures += 1
        if entry.state in ("half_open", "ramping") or entry.failures >= self.config.failure_threshold:
            entry.state, entry.opened_at, entry.probe_in_flight = "open", now, False

    def release_probe(self, instance: str, tool: str) -> None:
        """An admitted call ended without a verdict (e.g. cancelled): let another probe through."""
        entry = self._entries.get((instance, tool))
        if entry is not None and entry.state == "half_open":
            entry.probe_in_flight = False

    @staticmethod
    def _open_error(tool: str, why: str, retry_after: float, fallback_tool: str) -> AgentmeshError:
        return AgentmeshError(
            ErrorCode.CIRCUIT_OPEN,
            f"circuit breaker for {tool} is open ({why}); the call was not run",
            retry_after=retry_after,
            fallback_tool=fallback_tool,
        )


# Faults that say the upstream is unhealthy. A 404, a rejection or bad arguments say nothing about it.
UPSTREAM_FAULTS = frozenset({ErrorCode.UPSTREAM_TIMEOUT, ErrorCode.UPSTREAM_UNAVAILABLE, ErrorCode.INTERNAL})


BreakerScope = Literal["agent", "instance"]


def breaker_owner(caller: Caller, scope: BreakerScope) -> str:
    """Whose breaker a call counts against: its agent (else instance, else subject), or with scope
    `instance` its instance (else agent, else subject)."""
    if scope == "instance":
        return caller.instance or caller.agent_id or caller.subject
    return caller.agent_id or caller.instance or caller.subject


class CircuitBreaker:
    """Pipeline step: CIRCUIT_OPEN while the (agent or instance, tool) breaker is open; records the verdict
    after."""

    def __init__(self, breakers: Breakers | SharedBreakers, scope: BreakerScope = "agent") -> None:
        self.breakers = breakers
        self.scope: BreakerScope = scope

    async def __call__(self, call: CallState) -> Outcome | None:
        instance = breaker_owner(call.caller, self.scope)
        tool = call.spec.name
        refused = self.breakers.admit(instance, tool, fallback_tool=call.spec.fallback_tool)
        if inspect.isawaitable(refused):  # the shared breakers ask Redis
            refused = await refused
        if refused is not None:
            return refused

        async def verdict(result: ToolResult | None) -> None:
            if not call.executed:
                noted = self.breakers.release_probe(instance, tool)
            else:
                failed = call.exec_error is not None and call.exec_error.code in UPSTREAM_FAULTS
                noted = self.breakers.record(instance, tool, success=not failed)
            if not inspect.isawaitable(noted):
                return
            try:
                await noted
            except AgentmeshError as exc:
                # Bookkeeping of a call that already ran: never its outcome, nor a reason to skip the
                # finalizers after this one (the idempotency record is settled there).
                log.warning("circuit breaker of %s for %s not updated: %s", tool, instance, exc)

        call.finalizers.append(verdict)
        return None
