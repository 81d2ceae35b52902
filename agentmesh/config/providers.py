"""The `providers:` section: model backends, their models, timeouts, retries and price routes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from agentmesh.config.base import _Section
from agentmesh.config.faults import FaultConfig

_BACKEND_NAME = r"^[a-z][a-z0-9_-]{0,31}$"


class ProviderModelSettings(_Section):
    """A model a backend offers: its aliases, prices and (scripted) policy."""

    name: str = Field(min_length=1)
    """The upstream model id, e.g. `gpt-4o-mini`; the model is addressed as `<backend>/<name>`."""
    aliases: list[str] = []
    input_price_per_mtok: float = Field(0.0, ge=0)
    """USD per million prompt tokens."""
    output_price_per_mtok: float = Field(0.0, ge=0)
    """USD per million completion tokens."""
    tags: list[str] = []
    """What the model is good enough for (`summarize`, `intent`, ...): a `choose: cheapest` route picks the
    cheapest healthy model carrying every tag it names."""
    max_tokens: int | None = Field(None, gt=0)
    """Completion limit sent when the request sets none (Anthropic requires one); default: the backend's."""
    policy: str | None = None
    """scripted: a policy callable, `package.module:attr` (called with `policy_args` when given)."""
    policy_args: dict[str, Any] = {}
    scenario: str | None = None
    """scripted: a scenario YAML (relative: working directory, then provider_svc/scenarios/)."""
    faults: FaultConfig | None = None
    """scripted: fault injection (overrides the scenario's `faults`); the schema is the scripted model's
    (`agentmesh.config.faults`)."""
    latency_ms: float = Field(0.0, ge=0)
    """scripted: simulated latency per reply."""

    @model_validator(mode="after")
    def _one_brain(self) -> ProviderModelSettings:
        if self.policy and self.scenario:
            raise ValueError(f"model {self.name}: set policy or scenario, not both")
        return self


class ProviderTimeoutSettings(_Section):
    """Upstream HTTP timeouts (docs/design.md §6); always capped by the caller's deadline."""

    connect_s: float = Field(5.0, gt=0)
    read_s: float = Field(60.0, gt=0)
    total_s: float = Field(120.0, gt=0)


class ProviderRetrySettings(_Section):
    """Retries of network errors, 5xx/529 and 429 (never other 4xx); the only retry layer."""

    max_retries: int = Field(3, ge=0, le=10)
    base_s: float = Field(1.0, ge=0)
    multiplier: float = Field(2.0, ge=1)
    cap_s: float = Field(8.0, ge=0)
    jitter_s: float = Field(0.5, ge=0)
    """Up to this much random delay is added to each backoff."""
    max_retry_after_s: float = Field(60.0, ge=0)
    """A Retry-After longer than this is not waited for: the 429 is returned at once."""


class ProviderBackendSettings(_Section):
    """One upstream provider endpoint (an OpenAI-compatible server, Anthropic, or the scripted model)."""

    name: str = Field(pattern=_BACKEND_NAME)
    type: Literal["openai", "anthropic", "scripted"]
    base_url: str | None = None
    """Default: https://api.openai.com/v1 or https://api.anthropic.com; unused by scripted."""
    api_key: SecretStr | None = None
    """Write `${OPENAI_API_KEY:-}`: an unset variable leaves the backend listed as unavailable."""
    require_api_key: bool = True
    """False for local OpenAI-compatible servers (vLLM, Ollama, llama.cpp) that need no key."""
    default_model: str | None = None
    """`<backend>` alone resolves to this model; default: the first listed model."""
    models: list[ProviderModelSettings] = []
    allow_unlisted_models: bool = True
    """Whether `<backend>/<any-name>` works for models not listed (priced at 0)."""
    max_tokens: int = Field(1024, gt=0)
    """Completion limit sent to Anthropic when neither the request nor the model sets one."""
    timeouts: ProviderTimeoutSettings = ProviderTimeoutSettings()
    retry: ProviderRetrySettings = ProviderRetrySettings()
    concurrency: int = Field(8, gt=0)
    """In-flight upstream calls per backend and replica (a semaphore)."""
    rate_limit_per_min: float | None = Field(60.0, ge=0)
    """Requests per minute per API key across replicas (Redis token bucket); 0 or null: unlimited."""
    rate_limit_burst: int | None = Field(None, gt=0)
    """Bucket capacity; default: one minute's worth."""
    rate_limit_max_wait_s: float = Field(10.0, ge=0)
    """How long a call may wait for a token before it fails RATE_LIMITED (capped by the deadline)."""
    unsupported_params: Literal["drop", "reject"] | None = None
    """What to do with a sampling parameter the backend cannot take; default: providers.unsupported_params."""
    anthropic_version: str = "2023-06-01"
    extra_params: list[Literal["temperature", "top_p"]] = []
    """Opt-in sampling parameters the protocol's current API lacks but this endpoint takes (the
    Anthropic Messages API as the pinned SDK types it has no temperature/top_p; an Anthropic-compatible
    server that still takes them lists them here, temperature then mapped into 0-1)."""
    structured_output: Literal["native", "tool"] = "native"
    """anthropic: how a response schema is asked for. `native`: `output_config.format` (structured
    outputs); `tool`: a forced final tool `final_answer` whose input schema is the response schema (for
    endpoints without structured outputs), its input returned as the reply's text (issue 41)."""
    headers: dict[str, str] = {}
    """Extra static request headers (e.g. OpenAI-Organization); treated as secrets, never logged."""

    @property
    def key(self) -> str:
        """The API key, or "" when unset."""
        return self.api_key.get_secret_value() if self.api_key is not None else ""

    @property
    def available(self) -> bool:
        """Whether the backend can be called: scripted always, others once their key is set."""
        return self.type == "scripted" or bool(self.key) or (self.type == "openai" and not self.require_api_key)

    def model_settings(self, model: str) -> ProviderModelSettings | None:
        return next((m for m in self.models if m.name == model), None)


