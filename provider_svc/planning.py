"""How one request will be served: its model chain, the reserve it is admitted with, how it was routed.

A request's chain is its model (with its configured fallbacks), else its task tag's route, else the
default model (`routing.Router` resolves the names). A price route picks, per request, the cheapest
healthy candidate the caller's API key allows, priced at this request's estimated input and output
limit; when none is healthy the cheapest of them all still beats failing without trying. The reserve is
the dearest model of the chain at those tokens (`pricing.py`), what the quota scopes admit the call with.
The route's choices are kept as span attributes (`Plan.route`) and the task tag for the usage ledger.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentmesh.config import GatewaySettings, PriceRouteSettings
from agentmesh.errors import PermissionDeniedError, echo
from provider_svc.health import ModelHealth
from provider_svc.models.base import CallContext, Model, ModelRequest
from provider_svc.models.fallback import FallbackModel
from provider_svc.pricing import estimate_input_tokens, output_limit, prices_of, reserve_usd
from provider_svc.routing import ResolvedModel, Router

__all__ = [
    "ATTR_RESERVE_USD",
    "ATTR_ROUTE_CANDIDATES",
    "ATTR_ROUTE_CHOICE",
    "ATTR_ROUTE_MODEL",
    "ATTR_ROUTE_SKIPPED",
    "ATTR_ROUTE_TAG",
    "Plan",
    "Planner",
    "allowed",
]

ATTR_ROUTE_TAG = "agentmesh.route.task_tag"
ATTR_ROUTE_CHOICE = "agentmesh.route.choice"
ATTR_ROUTE_CANDIDATES = "agentmesh.route.candidates"
ATTR_ROUTE_SKIPPED = "agentmesh.route.skipped"
ATTR_ROUTE_MODEL = "agentmesh.route.model"
ATTR_RESERVE_USD = "agentmesh.quota.reserve_usd"


@dataclass(frozen=True)
class Plan:
    """How one request will be served: the model chain, what it reserves, how it was routed."""

    chain: Model
    models: tuple[str, ...]
    """The chain's models in order ("provider/model")."""
    reserve_usd: float
    """The dearest model of the chain at the request's estimated input and its output limit."""
    reserve_tokens: int
    route: dict[str, Any] = field(default_factory=dict)


def allowed(resolved: ResolvedModel, patterns: tuple[str, ...], requested: str = "") -> bool:
    """Whether an API key with these model patterns may call `resolved` (by its name or the name asked)."""
    if not patterns:
        return True
    names = {resolved.name, requested} - {""}
    return any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns)


class Planner:
    """Chooses each request's chain and reserve (see the module docstring)."""

    def __init__(
        self, router: Router, health: ModelHealth, gateway: GatewaySettings, model: Callable[[str], Model]
    ) -> None:
        self.router = router
        self.health = health
        self.gateway = gateway
        self._model = model
        """The composed model of a configured name (`ModelFactory.model`)."""

    def plan(self, request: ModelRequest, ctx: CallContext, *, model: str = "", task_tag: str = "") -> Plan:
        """The chain a request gets and its reserve: its model (with fallbacks), else its tag's route (a
        price route: the cheapest healthy allowed candidate for this request), else the default model."""
        patterns = ctx.model_patterns
        input_tokens = estimate_input_tokens(request)
        route: dict[str, Any] = {}
        price_route = self.router.price_route(model, task_tag)
        if price_route is not None:
            resolved = self._cheapest(request, price_route, patterns, input_tokens, route)
        else:
            requested = self.router.route(model, task_tag)
            chain = self.router.chain(requested)
            if not allowed(chain[0], patterns, requested):
                raise PermissionDeniedError(
                    f"model:{chain[0].name}",
                    f"this API key may not use {echo(requested)} ({chain[0].name}); it may use {', '.join(patterns)}",
                )
            resolved = [r for r in chain if allowed(r, patterns)]
        if task_tag and not model:
            route[ATTR_ROUTE_TAG] = task_tag[:64]
        route[ATTR_ROUTE_MODEL] = resolved[0].name
        outputs = [output_limit(request, r, self.gateway) for r in resolved]
        reserve = max(reserve_usd(input_tokens, out, prices_of(r)) for r, out in zip(resolved, outputs, strict=True))
        route[ATTR_RESERVE_USD] = round(reserve, 9)
        models = [self._model(r.name) for r in resolved]
        return Plan(
            chain=models[0] if len(models) == 1 else FallbackModel(models),
            models=tuple(r.name for r in resolved),
            reserve_usd=reserve,
            reserve_tokens=input_tokens + max(outputs),
            route=route,
        )

    def _cheapest(
        self,
        request: ModelRequest,
        price_route: PriceRouteSettings,
        patterns: tuple[str, ...],
        input_tokens: int,
        route: dict[str, Any],
    ) -> list[ResolvedModel]:
        candidates = [r for r in self.router.candidates(price_route) if allowed(r, patterns)]
        if not candidates:
            raise PermissionDeniedError(
                "model:route", f"this API key may use none of the models of the route ({price_route.describe()})"
            )
        skipped = []
        usable = []
        for r in candidates:
            why = "unavailable" if not r.backend.available else self.health.why_not(r.name)
            if why:
                skipped.append(f"{r.name} ({why})")
            else:
                usable.append(r)
        # None healthy: the cheapest of them all still beats failing without trying.
        pool = usable or [r for r in candidates if r.backend.available] or candidates

        def price(r: ResolvedModel) -> float:
            return reserve_usd(input_tokens, output_limit(request, r, self.gateway), prices_of(r))

        ranked = sorted(pool, key=price)  # stable: configuration order breaks ties
        chosen = ranked[0]
        fallbacks = [r for r in self.router.chain(chosen.name)[1:] if allowed(r, patterns)] or ranked[1:]
        route[ATTR_ROUTE_CHOICE] = price_route.choose
        route[ATTR_ROUTE_CANDIDATES] = [r.name for r in ranked]
        if skipped:
            route[ATTR_ROUTE_SKIPPED] = skipped
        return [chosen, *(r for r in fallbacks if r.name != chosen.name)]
