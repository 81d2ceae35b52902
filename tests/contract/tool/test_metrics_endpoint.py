"""The service's HTTP listener (agentmesh/rpc/http.py) and what it serves: /metrics after real gRPC calls
through the edge (RPC rate, errors and duration per method; tool outcomes by class and code; breakers;
Redis latency), its lifecycle beside the gRPC server, and its refusals."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from agentmesh.rpc.host import ServiceHost
from agentmesh.telemetry import setup_telemetry
from agentmesh.v1 import common_pb2, tool_pb2
from tests.contract.tool.conftest import Client, base_overrides
from tests.contract.tool.fakes import FakeUpstream
from tool_svc.server import SPEC

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(port: int) -> Samples:
    """The service's /metrics, parsed (asynchronously: the listener runs on this test's event loop)."""
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, series), v in samples.items() if n == name and wanted <= series)


@pytest.fixture
def metered(
    start_service: Callable[..., Awaitable[Any]], upstream: FakeUpstream, logs_dir: Path
) -> Callable[..., Awaitable[Any]]:
    async def start(extra: dict[str, Any] | None = None) -> Any:
        overrides = base_overrides(upstream, logs_dir) | (extra or {})
        return await start_service(SPEC, overrides, http=True)

    return start


async def test_metrics_after_calls_through_the_edge(metered: Callable[..., Awaitable[Any]]) -> None:
    svc = await metered()
    c = Client(svc)
    port = svc.host.http_port
    assert port and port != svc.host.port
    # HTTP tools against the fake upstream: the calculator's worker pool would only add start-up time.
    assert (await c.execute("get_ok", {"q": "x"}, call_id="c-ok")).HasField("output")
    failed = await c.execute("get_metrics", {"service": "payment-svc"}, call_id="c-404")  # the upstream's 404
    assert failed.HasField("error")
    bad = await c.execute("get_ok", raw="{not json", call_id="c-bad")
    assert common_pb2.ErrorCode.Name(bad.error.code) == "ERROR_CODE_ARGUMENTS_NOT_JSON"
    unknown = await c.execute("no_such_tool_" + "x" * 40, {}, call_id="c-unknown")
    assert unknown.HasField("error")
    with pytest.raises(grpc.aio.AioRpcError) as refused:  # no token: refused at the edge
        await c.stub.ListTools(tool_pb2.ListToolsRequest())
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    health = health_pb2_grpc.HealthStub(svc.channel)
    await health.Check(health_pb2.HealthCheckRequest(service=""))

    samples = await scrape(port)
    count = "rpc_server_call_duration_seconds_count"
    execute = {"rpc_service": "agentmesh.v1.ToolService", "rpc_method": "ExecuteTool"}
    assert value(samples, count, rpc_grpc_status_code="0", **execute) == 4
    assert value(samples, count, rpc_method="ListTools", rpc_grpc_status_code="16") == 1
    assert value(samples, count, rpc_service="grpc.health.v1.Health") == 0, "probes are not RPC traffic"
    assert value(samples, "rpc_server_call_duration_seconds_bucket", le="+Inf", **execute) == 4
    assert value(samples, "rpc_server_call_duration_seconds_sum", **execute) > 0

    calls = "agentmesh_tool_calls_total"
    assert value(samples, calls, tool="get_ok", outcome="output") == 1
    assert value(samples, calls, tool="get_ok", error_class="CONTRACT", error_code="ARGUMENTS_NOT_JSON") == 1
    assert value(samples, calls, tool="get_metrics", outcome="error", error_class="ENGINEERING") == 1
    # The model's made-up tool name never becomes a label: one bounded "(unknown)" series.
    assert value(samples, calls, tool="(unknown)", error_code="UNKNOWN_TOOL") == 1
    assert not any("no_such_tool" in v for (_, series) in samples for _, v in series)
    assert value(samples, "agentmesh_tool_breakers", tool="get_metrics", state="closed") == 1
    assert value(samples, "db_client_operation_duration_seconds_count", db_system_name="redis") > 0
    # Every series names the service it came from, whatever the scrape job is called.
    assert {dict(series).get("service_name") for (name, series) in samples if name.startswith("rpc_")} == {"tool_svc"}


async def test_a_replayed_call_is_counted_once(metered: Callable[..., Awaitable[Any]]) -> None:
    svc = await metered()
    c = Client(svc)
    for _ in range(2):
        await c.execute("get_ok", {"q": "x"}, key="key-1", call_id="c-1")
    samples = await scrape(svc.host.http_port)
    assert value(samples, "agentmesh_tool_calls_total", tool="get_ok") == 1
    assert value(samples, "rpc_server_call_duration_seconds_count", rpc_method="ExecuteTool") == 2


async def test_the_endpoint_speaks_openmetrics_and_refuses_the_rest(metered: Callable[..., Awaitable[Any]]) -> None:
    svc = await metered()
    base = f"http://127.0.0.1:{svc.host.http_port}"
    async with httpx.AsyncClient(timeout=10) as client:
        text = await client.get(f"{base}/metrics")
        assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
        open_metrics = await client.get(f"{base}/metrics", headers={"Accept": "application/openmetrics-text"})
        assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
        assert open_metrics.text.rstrip().endswith("# EOF")
        assert (await client.get(f"{base}/")).status_code == 404
        assert (await client.get(f"{base}/metrics/../admin")).status_code == 404
        assert (await client.post(f"{base}/metrics", content=b"x")).status_code == 405


async def test_the_listener_lives_and_dies_with_the_grpc_server(make_settings: Any) -> None:
    settings = make_settings({"server": {"drain_delay_s": 0.6, "grace_period_s": 0.5}})
    host = ServiceHost("tool", settings, setup_telemetry("tool_svc", settings, configure_logs=False), _no_auth())
    await host.start("127.0.0.1:0", http_address="127.0.0.1:0")
    port = host.http_port
    await scrape(port)  # 200 (empty: nothing recorded yet without a store or a call)
    stopping = asyncio.create_task(host.stop())
    await asyncio.sleep(0.2)
    # Draining (NOT_SERVING, still answering): the metrics still answer, so the drain shows in them.
    response = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert response.status_code == 200
    await stopping
    assert host.http is None
    with pytest.raises(httpx.ConnectError):
        await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/metrics", timeout=2)
    await host.telemetry.aclose()


async def test_a_taken_http_port_is_a_clear_error_and_leaves_nothing_running(make_settings: Any) -> None:
    settings = make_settings()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        host = ServiceHost("tool", settings, setup_telemetry("tool_svc", settings, configure_logs=False), _no_auth())
        with pytest.raises(OSError, match=rf"tool: HTTP listener: cannot bind 127.0.0.1:{busy}"):
            await host.start("127.0.0.1:0", http_address=f"127.0.0.1:{busy}")
    # The gRPC server that had started is stopped again.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{host.port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError):
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
    await host.telemetry.aclose()


@pytest.mark.parametrize(
    ("overrides", "env"),
    [({"telemetry": {"metrics": False}}, {}), ({}, {"OTEL_METRICS_EXPORTER": "none"})],
)
async def test_no_metrics_no_listener(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, Any], env: dict[str, str]
) -> None:
    for name, text in env.items():
        monkeypatch.setenv(name, text)
    settings = make_settings(overrides)
    telemetry = setup_telemetry("tool_svc", settings, configure_logs=False)
    assert not telemetry.metrics.enabled and telemetry.meter.registry is None
    host = ServiceHost("tool", settings, telemetry, _no_auth())
    await host.start("127.0.0.1:0", http_address="127.0.0.1:0")
    try:
        assert host.http is None and host.http_port == 0
    finally:
        await host.stop(grace=0, drain_delay=0)
        await telemetry.aclose()


def _no_auth() -> Any:
    from agentmesh.authenticator import Authenticator
    from agentmesh.config import AuthSettings

    return Authenticator(AuthSettings(mode="disabled"), "dev")
