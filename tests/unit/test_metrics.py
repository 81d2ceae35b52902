"""agentmesh.metrics: what each method records (bounded labels only), the Prometheus names the dashboard
and docs use, the exporters the OTEL_* variables choose, and the Store's Redis latency."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import redis.exceptions as rexc
from opentelemetry.sdk.resources import Resource
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentmesh.config import ConfigError, RedisSettings
from agentmesh.dev.localredis import LocalRedis
from agentmesh.errors import UnavailableError
from agentmesh.metrics import METRIC_NAMES, Metrics, MetricsExporters, build_meter_provider, metrics_exporters
from agentmesh.store import Store
from tests.metricsutil import Recorded, recorded_metrics


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def record_everything(metrics: Metrics) -> None:
    metrics.rpc_server_call("agentmesh.v1.ToolService", "ExecuteTool", 0, 0.004)
    metrics.rpc_client_call("agentmesh.v1.ToolService", "ExecuteTool", 14, 0.2)
    metrics.task_status("ops", "SUCCEEDED")
    metrics.task_step("ops")
    metrics.outage_wait("context_svc")
    metrics.tasks_running(3)
    metrics.task_queue(waiting=5, claimed=2, oldest_waiting_s=1.5)
    metrics.tool_call("calculator", "output", "", "", 0.01)
    metrics.tool_call("get_deployment", "error", "ENGINEERING", "UPSTREAM_NOT_FOUND", 0.02)
    metrics.observe_breakers(lambda: [("get_deployment", "open", 2), ("calculator", "closed", 1)])
    metrics.model_usage("ops", "scripted", "default", 120, 30, 0.0015)
    metrics.budget_alert("agent", "day", 80)
    metrics.quota_refused("key", "rpm")
    metrics.observe_budgets(lambda: [("agent", "ops", "day", 0.8, 1.0)])
    metrics.redis_operation("commit task", 0.0007)
    metrics.redis_operation("commit task", 2.0, "unavailable")


def test_each_fact_is_recorded_with_bounded_labels() -> None:
    got = recorded_metrics()
    record_everything(got.metrics)
    assert got.metrics.enabled
    server = got.points("rpc.server.call.duration")
    assert [a for a, _ in server] == [
        {"rpc.system": "grpc", "rpc.service": "agentmesh.v1.ToolService", "rpc.method": "ExecuteTool",
         "rpc.grpc.status_code": 0}
    ]  # fmt: skip
    assert got.value("rpc.client.call.duration", **{"rpc.grpc.status_code": 14}) == 1
    assert got.value("agentmesh.tasks", agent="ops", status="SUCCEEDED") == 1
    assert got.value("agentmesh.task.steps", agent="ops") == 1
    assert [a for a, _ in got.points("agentmesh.task.outage_waits")] == [{"service": "context_svc"}]
    assert got.value("agentmesh.tasks.running") == 3
    assert got.value("agentmesh.queue.depth", state="waiting") == 5
    assert got.value("agentmesh.queue.depth", state="claimed") == 2
    assert got.value("agentmesh.queue.lag") == 1.5
    # An output carries no error labels; an error carries its class and code.
    assert [a for a, _ in got.points("agentmesh.tool.calls") if a["tool"] == "calculator"] == [
        {"tool": "calculator", "outcome": "output"}
    ]
    assert got.value("agentmesh.tool.calls", error_class="ENGINEERING", error_code="UPSTREAM_NOT_FOUND") == 1
    assert got.value("agentmesh.tool.call.duration", tool="get_deployment", outcome="error") == 1
    assert got.value("agentmesh.tool.breakers", tool="get_deployment", state="open") == 2
    assert got.value("agentmesh.gen_ai.tokens", agent="ops", model="default", type="input") == 120
    assert got.value("agentmesh.gen_ai.tokens", agent="ops", provider="scripted", type="output") == 30
    assert got.value("agentmesh.gen_ai.cost", agent="ops") == pytest.approx(0.0015)
    assert got.value("agentmesh.gen_ai.budget.alerts", scope_kind="agent", period="day", threshold="80") == 1
    assert got.value("agentmesh.gen_ai.quota.refusals", scope_kind="key", limit="rpm") == 1
    assert got.value("agentmesh.gen_ai.budget.spent", scope="ops", period="day") == 0.8
    assert got.value("agentmesh.gen_ai.budget.limit", scope="ops", period="day") == 1.0
    assert got.value("db.client.operation.duration", **{"db.operation.name": "commit task"}) == 2
    assert got.value("db.client.operation.duration", **{"error.type": "unavailable"}) == 1
    # Every instrument is documented (docs/design.md §8 and the dashboard use METRIC_NAMES).
    data = got.reader.get_metrics_data()
    assert data is not None
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert names == set(METRIC_NAMES)


def test_label_keys_are_a_closed_set() -> None:
    """No method takes an id: the only label keys are these, whatever a caller passes."""
    got = recorded_metrics()
    record_everything(got.metrics)
    data = got.reader.get_metrics_data()
    assert data is not None
    keys = {
        key
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.data.data_points
        for key in (p.attributes or {})
    }
    assert keys == {
        "rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code", "agent", "status", "state", "tool",
        "outcome", "error_class", "error_code", "provider", "model", "type", "db.system.name",
        "db.operation.name", "error.type",
        # Issue 49's outage waits: one of the three services a run calls.
        "service",
        # Issue 43's budgets: the scope is an operator's name (a configured agent or tenant, an API key's id).
        "scope_kind", "scope", "period", "threshold", "limit",
    }  # fmt: skip


def test_without_a_provider_nothing_is_recorded() -> None:
    metrics = Metrics()
    assert not metrics.enabled
    record_everything(metrics)  # no-op instruments: no error, no state


def test_the_prometheus_endpoint_serves_the_documented_names() -> None:
    setup = build_meter_provider(Resource.create({"service.name": "tool_svc"}), enabled=True, otlp_exporter=None)
    try:
        assert setup.registry is not None and setup.metrics.enabled
        record_everything(setup.metrics)
        text = generate_latest(setup.registry).decode()
        samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
        for otel, family in METRIC_NAMES.items():
            histogram = otel.endswith("duration")
            assert (f"{family}_count" if histogram else family) in samples, f"{otel} -> {family}"
        # The service's name is a label of every series; scope labels are not.
        assert samples["agentmesh_tasks_total"].labels == {
            "agent": "ops",
            "status": "SUCCEEDED",
            "service_name": "tool_svc",
        }
        assert samples["target_info"].labels["service_name"] == "tool_svc"
        # Two services in one process each serve their own registry.
        other = build_meter_provider(Resource.create({"service.name": "b"}), enabled=True, otlp_exporter=None)
        try:
            assert "agentmesh_tasks_total" not in generate_latest(other.registry).decode()  # type: ignore[arg-type]
        finally:
            other.shutdown()
    finally:
        setup.shutdown()
        setup.shutdown()  # idempotent


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, MetricsExporters(prometheus=True, otlp=False, console=False)),
        # The generic endpoint often points at a trace-only backend (Jaeger): it sends no metrics.
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4317"}, MetricsExporters(True, False, False)),
        (
            {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4318/v1/metrics"},
            MetricsExporters(True, True, False),
        ),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, MetricsExporters(False, True, False)),
        ({"OTEL_METRICS_EXPORTER": " Prometheus , otlp "}, MetricsExporters(True, True, False)),
        ({"OTEL_METRICS_EXPORTER": "none"}, MetricsExporters(False, False, False)),
        ({"OTEL_METRICS_EXPORTER": "console"}, MetricsExporters(False, False, True)),
    ],
)
def test_the_exporters_follow_otel_metrics_exporter(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: MetricsExporters
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert metrics_exporters() == expected


def test_an_unknown_exporter_or_a_missing_otlp_factory_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus,statsd")
    with pytest.raises(ConfigError, match=r"OTEL_METRICS_EXPORTER=.*statsd"):
        metrics_exporters()
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    with pytest.raises(ConfigError, match="no OTLP metric exporter"):
        build_meter_provider(Resource.create({}), enabled=True, otlp_exporter=None)


@pytest.mark.parametrize("env", [{}, {"OTEL_METRICS_EXPORTER": "none"}])
def test_off_means_no_provider_and_no_endpoint(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    setup = build_meter_provider(Resource.create({}), enabled=not env, otlp_exporter=None)
    if env:
        assert setup.provider is None and setup.registry is None and not setup.metrics.enabled
    else:
        assert setup.registry is not None
        setup.shutdown()


# --- the store's Redis latency --------------------------------------------------------------------


@pytest.fixture
async def metered_store(redis_settings: RedisSettings) -> AsyncIterator[tuple[Store, Recorded]]:
    got = recorded_metrics()
    store = await Store.connect(redis_settings, "dev", metrics=got.metrics)
    try:
        yield store, got
    finally:
        await store.close()


async def test_every_guarded_operation_is_timed_under_its_name(metered_store: tuple[Store, Recorded]) -> None:
    store, got = metered_store
    await store.call("load task", store.redis.get("k"))
    await store.call("load task", store.redis.get("k"))
    with pytest.raises(rexc.ResponseError):  # a programming error propagates unchanged, and is counted
        await store.call("bad command", store.redis.execute_command("NO-SUCH-COMMAND"))  # type: ignore[no-untyped-call]
    async with store.guard("read tasks", blocking=True):  # waiting for news is not latency
        await store.redis.get("k")
    assert got.value("db.client.operation.duration", **{"db.operation.name": "load task"}) == 2
    assert [a for a, _ in got.points("db.client.operation.duration") if a["db.operation.name"] == "load task"] == [
        {"db.system.name": "redis", "db.operation.name": "load task"}
    ]
    assert (
        got.value("db.client.operation.duration", **{"db.operation.name": "bad command", "error.type": "ResponseError"})
        == 1
    )
    assert got.value("db.client.operation.duration", **{"db.operation.name": "read tasks"}) == 0
    assert got.value("db.client.operation.duration", **{"db.operation.name": "connect"}) == 1


async def test_an_outage_is_counted_by_type(fresh_redis: LocalRedis) -> None:
    got = recorded_metrics()
    store = await Store.connect(RedisSettings(url=fresh_redis.url, socket_timeout_s=0.5), "dev", metrics=got.metrics)
    try:
        fresh_redis.stop()
        for blocking in (False, True):
            with pytest.raises(UnavailableError):
                async with store.guard("watch events", blocking=blocking):
                    await store.redis.get("k")
    finally:
        await store.close()
    # Failed blocking reads count too: an outage must show whatever the call was.
    assert (
        got.value("db.client.operation.duration", **{"db.operation.name": "watch events", "error.type": "unavailable"})
        == 2
    )


@pytest.mark.parametrize(("env", "expected"), [(None, 0), ("trace_based", 1)])
def test_exemplars_only_when_the_environment_asks(
    monkeypatch: pytest.MonkeyPatch, env: str | None, expected: int
) -> None:
    """Exemplars are off by default (half a histogram record's cost, issue 45); OTEL_METRICS_EXEMPLAR_FILTER
    turns them back on."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
    from opentelemetry.sdk.trace import TracerProvider

    exported: list[object] = []

    class Keep(MetricExporter):
        def export(self, metrics_data, timeout_millis=10_000, **kwargs):
            exported.append(metrics_data)
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
            pass

    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    if env:
        monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", env)
    setup = build_meter_provider(Resource.create({"service.name": "x"}), enabled=True, otlp_exporter=Keep)
    try:
        with TracerProvider().get_tracer("t").start_as_current_span("sampled"):
            setup.metrics.redis_operation("load task", 0.001)
        assert setup.provider is not None
        setup.provider.force_flush()
    finally:
        setup.shutdown()
    points = [
        point
        for data in exported
        for rm in data.resource_metrics  # type: ignore[attr-defined]
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "db.client.operation.duration"
        for point in metric.data.data_points
    ]
    assert points and points[0].count == 1
    assert len(points[0].exemplars) == expected
