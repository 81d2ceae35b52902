"""The metrics every service records, on the OpenTelemetry metrics API (docs/design.md §8).

`Metrics` holds one service's instruments and is what domain code records through: a typed method
per fact (a task reached a status, a tool call ended, a model call used tokens, a Redis command
took so long), so no caller builds attribute dictionaries and no label can carry an id. Labels are
bounded sets only: agent, model, provider, tool names from configuration, statuses, error classes
and codes, Redis operation names. Never a task, request, session, approval or call id.

`Metrics()` without a MeterProvider records nothing (unit tests, tools, the CLI). A service gets
its provider from `build_meter_provider`: a Prometheus reader on a registry of its own (served at
`/metrics` by the service's HTTP listener, agentmesh.rpc.http) and, when OTEL_METRICS_EXPORTER asks
for it, a periodic OTLP exporter handed in by the RPC edge. This module imports neither grpc nor
the stubs; the RPC metrics are recorded by the edge through `rpc_server_call` / `rpc_client_call`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.metrics import CallbackOptions, MeterProvider, NoOpMeterProvider, Observation

from agentmesh import __version__
from agentmesh.configfiles import ConfigError

if TYPE_CHECKING:
    # The SDK and prometheus_client are needed to build a provider, not to record: domain modules (and
    # tool_svc's CPU workers, which import them) do not pay for importing them.
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry

__all__ = [
    "METRICS_EXPORTER_ENV",
    "METRIC_NAMES",
    "MeterSetup",
    "Metrics",
    "MetricsExporters",
    "build_meter_provider",
    "metrics_exporters",
]

METRICS_EXPORTER_ENV = "OTEL_METRICS_EXPORTER"
OTLP_METRICS_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
EXEMPLAR_FILTER_ENV = "OTEL_METRICS_EXEMPLAR_FILTER"

# Histogram boundaries in seconds (the SDK's defaults are for milliseconds).
_CALL_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_REDIS_BUCKETS_S: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

METRIC_NAMES: Final = {
    "rpc.server.call.duration": "rpc_server_call_duration_seconds",
    "rpc.client.call.duration": "rpc_client_call_duration_seconds",
    "agentmesh.tasks": "agentmesh_tasks_total",
    "agentmesh.task.steps": "agentmesh_task_steps_total",
    "agentmesh.task.outage_waits": "agentmesh_task_outage_waits_total",
    "agentmesh.tasks.running": "agentmesh_tasks_running",
    "agentmesh.queue.depth": "agentmesh_queue_depth",
    "agentmesh.queue.lag": "agentmesh_queue_lag_seconds",
    "agentmesh.tool.calls": "agentmesh_tool_calls_total",
    "agentmesh.tool.call.duration": "agentmesh_tool_call_duration_seconds",
    "agentmesh.tool.breakers": "agentmesh_tool_breakers",
    "agentmesh.gen_ai.tokens": "agentmesh_gen_ai_tokens_total",
    "agentmesh.gen_ai.cost": "agentmesh_gen_ai_cost_total",
    "agentmesh.gen_ai.budget.spent": "agentmesh_gen_ai_budget_spent",
    "agentmesh.gen_ai.budget.limit": "agentmesh_gen_ai_budget_limit",
    "agentmesh.gen_ai.budget.alerts": "agentmesh_gen_ai_budget_alerts_total",
    "agentmesh.gen_ai.quota.refusals": "agentmesh_gen_ai_quota_refusals_total",
    "db.client.operation.duration": "db_client_operation_duration_seconds",
}
"""Every instrument (OTel name) and the family it becomes on the Prometheus endpoint; docs/design.md §8
and the Grafana dashboard (deploy/grafana/agentmesh.json) use the right-hand names."""

BreakerStates = Callable[[], Iterable[tuple[str, str, int]]]
"""Returns (tool, state, number of breakers) for every tool and state with breakers (tool_svc)."""
BudgetStates = Callable[[], Iterable[tuple[str, str, str, float, float]]]
"""Returns (scope kind, scope, period, spent USD, budget USD) for every budget a replica has seen (provider_svc)."""


class Metrics:
    """One service's instruments; the methods below are the only way anything is recorded."""

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        self.enabled = meter_provider is not None
        meter = (meter_provider or NoOpMeterProvider()).get_meter("agentmesh", __version__)
        self._rpc_server = meter.create_histogram(
            "rpc.server.call.duration",
            unit="s",
            description="Incoming RPCs: rate (count), errors (rpc.grpc.status_code) and duration per method.",
            explicit_bucket_boundaries_advisory=_CALL_BUCKETS_S,
        )
        self._rpc_client = meter.create_histogram(
            "rpc.client.call.duration",
            unit="s",
            description="Outgoing RPCs to the other agentmesh services, per method and status code.",
            explicit_bucket_boundaries_advisory=_CALL_BUCKETS_S,
        )
        self._tasks = meter.create_counter(
            "agentmesh.tasks", unit="{task}", description="Tasks that entered a status, by agent and status."
        )
        self._steps = meter.create_counter(
            "agentmesh.task.steps", unit="{step}", description="Agent steps started, by agent."
        )
        self._outage_waits = meter.create_counter(
            "agentmesh.task.outage_waits",
            unit="{wait}",
            description="Waits of a task's run for a service that was down (UNAVAILABLE, ...), by service.",
        )
        self._running = meter.create_gauge(
            "agentmesh.tasks.running", unit="{task}", description="Task runs in progress on this replica."
        )
        self._queue_depth = meter.create_gauge(
            "agentmesh.queue.depth",
            unit="{task}",
            description="Entries of the task queue: waiting (not yet read by any replica) or claimed (being run).",
        )
        self._queue_lag = meter.create_gauge(
            "agentmesh.queue.lag", unit="s", description="Age of the oldest task waiting in the queue (0 when none)."
        )
        self._tool_calls = meter.create_counter(
            "agentmesh.tool.calls",
            unit="{call}",
            description="Tool calls executed, by tool and outcome (output, error, pending_approval), with the "
            "error's class and code.",
        )
        self._tool_duration = meter.create_histogram(
            "agentmesh.tool.call.duration",
            unit="s",
            description="Duration of tool calls through the gateway, by tool and outcome.",
            explicit_bucket_boundaries_advisory=_CALL_BUCKETS_S,
        )
        self._tokens = meter.create_counter(
            "agentmesh.gen_ai.tokens",
            unit="{token}",
            description="Model tokens billed, by agent, provider, model and type (input, output).",
        )
        self._cost = meter.create_counter(
            "agentmesh.gen_ai.cost", unit="{USD}", description="Model cost in USD, by agent, provider and model."
        )
        self._budget_alerts = meter.create_counter(
            "agentmesh.gen_ai.budget.alerts",
            unit="{alert}",
            description="Spend alerts fired (once per scope, budget period and threshold), by scope kind, period "
            "and threshold percent.",
        )
        self._quota_refusals = meter.create_counter(
            "agentmesh.gen_ai.quota.refusals",
            unit="{call}",
            description="Model calls refused before the upstream by a quota or budget, by scope kind and limit "
            "(rpm, tpm, budget_day, budget_month, revoked, expired).",
        )
        self._redis = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Redis operations (one command, script or pipeline), by operation; error.type on failure.",
            explicit_bucket_boundaries_advisory=_REDIS_BUCKETS_S,
        )
        self._meter = meter

    # --- the RPC edge ------------------------------------------------------------------------------

    def rpc_server_call(
        self, service: str, method: str, status_code: int, duration_s: float, *, system: str = "grpc"
    ) -> None:
        """One incoming call of `service`/`method` (from the contracts: a bounded set) answered `status_code`;
        `system` is `grpc` on the gRPC port, `connect_rpc` on the HTTP listener."""
        self._rpc_server.record(
            duration_s,
            {"rpc.system": system, "rpc.service": service, "rpc.method": method, "rpc.grpc.status_code": status_code},
        )

    def rpc_client_call(self, service: str, method: str, status_code: int, duration_s: float) -> None:
        """One outgoing call to another agentmesh service."""
        self._rpc_client.record(
            duration_s,
            {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method, "rpc.grpc.status_code": status_code},
        )

    # --- dispatcher_svc ---------------------------------------------------------------------------

    def task_status(self, agent: str, status: str) -> None:
        """A task entered `status` (PENDING when created or resumed, RUNNING, SUCCEEDED, ...)."""
        self._tasks.add(1, {"agent": agent, "status": status})

    def task_step(self, agent: str) -> None:
        """A task of `agent` started a step."""
        self._steps.add(1, {"agent": agent})

    def outage_wait(self, service: str) -> None:
        """A run waits before sending a call again to `service` (context_svc, tool_svc, provider_svc), down."""
        self._outage_waits.add(1, {"service": service})

    def tasks_running(self, count: int) -> None:
        self._running.set(count)

    def task_queue(self, waiting: int, claimed: int, oldest_waiting_s: float) -> None:
        """The shared task queue as one replica sampled it (every replica reports the same queue)."""
        self._queue_depth.set(waiting, {"state": "waiting"})
        self._queue_depth.set(claimed, {"state": "claimed"})
        self._queue_lag.set(oldest_waiting_s)

    # --- tool_svc ---------------------------------------------------------------------------------

    def tool_call(self, tool: str, outcome: str, error_class: str, error_code: str, duration_s: float) -> None:
        """A tool call ended with `outcome` (output, error, pending_approval); `tool` is a registered name or
        "(unknown)"; the error's class and code are "" unless it failed."""
        attributes = {"tool": tool, "outcome": outcome}
        if error_code:
            attributes |= {"error_class": error_class, "error_code": error_code}
        self._tool_calls.add(1, attributes)
        self._tool_duration.record(duration_s, {"tool": tool, "outcome": outcome})

    def observe_breakers(self, states: BreakerStates) -> None:
        """Reports the circuit breakers per tool and state whenever metrics are collected."""

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(count, {"tool": tool, "state": state}) for tool, state, count in states()]

        self._meter.create_observable_gauge(
            "agentmesh.tool.breakers",
            callbacks=[observe],
            unit="{breaker}",
            description="Circuit breakers of this replica (one per agent and tool) by tool and state.",
        )

    # --- provider_svc -----------------------------------------------------------------------------

    def model_usage(
        self, agent: str, provider: str, model: str, input_tokens: int, output_tokens: int, cost_usd: float
    ) -> None:
        """One model call's tokens and cost, billed to `agent`."""
        attributes = {"agent": agent, "provider": provider, "model": model}
        self._tokens.add(input_tokens, attributes | {"type": "input"})
        self._tokens.add(output_tokens, attributes | {"type": "output"})
        self._cost.add(cost_usd, attributes)

    def budget_alert(self, scope_kind: str, period: str, threshold: int, count: int = 1) -> None:
        """A spend alert fired: `threshold` percent of a `period` (day, month) budget of a `scope_kind`
        (`count` 0 creates the series at zero, so a rate over it means something before the first alert)."""
        self._budget_alerts.add(count, {"scope_kind": scope_kind, "period": period, "threshold": str(threshold)})

    def quota_refused(self, scope_kind: str, limit: str, count: int = 1) -> None:
        """A model call refused before the upstream by `limit` of a `scope_kind` (key, agent, tenant)."""
        self._quota_refusals.add(count, {"scope_kind": scope_kind, "limit": limit})

    def observe_budgets(self, states: BudgetStates) -> None:
        """Reports spend against budget per scope and period whenever metrics are collected. Scopes are
        operators' names (configured agents and tenants, API key names): a bounded set."""

        def spent(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(value, {"scope_kind": kind, "scope": scope, "period": period})
                for kind, scope, period, value, _ in states()
            ]

        def limit(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(value, {"scope_kind": kind, "scope": scope, "period": period})
                for kind, scope, period, _, value in states()
            ]

        self._meter.create_observable_gauge(
            "agentmesh.gen_ai.budget.spent",
            callbacks=[spent],
            unit="{USD}",
            description="Spend of the current day or month of each budgeted scope, as this replica last settled it.",
        )
        self._meter.create_observable_gauge(
            "agentmesh.gen_ai.budget.limit",
            callbacks=[limit],
            unit="{USD}",
            description="The budget of each budgeted scope and period.",
        )

    # --- the store --------------------------------------------------------------------------------

    def redis_operation(self, operation: str, duration_s: float, error_type: str = "") -> None:
        """One guarded Redis operation (`Store.guard`'s name for it: a fixed string per call site)."""
        attributes = {"db.system.name": "redis", "db.operation.name": operation}
        if error_type:
            attributes["error.type"] = error_type
        self._redis.record(duration_s, attributes)


