"""provider_svc's domain: models composed from configuration, generation with usage and cost.

Per configured model the chain is, outermost first (docs/design.md §6):

    FallbackModel([ per model of the chain:
        InstrumentedModel(RetryModel(RateLimitedModel(ConcurrencyLimitedModel(<adapter>)))) ])

so each model tried gets one GenAI span, retries are per model, every retry takes a rate-limit
token, and a concurrency slot is held only during an upstream call. A backend whose API key is not
set is built as `UnavailableModel` (PROVIDER_AUTH_FAILED, so a fallback chain moves on).

Every generation, whichever edge it came from (gRPC, Connect, the OpenAI/Anthropic-compatible
endpoints), takes one path (`generate`, `generate_stream`): validate, plan (the model or the price
route's cheapest healthy candidate, the models the caller's API key allows, the reserve), admit in
the caller's quota scopes (quotas.py), call, account (usage ledger, metrics), settle.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fnmatch
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from agentmesh.config import ConfigError, GatewaySettings, ProviderBackendSettings, ProvidersSettings
from agentmesh.errors import AgentmeshError, ErrorCode, InvalidRequestError, PermissionDeniedError, echo
from agentmesh.metrics import Metrics
from agentmesh.store import Store
from provider_svc.health import HealthTrackedModel, ModelHealth
from provider_svc.models._http import HttpBackend, HttpTimeouts
from provider_svc.models.anthropic import AnthropicModel
from provider_svc.models.base import (
    Attempt,
    CallContext,
    Model,
    ModelRequest,
    ModelResponse,
    ProviderInfo,
    Role,
    StreamEvent,
    StreamFinal,
)
from provider_svc.models.concurrency import ConcurrencyLimitedModel
from provider_svc.models.fallback import FallbackModel
from provider_svc.models.instrumented import InstrumentedModel
from provider_svc.models.openai import OpenAIModel
from provider_svc.models.rate_limited import RateLimitedModel, bucket_subject
from provider_svc.models.retry import RetryModel, RetryPolicy
from provider_svc.params import map_sampling
from provider_svc.pricing import estimate_input_tokens, output_limit, prices_of, reserve_usd
from provider_svc.quotas import AlertSink, Quotas, Reservation
from provider_svc.routing import ResolvedModel, Router
from provider_svc.testing.scripted import FaultConfig, GenericPolicy, Policy, ScriptedModel, load_policy, load_scenario
from provider_svc.usage import Prices, UsageLedger, UsageRow, cost_usd

__all__ = ["DEFAULT_BASE_URLS", "Generation", "ModelListing", "Plan", "Providers", "UnavailableModel"]

log = logging.getLogger("provider_svc")

DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
ANONYMOUS_AGENT = "anonymous"
ATTR_ROUTE_TAG = "agentmesh.route.task_tag"
ATTR_ROUTE_CHOICE = "agentmesh.route.choice"
ATTR_ROUTE_CANDIDATES = "agentmesh.route.candidates"
ATTR_ROUTE_SKIPPED = "agentmesh.route.skipped"
ATTR_ROUTE_MODEL = "agentmesh.route.model"
ATTR_RESERVE_USD = "agentmesh.quota.reserve_usd"


@dataclass(frozen=True, slots=True)
class Generation:
    """A successful generation with its accounting."""

    response: ModelResponse
    cost_usd: float
    attempts: tuple[Attempt, ...]


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


class UnavailableModel:
    """A model of a backend that cannot be called (its API key variable is unset)."""

    def __init__(self, provider: ProviderInfo, name: str, reason: str) -> None:
        self._provider = provider
        self._name = name
        self.reason = reason

    @property
    def name(self) -> str:
        return self._name

    @property
    def provider(self) -> ProviderInfo:
        return self._provider

    def _error(self) -> AgentmeshError:
        return AgentmeshError(
            ErrorCode.PROVIDER_AUTH_FAILED,
            f"{self._name} is unavailable: {self.reason}",
            retryable=False,
            metadata={"provider": self._provider.name, "reason": "unavailable"},
        )

    async def request(self, request: ModelRequest, ctx: CallContext) -> ModelResponse:
        raise self._error()

    async def request_stream(self, request: ModelRequest, ctx: CallContext) -> AsyncIterator[StreamEvent]:
        raise self._error()
        yield  # pragma: no cover - makes this an async generator


def unavailable_reason(backend: ProviderBackendSettings) -> str:
    if backend.available:
        return ""
    return f"backend {backend.name} has no API key (set the environment variable its api_key names)"


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
    """Every configured model, built once; generation, listing and usage."""

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
        self._settling: set[asyncio.Task[None]] = set()
        self._http: dict[str, HttpBackend] = {}
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._models: dict[str, Model] = {}
        for backend in settings.backends:
            if backend.rate_limit_per_min and store is None and backend.type != "scripted":
                log.warning("backend %s: no store, so no rate limit", backend.name)
            for model in backend.models:
                # Built now: a bad policy, scenario or URL fails at start-up, not on the first call.
                self.model(f"{backend.name}/{model.name}")

    async def aclose(self) -> None:
        if self._settling:
            await asyncio.wait(set(self._settling), timeout=5.0)
        if self.quotas is not None:
            await self.quotas.aclose()
        if self.ledger is not None:
            await self.ledger.aclose()
        for backend in self._http.values():
            await backend.aclose()
        self._http.clear()

    # -- building --------------------------------------------------------------------------------

    def _http_backend(self, backend: ProviderBackendSettings) -> HttpBackend:
        existing = self._http.get(backend.name)
        if existing is not None:
            return existing
        base_url = backend.base_url or DEFAULT_BASE_URLS[backend.type]
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"providers.backends.{backend.name}.base_url: must be an http(s) URL")
        key = backend.key
        if backend.type == "anthropic":
            auth = {"x-api-key": key, "anthropic-version": backend.anthropic_version}
        else:
            auth = {"authorization": f"Bearer {key}"} if key else {}
        created = HttpBackend(
            backend.name,
            base_url,
            auth_headers=auth,
            static_headers=backend.headers,
            timeouts=HttpTimeouts(backend.timeouts.connect_s, backend.timeouts.read_s, backend.timeouts.total_s),
            max_connections=max(backend.concurrency, 1),
            tracer=self.tracer,
        )
        self._http[backend.name] = created
        return created

    def _policy(self, resolved: ResolvedModel) -> tuple[Policy, FaultConfig | None]:
        listed = resolved.settings
        if listed is None:
            return GenericPolicy(), None
        try:
            policy: Policy
            if listed.policy:
                policy = load_policy(listed.policy, listed.policy_args)
            elif listed.scenario:
                policy = load_scenario(listed.scenario)
            else:
                policy = GenericPolicy(**listed.policy_args)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"providers: model {resolved.name}: {exc}") from exc
        faults = FaultConfig(**listed.faults.model_dump()) if listed.faults is not None else None
        return policy, faults

    def _adapter(self, resolved: ResolvedModel) -> Model:
        backend = resolved.backend
        provider = ProviderInfo(backend.name, backend.type)
        on_unsupported = backend.unsupported_params or self.settings.unsupported_params
        listed = resolved.settings
        if backend.type == "scripted":
            policy, faults = self._policy(resolved)
            return ScriptedModel(
                backend.name,
                resolved.model_id,
                policy,
                faults=faults,
                latency_s=(listed.latency_ms / 1000) if listed is not None else 0.0,
            )
        if not backend.available:
            return UnavailableModel(provider, resolved.name, unavailable_reason(backend))
        http = self._http_backend(backend)
        if backend.type == "anthropic":
            return AnthropicModel(
                http,
                backend.name,
                resolved.model_id,
                default_max_tokens=(
                    listed.max_tokens if listed is not None and listed.max_tokens else backend.max_tokens
                ),
                on_unsupported=on_unsupported,
                extra_params=frozenset(backend.extra_params),
                structured_output=backend.structured_output,
            )
        return OpenAIModel(
            http,
            backend.name,
            resolved.model_id,
            on_unsupported=on_unsupported,
            default_max_tokens=listed.max_tokens if listed is not None else None,
        )

    def _compose(self, resolved: ResolvedModel) -> Model:
        backend = resolved.backend
        model = self._adapter(resolved)
        if not isinstance(model, UnavailableModel):
            semaphore = self._semaphores.setdefault(backend.name, asyncio.Semaphore(backend.concurrency))
            model = ConcurrencyLimitedModel(model, semaphore)
            if backend.rate_limit_per_min and self.store is not None:
                model = RateLimitedModel(
                    model,
                    self.store,
                    bucket_subject(backend.name, backend.key, backend.base_url or ""),
                    per_minute=backend.rate_limit_per_min,
                    burst=backend.rate_limit_burst,
                    max_wait_s=backend.rate_limit_max_wait_s,
                )
        retry = backend.retry
        model = RetryModel(
            model,
            RetryPolicy(
                max_retries=retry.max_retries,
                base_s=retry.base_s,
                multiplier=retry.multiplier,
                cap_s=retry.cap_s,
                jitter_s=retry.jitter_s,
                max_retry_after_s=retry.max_retry_after_s,
            ),
        )
        return InstrumentedModel(HealthTrackedModel(model, self.health), self.tracer)

    def model(self, name: str) -> Model:
        """The composed model for a name or alias (without fallbacks)."""
        resolved = self.router.resolve(name)
        existing = self._models.get(resolved.name)
        if existing is None:
            existing = self._compose(resolved)
            self._models[resolved.name] = existing
        return existing

    # -- planning --------------------------------------------------------------------------------

    def allowed(self, resolved: ResolvedModel, patterns: tuple[str, ...], requested: str = "") -> bool:
        """Whether an API key with these model patterns may call `resolved` (by its name or the name asked)."""
        if not patterns:
            return True
        names = {resolved.name, requested} - {""}
        return any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns)

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
            if not self.allowed(chain[0], patterns, requested):
                raise PermissionDeniedError(
                    f"model:{chain[0].name}",
                    f"this API key may not use {echo(requested)} ({chain[0].name}); it may use {', '.join(patterns)}",
                )
            resolved = [r for r in chain if self.allowed(r, patterns)]
        if task_tag and not model:
            route[ATTR_ROUTE_TAG] = task_tag[:64]
        route[ATTR_ROUTE_MODEL] = resolved[0].name
        outputs = [output_limit(request, r, self.gateway) for r in resolved]
        reserve = max(reserve_usd(input_tokens, out, prices_of(r)) for r, out in zip(resolved, outputs, strict=True))
        route[ATTR_RESERVE_USD] = round(reserve, 9)
        models = [self.model(r.name) for r in resolved]
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
        price_route: Any,
        patterns: tuple[str, ...],
        input_tokens: int,
        route: dict[str, Any],
    ) -> list[ResolvedModel]:
        candidates = [r for r in self.router.candidates(price_route) if self.allowed(r, patterns)]
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
        fallbacks = [r for r in self.router.chain(chosen.name)[1:] if self.allowed(r, patterns)] or ranked[1:]
        route[ATTR_ROUTE_CHOICE] = price_route.choose
        route[ATTR_ROUTE_CANDIDATES] = [r.name for r in ranked]
        if skipped:
            route[ATTR_ROUTE_SKIPPED] = skipped
        return [chosen, *(r for r in fallbacks if r.name != chosen.name)]

    # -- generation ------------------------------------------------------------------------------

    def prices(self, name: str) -> Prices:
        resolved = self.router.resolve(name)
        listed = resolved.settings
        if listed is None:
            return Prices()
        return Prices(listed.input_price_per_mtok, listed.output_price_per_mtok)

    async def _account(self, response: ModelResponse, ctx: CallContext) -> Generation:
        cost = cost_usd(response.usage, self.prices(response.model))
        agent = ctx.agent_id or ANONYMOUS_AGENT
        if self.ledger is not None:
            # Summed in memory and written behind (usage.py): no Redis round trip on the reply's path.
            self.ledger.add(
                agent,
                response.model,
                response.usage,
                cost,
                response.latency_s,
                task_tag=str(ctx.route.get(ATTR_ROUTE_TAG, "")),
                api_key_id=ctx.key_id,
            )
        provider, _, model = response.model.partition("/")
        label = ctx.metric_agent if ctx.metric_agent is not None else agent
        self.metrics.model_usage(
            label, provider, model, response.usage.input_tokens, response.usage.output_tokens, cost
        )
        return Generation(response=response, cost_usd=cost, attempts=tuple(ctx.attempts))

    def _check_agent(self, ctx: CallContext) -> None:
        if self.ledger is not None:
            # Before the upstream call: a usage key this agent id cannot make must not fail a paid reply.
            self.ledger.store.keys.usage(ctx.agent_id or ANONYMOUS_AGENT, "2000-01-01")

    async def _admit(self, plan: Plan, ctx: CallContext) -> Reservation | None:
        """The call's reservation in its quota scopes (None when none applies); typed refusals."""
        if self.quotas is None:
            return None
        scopes = self.quotas.scopes(key_id=ctx.key_id, agent=ctx.agent_id or ANONYMOUS_AGENT, subject=ctx.subject)
        if not scopes:
            return None
        return await self.quotas.reserve(scopes, reserve_usd=plan.reserve_usd, tokens=plan.reserve_tokens)

    def _settle_later(self, work: Awaitable[None]) -> None:
        # Off the reply's path: the reservation holds until it lands, which only errs on the safe side.
        task = asyncio.ensure_future(work)
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    def _settle(self, reservation: Reservation | None, generation: Generation) -> None:
        if reservation is None or self.quotas is None:
            return
        usage = generation.response.usage
        tokens = usage.input_tokens + usage.output_tokens
        self._settle_later(self.quotas.settle(reservation, cost_usd=generation.cost_usd, tokens=tokens))

    def _unwind(self, reservation: Reservation | None, ctx: CallContext, plan: Plan, *, started: bool) -> None:
        """A call that failed: released when nothing went upstream; otherwise settled at no cost (an upstream
        error is not billed), or at its whole reserve when a reply was under way (it may be billed)."""
        if reservation is None or self.quotas is None:
            return
        quotas = self.quotas
        if not ctx.attempts and not started:
            self._settle_later(quotas.release(reservation))
        elif started:
            self._settle_later(quotas.settle(reservation, cost_usd=plan.reserve_usd, tokens=plan.reserve_tokens))
        else:
            self._settle_later(quotas.settle(reservation, cost_usd=0.0, tokens=0))

    async def generate(
        self, request: ModelRequest, ctx: CallContext, *, model: str = "", task_tag: str = ""
    ) -> Generation:
        """One complete reply; raises AgentmeshError (ctx.attempts lists what was tried)."""
        validate_request(request)
        self._check_agent(ctx)
        plan = self.plan(request, ctx, model=model, task_tag=task_tag)
        ctx.route = plan.route
        reservation = await self._admit(plan, ctx)
        try:
            response = await plan.chain.request(request, ctx)
        except BaseException as exc:
            self._unwind(reservation, ctx, plan, started=isinstance(exc, asyncio.CancelledError) and bool(ctx.attempts))
            raise
        generation = await self._account(response, ctx)
        self._settle(reservation, generation)
        return generation

    async def generate_stream(
        self, request: ModelRequest, ctx: CallContext, *, model: str = "", task_tag: str = ""
    ) -> AsyncIterator[StreamEvent | Generation]:
        """Deltas, then the Generation (instead of the StreamFinal)."""
        validate_request(request)
        self._check_agent(ctx)
        plan = self.plan(request, ctx, model=model, task_tag=task_tag)
        ctx.route = plan.route
        reservation = await self._admit(plan, ctx)
        started = False
        try:
            async for event in plan.chain.request_stream(request, ctx):
                if isinstance(event, StreamFinal):
                    generation = await self._account(event.response, ctx)
                    self._settle(reservation, generation)
                    reservation = None
                    yield generation
                    return
                started = True
                yield event
        except BaseException:
            self._unwind(reservation, ctx, plan, started=started)
            raise
        self._unwind(reservation, ctx, plan, started=started)
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
