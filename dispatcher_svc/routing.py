"""Capability routing: which agent runs a task that names a capability instead of an agent (issue 44).

No model call. Among the agents carrying the capability (`agents[].capabilities`) that the caller may
run, the healthy ones qualify: the agent's model is available in provider_svc's ListModels (read
through `ModelCatalog`, cached `routing.models_cache_s`), and its tasks did not end FAILED at least
`routing.failed_share_max` of the time over the last `routing.failed_window_s` (once at least
`routing.failed_min_ended` ended). Of those, the one with the fewest unfinished tasks (its depth,
agent_load.py) wins; ties go to the smallest id. `choose` is the pure rule; `Router` gathers the
signals. A handoff to a capability resolves its target through `Router.route` too.

Errors: a malformed capability is INVALID_ARGUMENT; one no agent carries is NOT_FOUND (reason
CAPABILITY_UNKNOWN, naming it and the known ones); carriers all unhealthy is UNAVAILABLE (reason
NO_HEALTHY_AGENT, naming the capability and each carrier's problem).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from opentelemetry import trace

from agentmesh.config import CAPABILITY_PATTERN, RoutingSettings
from agentmesh.errors import AgentmeshError, InvalidRequestError, NotFoundError, UnavailableError, Violation, echo
from dispatcher_svc.agents import AgentConfig

log = logging.getLogger("dispatcher_svc.routing")
_tracer = trace.get_tracer("dispatcher_svc.routing")

ATTR_CAPABILITY = "agentmesh.route.capability"
ATTR_CHOSEN = "agentmesh.route.agent_id"
ATTR_DEPTH = "agentmesh.route.depth"
ATTR_CARRIERS = "agentmesh.route.carriers"
ATTR_HEALTHY = "agentmesh.route.healthy"


@dataclass(frozen=True)
class ModelState:
    """provider_svc's ListModels as routing reads it."""

    available: frozenset[str] = frozenset()
    """Names and aliases of the models that can be called now."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Name or alias -> why it cannot be called now."""
    routes: Mapping[str, str] = field(default_factory=dict)
    """Task tag -> model (or a price route's description)."""
    error: str = ""
    """ListModels failed: the models are unknown, and not held against any agent."""

    def problem(self, agent: AgentConfig) -> str:
        """Why the agent's model cannot serve it now; "" when it can (or nobody can tell)."""
        if self.error:
            return ""
        name = agent.model or self.routes.get(agent.task_tag, "")
        if not name:
            return ""  # the provider's default model: nothing to check against
        if name in self.unavailable:
            return f"model {name} unavailable: {self.unavailable[name]}"
        if name in self.available or not agent.model:
            return ""  # a route's text (e.g. "cheapest of tags [...]") names no single model
        return f"model {name} is not in provider_svc's ListModels"


class ModelCatalog(Protocol):
    async def models(self, identity_token: str) -> ModelState:
        """The configured models, asked with `identity_token` ("": the incoming caller's); raises
        AgentmeshError when provider_svc cannot say."""
        ...


class LoadSignals(Protocol):
    async def signals(self, agents: Sequence[str]) -> tuple[Mapping[str, int], Mapping[str, tuple[int, int]]]:
        """Per agent: its depth (unfinished tasks), and (tasks ended, tasks ended FAILED) over the window."""
        ...


@dataclass(frozen=True)
class Health:
    """One carrier as the rule sees it."""

    agent_id: str
    depth: int
    ended: int = 0
    failed: int = 0
    problem: str = ""
    """Why it is unhealthy; "" when healthy."""


@dataclass(frozen=True)
class Choice:
    capability: str
    agent_id: str
    depth: int
    carriers: tuple[Health, ...]
    models_error: str = ""
    """Why the models were not checked ("" when they were)."""

    @property
    def healthy(self) -> int:
        return sum(1 for h in self.carriers if not h.problem)

    def summary(self) -> str:
        return (
            f"routed by capability {self.capability}: depth {self.depth}, "
            f"{self.healthy} healthy of {len(self.carriers)} carriers"
        )

    def attributes(self) -> dict[str, str]:
        """What the task's creation event records about the choice."""
        return {
            "capability": self.capability,
            "routed_depth": str(self.depth),
            "routed_healthy": str(self.healthy),
            "routed_models": f"unchecked: {self.models_error}" if self.models_error else "checked",
        }


def check_capability(capability: str, field_name: str = "capability") -> str:
    if not CAPABILITY_PATTERN.fullmatch(capability):
        raise InvalidRequestError(field_name, f"must match {CAPABILITY_PATTERN.pattern}, got {echo(capability)!r}")
    return capability