# --- set-up ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricsExporters:
    """Where metrics go, from OTEL_METRICS_EXPORTER (`prometheus`, `otlp`, `console`, `none`, comma-separated).

    Unset: the Prometheus endpoint, and OTLP too when OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set. The
    generic OTEL_EXPORTER_OTLP_ENDPOINT alone does not send metrics: it often points at a trace-only
    backend (Jaeger), which would refuse them.
    """

    prometheus: bool
    otlp: bool
    console: bool

    @property
    def any(self) -> bool:
        return self.prometheus or self.otlp or self.console


_KNOWN_EXPORTERS = frozenset({"prometheus", "otlp", "console", "none"})


def metrics_exporters() -> MetricsExporters:
    """The metric exporters the environment asks for; ConfigError naming the variable for an unknown one."""
    raw = os.environ.get(METRICS_EXPORTER_ENV, "").strip()
    if not raw:
        return MetricsExporters(prometheus=True, otlp=bool(os.environ.get(OTLP_METRICS_ENDPOINT_ENV)), console=False)
    names = {part.strip().lower() for part in raw.split(",") if part.strip()}
    unknown = names - _KNOWN_EXPORTERS
    if unknown:
        raise ConfigError(
            f"{METRICS_EXPORTER_ENV}={raw!r}: unknown exporter {sorted(unknown)}; use prometheus, otlp, console or none"
        )
    return MetricsExporters(prometheus="prometheus" in names, otlp="otlp" in names, console="console" in names)


