"""provider_svc's domain: generation with usage and cost, listing and usage, over the configured models.

Every generation, whichever edge it came from (gRPC, Connect, the OpenAI/Anthropic-compatible
endpoints), takes one path (`generate`, `generate_stream`), each step in its own module:

- validate (`validate_request` here: what every provider needs);
- plan (`planning.py`: the model or the price route's cheapest healthy candidate, the models the
  caller's API key allows, the reserve);
- admit in the caller's quota scopes (`admission.py` over `quotas.py`);
- call the plan's chain (`composition.py` builds each model's composed chain once, docs/design.md §6);
- account (`accounting.py`: usage ledger, metrics);
- settle, or unwind a failed call (`admission.py`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass

from opentelemetry import trace

from agentmesh.config import GatewaySettings, ProviderBackendSettings, ProvidersSettings
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError
from agentmesh.metrics import Metrics
from agentmesh.store import Store
from provider_svc.accounting import ANONYMOUS_AGENT, Accounting, Generation
from provider_svc.admission import SpendAdmission
from provider_svc.composition import DEFAULT_BASE_URLS, ModelFactory, UnavailableModel, unavailable_reason
from provider_svc.health import ModelHealth
from provider_svc.models._http import HttpBackend
from provider_svc.models.base import CallContext, Model, ModelRequest, ModelResponse, Role, StreamEvent, StreamFinal
from provider_svc.params import map_sampling
from provider_svc.planning import ATTR_ROUTE_TAG, Plan, Planner, allowed
from provider_svc.quotas import AlertSink, Quotas
from provider_svc.routing import ResolvedModel, Router
from provider_svc.usage import Prices, UsageLedger, UsageRow

__all__ = [
    "ANONYMOUS_AGENT",
    "DEFAULT_BASE_URLS",
    "Generation",
    "ModelListing",
    "Plan",
    "Providers",
    "UnavailableModel",
    "unavailable_reason",
    "validate_request",
]


@dataclass(frozen=True, slots=True)
class ModelListing:
    """A configured model as ListModels shows it (never a key)."""

    name: str
    provider: str
    provider_type: str
    aliases: tuple[str, ...]
    input_price_per_mtok: float
    output_price_per_mtok: float
    available: bool
    unavailable_reason: str
    tags: tuple[str, ...] = ()


def validate_request(request: ModelRequest) -> None:
    """Request-level checks every provider needs; InvalidRequestError naming the field."""
    if not request.messages:
        raise InvalidRequestError("messages", "at least one message is required")
    call_ids: set[str] = set()
    for i, m in enumerate(request.messages):
        if m.role == Role.TOOL and not m.tool_call_id:
            raise InvalidRequestError(f"messages[{i}].tool_call_id", "required for a tool message")
        for j, call in enumerate(m.tool_calls):
            if m.role != Role.ASSISTANT:
                raise InvalidRequestError(f"messages[{i}].tool_calls", "only assistant messages carry tool calls")
            if not call.id or not call.name:
                raise InvalidRequestError(f"messages[{i}].tool_calls[{j}]", "id and name are required")
            call_ids.add(call.id)
    names = [t.name for t in request.tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidRequestError("tools", f"duplicate tool names {duplicates}")
    for i, tool in enumerate(request.tools):
        if not tool.name:
            raise InvalidRequestError(f"tools[{i}].name", "required")
        if tool.input_schema.get("type", "object") != "object":
            raise InvalidRequestError(f"tools[{i}].input_schema_json", "must be a JSON Schema of type object")
    # Ranges are ours whatever the provider (the scripted table takes every parameter).
    map_sampling("scripted", request.sampling)
    choice = request.tool_choice
    if choice is not None and choice.mode in ("required", "tool") and not request.tools:
        raise InvalidRequestError("tool_choice", f"mode {choice.mode} needs at least one tool")


class Providers:
    """Every configured model, built once; generation, listing and usage (its steps' collaborators:
    `factory`, `planner`, `admission`, `accounting`)."""

    def __init__(
        self,
        settings: ProvidersSettings,
        *,
        store: Store | None = None,
        tracer: trace.Tracer | None = None,
        metrics: Metrics | None = None,
        gateway: GatewaySettings | None = None,
        on_alert: AlertSink | None = None,
    ) -> None:
        self.settings = settings
        self.gateway = gateway or GatewaySettings()
        self.router = Router(settings)
        self.store = store
        self.tracer = tracer
        self.metrics = metrics or Metrics()
        self.ledger = UsageLedger(store, settings.usage_ttl_days) if store is not None else None
        self.health = ModelHealth(self.gateway.health)
        self.quotas = (
            Quotas(store, self.gateway, metrics=self.metrics, on_alert=on_alert) if store is not None else None
        )
        self.factory = ModelFactory(settings, self.router, self.health, store=store, tracer=tracer)
        self.planner = Planner(self.router, self.health, self.gateway, self.factory.model)
        self.admission = SpendAdmission(self.quotas)
        self.accounting = Accounting(self.router, self.ledger, self.metrics)

    async def aclose(self) -> None:
        await self.admission.aclose()
        if self.quotas is not None:
            await self.quotas.aclose()
        if self.ledger is not None:
            await self.ledger.aclose()
        await self.factory.aclose()

    def model(self, name: str) -> Model:
        """The composed model for a name or alias (without fallbacks)."""
        return self.factory.model(name)

    def _http_backend(self, backend: ProviderBackendSettings) -> HttpBackend:
        """The backend's one HTTP client (the Embed path's remote adapters share it)."""
        return self.factory.http_backend(backend)

    def allowed(self, resolved: ResolvedModel, patterns: tuple[str, ...], requested: str = "") -> bool:
        """Whether an API key with these model patterns may call `resolved` (by its name or the name asked)."""
        return allowed(resolved, patterns, requested)

    def plan(self, request: ModelRequest, ctx: CallContext, *, model: str = "", task_tag: str = "") -> Plan:
        """The chain a request gets and its reserve (`planning.Planner.plan`)."""
        return self.planner.plan(request, ctx, model=model, task_tag=task_tag)

    def prices(self, name: str) -> Prices:
        return self.accounting.prices(name)

    # -- generation ------------------------------------------------------------------------------

    def _account(self, response: ModelResponse, ctx: CallContext) -> Generation:
        return self.accounting.account(response, ctx, task_tag=str(ctx.route.get(ATTR_ROUTE_TAG, "")))

    def _prepare(self, request: ModelRequest, ctx: CallContext, model: str, task_tag: str) -> Plan:
        """Validate, plan (kept on `ctx.route` for the spans and the ledger's task tag)."""
        validate_request(request)
        self.accounting.check_agent(ctx)
        plan = self.plan(request, ctx, model=model, task_tag=task_tag)
        ctx.route = plan.route
        return plan

    async def generate(
        self, request: ModelRequest, ctx: CallContext, *, model: str = "", task_tag: str = ""
    ) -> Generation:
        """One complete reply; raises AgentmeshError (ctx.attempts lists what was tried)."""
        plan = self._prepare(request, ctx, model, task_tag)
        reservation = await self.admission.admit(plan, ctx)
        try:
            response = await plan.chain.request(request, ctx)
        except BaseException as exc:
            started = isinstance(exc, asyncio.CancelledError) and bool(ctx.attempts)
            self.admission.unwind(reservation, ctx, plan, started=started)
            raise
        generation = self._account(response, ctx)
        self.admission.settle(reservation, generation)
        return generation

    async def generate_stream(
        self, request: ModelRequest, ctx: CallContext, *, model: str = "", task_tag: str = ""
    ) -> AsyncIterator[StreamEvent | Generation]:
        """Deltas, then the Generation (instead of the StreamFinal)."""
        plan = self._prepare(request, ctx, model, task_tag)
        reservation = await self.admission.admit(plan, ctx)
        started = False
        try:
            async for event in plan.chain.request_stream(request, ctx):
                if isinstance(event, StreamFinal):
                    generation = self._account(event.response, ctx)
                    self.admission.settle(reservation, generation)
                    reservation = None
                    yield generation
                    return
                started = True
                yield event
        except BaseException:
            self.admission.unwind(reservation, ctx, plan, started=started)
            raise
        self.admission.unwind(reservation, ctx, plan, started=started)
        raise AgentmeshError(ErrorCode.INTERNAL, f"stream of {plan.chain.name} ended without a final reply")

    # -- listing and usage -----------------------------------------------------------------------

    def list_models(self) -> list[ModelListing]:
        aliases = self.router.aliases
        listings = []
        for backend in self.settings.backends:
            for model in backend.models:
                name = f"{backend.name}/{model.name}"
                listings.append(
                    ModelListing(
                        name=name,
                        provider=backend.name,
                        provider_type=backend.type,
                        aliases=tuple(sorted(a for a, target in aliases.items() if target == name)),
                        input_price_per_mtok=model.input_price_per_mtok,
                        output_price_per_mtok=model.output_price_per_mtok,
                        available=backend.available,
                        unavailable_reason=unavailable_reason(backend),
                        tags=tuple(model.tags),
                    )
                )
        return listings

    def routes(self) -> dict[str, str]:
        return {tag: r if isinstance(r, str) else r.describe() for tag, r in self.settings.routing.items()}

    async def usage(
        self, agent_id: str = "", start: dt.date | None = None, end: dt.date | None = None
    ) -> list[UsageRow]:
        if self.ledger is None:
            return []
        return await self.ledger.query(agent_id, start, end)