def _default_backends() -> list[ProviderBackendSettings]:
    return [
        ProviderBackendSettings(
            name="scripted", type="scripted", rate_limit_per_min=None, models=[ProviderModelSettings(name="default")]
        )
    ]


class PriceRouteSettings(_Section):
    """A task tag routed by price (`routing.<tag>: {choose: cheapest, tags: [...]}`, docs/design.md §6):
    the cheapest model for the request (its estimated input and reserved output at each model's prices)
    among those that carry every tag in `tags` (or are listed in `models`), are available, healthy (their
    breaker closed, not rate-limited upstream) and allowed to the caller's API key."""

    choose: Literal["cheapest"]
    tags: list[str] = []
    """Tags a candidate must carry (all of them)."""
    models: list[str] = []
    """Candidates by name or alias instead of (or besides) tags."""

    @model_validator(mode="after")
    def _has_candidates(self) -> PriceRouteSettings:
        if not self.tags and not self.models:
            raise ValueError("a choose: cheapest route needs tags or models")
        return self

    def describe(self) -> str:
        """How ListModels shows the route."""
        parts = [f"tags [{', '.join(self.tags)}]"] if self.tags else []
        parts += [f"models [{', '.join(self.models)}]"] if self.models else []
        return f"cheapest of {' and '.join(parts)}"


class ProvidersSettings(_Section):
    """provider_svc (docs/design.md §6): backends, model aliases, task-tag routing, fallback chains.

    Models are named `<backend>/<model>` or by an alias. Targets of aliases, routes and fallbacks are
    checked at start-up, so a typo fails loudly instead of on the first call.
    """

    default_model: str = "scripted/default"
    """Used when a request names no model and its task tag has no route."""
    backends: list[ProviderBackendSettings] = Field(default_factory=_default_backends)
    aliases: dict[str, str] = {}
    """alias -> `<backend>/<model>` (models can also list their own `aliases`)."""
    routing: dict[str, str | PriceRouteSettings] = {}
    """task tag (`code`, `summarize`, `intent`, ...) -> model or alias, or a price route
    (`{choose: cheapest, tags: [summarize]}`)."""
    fallbacks: dict[str, list[str]] = {}
    """model or alias -> models tried in order after an ENGINEERING failure of the first."""
    unsupported_params: Literal["drop", "reject"] = "drop"
    """A sampling parameter a backend cannot take: dropped with a warning, or rejected INVALID_REQUEST."""
    usage_ttl_days: int = Field(400, gt=0)
    """Usage records expire after this many days."""
    request_cache_entries: int = Field(8192, ge=1)
    """Bound of the cache of masked request strings (GenerateRequest.include_request): distinct strings."""
    request_cache_chars: int = Field(8_000_000, ge=1)
    """... and characters held by it (keys and masked values)."""

    def backend(self, name: str) -> ProviderBackendSettings | None:
        return next((b for b in self.backends if b.name == name), None)

    def all_aliases(self) -> dict[str, str]:
        """Every alias (section-level and per-model) -> `<backend>/<model>`."""
        found = dict(self.aliases)
        for backend in self.backends:
            for model in backend.models:
                for alias in model.aliases:
                    found[alias] = f"{backend.name}/{model.name}"
        return found

    @model_validator(mode="after")
    def _consistent(self) -> ProvidersSettings:
        names = [b.name for b in self.backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"backends: duplicate names {duplicates}")
        seen: dict[str, str] = {}
        for alias, target in [
            *self.aliases.items(),
            *((a, f"{b.name}/{m.name}") for b in self.backends for m in b.models for a in m.aliases),
        ]:
            if "/" in alias or not alias:
                raise ValueError(f"alias {alias!r}: must be non-empty and contain no '/'")
            if alias in names:
                raise ValueError(f"alias {alias!r}: clashes with a backend name")
            if seen.get(alias, target) != target:
                raise ValueError(f"alias {alias!r}: defined twice ({seen[alias]} and {target})")
            seen[alias] = target
        for where, target in [
            ("default_model", self.default_model),
            *((f"aliases.{a}", t) for a, t in self.aliases.items()),
            *((f"routing.{tag}", t) for tag, t in self.routing.items() if isinstance(t, str)),
            *(
                (f"routing.{tag}.models", m)
                for tag, t in self.routing.items()
                if not isinstance(t, str)
                for m in t.models
            ),
            *((f"fallbacks.{m}", m) for m in self.fallbacks),
            *((f"fallbacks.{m}", t) for m, chain in self.fallbacks.items() for t in chain),
        ]:
            self._check_target(where, target, seen)
        for tag, route in self.routing.items():
            if isinstance(route, str) or not route.tags:
                continue
            if not any(set(route.tags) <= set(m.tags) for b in self.backends for m in b.models):
                raise ValueError(f"routing.{tag}: no model carries every tag of {route.tags}")
        return self

    def _check_target(self, where: str, target: str, aliases: Mapping[str, str]) -> None:
        name = aliases.get(target, target)
        backend_name, sep, model = name.partition("/")
        backend = self.backend(backend_name)
        if backend is None:
            known = sorted([*aliases, *(b.name for b in self.backends)])
            raise ValueError(f"{where}: {target!r} names no backend or alias (known: {known})")
        if not sep and not (backend.default_model or backend.models):
            raise ValueError(f"{where}: {target!r}: backend {backend_name} has no default model")
        if sep and not backend.allow_unlisted_models and backend.model_settings(model) is None:
            raise ValueError(f"{where}: {target!r}: backend {backend_name} lists no model {model!r}")