@dataclass
class MeterSetup:
    """A service's MeterProvider and the registry its `/metrics` endpoint serves (None: no endpoint)."""

    provider: SdkMeterProvider | None
    registry: CollectorRegistry | None
    metrics: Metrics

    def shutdown(self) -> None:
        """Flushes (a last OTLP export) and stops every reader. Idempotent."""
        provider, self.provider = self.provider, None
        if provider is not None:
            provider.shutdown()


def build_meter_provider(
    resource: Resource,
    *,
    enabled: bool,
    otlp_exporter: Callable[[], MetricExporter] | None,
) -> MeterSetup:
    """The MeterProvider of one service with the readers the environment asks for (`metrics_exporters`).

    `enabled` is `telemetry.metrics`; with it off, or OTEL_METRICS_EXPORTER=none, nothing is recorded.
    The OTLP exporter (gRPC or HTTP/protobuf, by OTEL_EXPORTER_OTLP_METRICS_PROTOCOL) comes from the edge.
    """
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from prometheus_client import CollectorRegistry

    wanted = metrics_exporters()
    if not enabled or not wanted.any:
        return MeterSetup(None, None, Metrics())
    readers: list[MetricReader] = []
    registry: CollectorRegistry | None = None
    if wanted.prometheus:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        # A registry per service, not prometheus_client's global one: tests run several services in one
        # process, and each endpoint must serve its own service only. service.name becomes a label so a
        # dashboard can split by service whatever the scrape job is called.
        registry = CollectorRegistry(auto_describe=True)
        readers.append(
            PrometheusMetricReader(
                scope_info_enabled=False,
                resource_attribute_filter=lambda key: key == "service.name",
                registry=registry,
            )
        )
    if wanted.otlp:
        if otlp_exporter is None:
            raise ConfigError(f"{METRICS_EXPORTER_ENV} asks for otlp but this process has no OTLP metric exporter")
        # The interval follows OTEL_METRIC_EXPORT_INTERVAL (the SDK reads it).
        readers.append(PeriodicExportingMetricReader(otlp_exporter()))
    if wanted.console:
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    # No exemplars unless OTEL_METRICS_EXEMPLAR_FILTER asks for them (the SDK's default, trace_based,
    # offers every measurement of a sampled span to a reservoir): half the cost of a histogram record,
    # paid by every RPC and Redis operation, for data the Prometheus endpoint never shows (issue 45).
    exemplars: dict[str, Any] = {}
    if not os.environ.get(EXEMPLAR_FILTER_ENV):
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter

        exemplars["exemplar_filter"] = AlwaysOffExemplarFilter()
    provider = SdkMeterProvider(resource=resource, metric_readers=readers, **exemplars)
    return MeterSetup(provider, registry, Metrics(provider))