def unknown_capability(capability: str, known: Sequence[str], field_name: str = "capability") -> NotFoundError:
    listed = ", ".join(sorted(set(known))) or "none configured"
    return NotFoundError(
        f"{field_name}: no agent carries capability {capability!r} (known: {listed})",
        violations=[Violation(path=field_name, rule="exists", actual=repr(capability), hint=f"one of: {listed}")],
        metadata={"field": field_name, "capability": capability, "reason": "CAPABILITY_UNKNOWN"},
    )


def health_of(
    agent: AgentConfig, depth: int, outcome: tuple[int, int], models: ModelState, settings: RoutingSettings
) -> Health:
    ended, failed = outcome
    problem = models.problem(agent)
    if not problem and ended >= settings.failed_min_ended and failed >= settings.failed_share_max * ended:
        minutes = -(-settings.failed_window_s // 60)
        problem = f"{failed} of its {ended} tasks ended FAILED in the last {minutes} min"
    return Health(agent.id, depth, ended, failed, problem)


def choose(capability: str, carriers: Sequence[Health]) -> Choice:
    """The healthy carrier with the lowest depth, ties by id; UnavailableError when none is healthy."""
    healthy = [h for h in carriers if not h.problem]
    if not healthy:
        why = "; ".join(f"{h.agent_id}: {h.problem}" for h in sorted(carriers, key=lambda h: h.agent_id))
        raise UnavailableError(
            f"capability {capability!r}: no healthy agent carries it ({why})",
            retryable=True,
            metadata={"capability": capability, "reason": "NO_HEALTHY_AGENT"},
        )
    best = min(healthy, key=lambda h: (h.depth, h.agent_id))
    return Choice(capability, best.agent_id, best.depth, tuple(sorted(carriers, key=lambda h: h.agent_id)))


class Router:
    """Routes a capability to an agent (see the module docstring); one per dispatcher replica."""

    def __init__(
        self,
        agents: Sequence[AgentConfig],
        load: LoadSignals,
        catalog: ModelCatalog | None,
        settings: RoutingSettings,
        clock: Callable[[], float] = time.monotonic,
        tracer: trace.Tracer | None = None,
        identity: Callable[[], str] | None = None,
    ) -> None:
        self.tracer = tracer or _tracer
        self.identity = identity
        """Mints the dispatcher's own token for ListModels (a route made outside any call, e.g. a handoff's,
        has no caller's to forward; the answer is shared by every caller anyway)."""
        self.settings = settings
        self.load = load
        self.catalog = catalog
        self.clock = clock
        self._by_capability: dict[str, list[AgentConfig]] = {}
        for agent in sorted(agents, key=lambda a: a.id):
            for tag in agent.capabilities:
                self._by_capability.setdefault(tag, []).append(agent)
        self._models: ModelState | None = None
        self._models_at = 0.0

    def carriers(self, capability: str, field_name: str = "capability") -> list[AgentConfig]:
        """The agents carrying it, by id; INVALID_ARGUMENT if malformed, NOT_FOUND if nobody carries it."""
        check_capability(capability, field_name)
        found = self._by_capability.get(capability)
        if not found:
            raise unknown_capability(capability, list(self._by_capability), field_name)
        return list(found)

    async def models(self) -> ModelState:
        """ListModels, cached; a failed call is cached too (as unknown models), so an outage of
        provider_svc costs one slow call per cache period, not one per start."""
        now = self.clock()
        if self._models is not None and now - self._models_at < self.settings.models_cache_s:
            return self._models
        if self.catalog is None:
            state = ModelState(error="no model catalog")
        else:
            try:
                state = await self.catalog.models(self.identity() if self.identity is not None else "")
            except AgentmeshError as exc:
                log.warning("routing: cannot list the models, not checking them: %s", exc.message)
                state = ModelState(error=exc.message)
        self._models, self._models_at = state, now
        return state

    async def route_to(self, capability: str) -> str:
        """The agent a handoff to `capability` goes to (handoffs.CapabilityRouter)."""
        return (await self.route(capability)).agent_id

    async def route(self, capability: str, among: Sequence[AgentConfig] | None = None) -> Choice:
        """The agent to run a task needing `capability`, among `among` (default: every carrier)."""
        agents = list(among) if among is not None else self.carriers(capability)
        with self.tracer.start_as_current_span("dispatcher.route") as span:
            span.set_attribute(ATTR_CAPABILITY, capability)
            ids = [a.id for a in agents]
            models = await self.models()
            depths, outcomes = await self.load.signals(ids)
            carriers = [
                health_of(a, depths.get(a.id, 0), outcomes.get(a.id, (0, 0)), models, self.settings) for a in agents
            ]
            span.set_attribute(ATTR_CARRIERS, len(carriers))
            choice = replace(choose(capability, carriers), models_error=models.error)
            span.set_attribute(ATTR_CHOSEN, choice.agent_id)
            span.set_attribute(ATTR_DEPTH, choice.depth)
            span.set_attribute(ATTR_HEALTHY, choice.healthy)
            return choice
