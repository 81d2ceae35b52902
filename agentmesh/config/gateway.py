"""The `gateway:` section: quotas, spend alerts and model health."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, model_validator

from agentmesh.config.base import MiB, _Section


class QuotaLimits(_Section):
    """Quotas and spend budgets of one scope (an API key, an agent, a tenant); None: no limit.

    Enforced by provider_svc before the upstream call, atomically across replicas (docs/design.md §6):
    requests and tokens per minute (a sliding 60 s window), USD per UTC day and per UTC month."""

    rpm: int | None = Field(None, ge=0)
    """Requests per minute."""
    tpm: int | None = Field(None, ge=0)
    """Tokens (input + output) per minute; a request is counted at its reserve until its reply settles it."""
    budget_usd_day: float | None = Field(None, ge=0)
    budget_usd_month: float | None = Field(None, ge=0)

    def any(self) -> bool:
        """Whether any limit is set."""
        return any(v is not None for v in (self.rpm, self.tpm, self.budget_usd_day, self.budget_usd_month))


class SpendAlertSettings(_Section):
    """Spend alerts: each threshold (percent of a budget) fires once per scope, budget and period: an audit
    entry `budget.alert`, the metric `agentmesh_gen_ai_budget_alerts_total` and, when set, a webhook POST."""

    thresholds: list[int] = [50, 80, 100]
    webhook_url: str = ""
    """POSTed a JSON alert; must match `tools.http_allowlist` (the list every outgoing request obeys)."""
    webhook_timeout_s: float = Field(5.0, gt=0, le=60)

    @model_validator(mode="after")
    def _thresholds(self) -> SpendAlertSettings:
        if any(not 0 < t <= 1000 for t in self.thresholds):
            raise ValueError("alerts.thresholds: each must be a percent in 1..1000")
        if self.webhook_url and urlsplit(self.webhook_url).scheme not in ("http", "https"):
            raise ValueError("alerts.webhook_url: must be an http(s) URL")
        return self


class ModelHealthSettings(_Section):
    """When a model counts as unhealthy for price routing: its breaker (per replica) opens after
    `failure_threshold` consecutive upstream failures (unavailable, timeout) for `open_s`; a 429 marks it
    out of quota until its Retry-After (at least `rate_limited_s`)."""

    failure_threshold: int = Field(3, ge=1)
    open_s: float = Field(30.0, gt=0)
    rate_limited_s: float = Field(5.0, ge=0)


class GatewaySettings(_Section):
    """provider_svc as a model gateway (docs/design.md §6): the OpenAI- and Anthropic-compatible
    endpoints, API keys' quotas and budgets, per-agent and per-tenant limits, spend alerts."""

    compat_endpoints: bool = True
    """`POST /v1/chat/completions`, `GET /v1/models`, `POST /v1/messages` on provider_svc's HTTP listener."""
    max_request_bytes: int = Field(4 * MiB, ge=1024)
    """A compatible endpoint's request body beyond this is refused (413) before it is parsed."""
    reserve_output_tokens: int = Field(4096, gt=0)
    """Output tokens reserved for a request that sets no max_tokens (when its model configures none)."""
    reservation_ttl_s: int = Field(900, ge=10)
    """A reservation a replica never settled (it died) stops counting after this long."""
    key_defaults: QuotaLimits = QuotaLimits(rpm=60)
    """Limits of an API key that sets none of its own (seed 001: 60 requests per minute)."""
    agents: dict[str, QuotaLimits] = {}
    """Per agent (the billed agent of every model call: tasks, tokens and keys alike)."""
    agent_defaults: QuotaLimits = QuotaLimits()
    """Limits of an agent not listed in `agents`."""
    tenants: dict[str, QuotaLimits] = {}
    """Per tenant: the caller's subject up to `tenant_separator` (`acme:alice` is tenant `acme`)."""
    tenant_separator: str = Field(":", min_length=1, max_length=4)
    alerts: SpendAlertSettings = SpendAlertSettings()
    health: ModelHealthSettings = ModelHealthSettings()
