"""Each configured model built once as its composed chain (docs/design.md §6), and the HTTP clients.

Per model the chain is, outermost first:

    InstrumentedModel(HealthTrackedModel(RetryModel(RateLimitedModel(ConcurrencyLimitedModel(<adapter>)))))

so each model tried gets one GenAI span, retries are per model, every retry takes a rate-limit token, and
a concurrency slot is held only during an upstream call (`Planner` puts a fallback chain's models in a
`FallbackModel`). The adapter is the backend type's: `ScriptedModel` (its policy or scenario and its fault
settings), `AnthropicModel`, `OpenAIModel`; a backend whose API key is not set is built as
`UnavailableModel` (PROVIDER_AUTH_FAILED, so a fallback chain moves on). One `HttpBackend` per backend is
shared by its models (and by the Embed path's remote adapters).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from opentelemetry import trace

from agentmesh.config import ConfigError, ProviderBackendSettings, ProvidersSettings
from agentmesh.errors import AgentmeshError, ErrorCode
from agentmesh.store import Store
from provider_svc.health import HealthTrackedModel, ModelHealth
from provider_svc.models._http import HttpBackend, HttpTimeouts
from provider_svc.models.anthropic import AnthropicModel
from provider_svc.models.base import CallContext, Model, ModelRequest, ModelResponse, ProviderInfo, StreamEvent
from provider_svc.models.concurrency import ConcurrencyLimitedModel
from provider_svc.models.instrumented import InstrumentedModel
from provider_svc.models.openai import OpenAIModel
from provider_svc.models.rate_limited import RateLimitedModel, bucket_subject
from provider_svc.models.retry import RetryModel, RetryPolicy
from provider_svc.routing import ResolvedModel, Router
from provider_svc.testing.scripted import FaultConfig, GenericPolicy, Policy, ScriptedModel, load_policy, load_scenario

__all__ = ["DEFAULT_BASE_URLS", "ModelFactory", "UnavailableModel", "retry_policy", "unavailable_reason"]

log = logging.getLogger("provider_svc")

DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}


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


class ModelFactory:
    """The composed model of every configured name, built on first use and kept; the backends' clients."""

    def __init__(
        self,
        settings: ProvidersSettings,
        router: Router,
        health: ModelHealth,
        *,
        store: Store | None = None,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.settings = settings
        self.router = router
        self.health = health
        self.store = store
        self.tracer = tracer
        self.http: dict[str, HttpBackend] = {}
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._models: dict[str, Model] = {}
        for backend in settings.backends:
            if backend.rate_limit_per_min and store is None and backend.type != "scripted":
                log.warning("backend %s: no store, so no rate limit", backend.name)
            for model in backend.models:
                # Built now: a bad policy, scenario or URL fails at start-up, not on the first call.
                self.model(f"{backend.name}/{model.name}")

    async def aclose(self) -> None:
        for backend in self.http.values():
            await backend.aclose()
        self.http.clear()

    def model(self, name: str) -> Model:
        """The composed model for a name or alias (without fallbacks)."""
        resolved = self.router.resolve(name)
        existing = self._models.get(resolved.name)
        if existing is None:
            existing = self._compose(resolved)
            self._models[resolved.name] = existing
        return existing

    def http_backend(self, backend: ProviderBackendSettings) -> HttpBackend:
        """The backend's one HTTP client (its base URL, auth headers, timeouts and connection pool)."""
        existing = self.http.get(backend.name)
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
        self.http[backend.name] = created
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
        http = self.http_backend(backend)
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
        model = RetryModel(model, retry_policy(backend))
        return InstrumentedModel(HealthTrackedModel(model, self.health), self.tracer)


def retry_policy(backend: ProviderBackendSettings) -> RetryPolicy:
    """The backend's `retry:` section as the policy its models (and its Embed calls) retry by."""
    retry = backend.retry
    return RetryPolicy(
        max_retries=retry.max_retries,
        base_s=retry.base_s,
        multiplier=retry.multiplier,
        cap_s=retry.cap_s,
        jitter_s=retry.jitter_s,
        max_retry_after_s=retry.max_retry_after_s,
    )
