"""The shared grpc.aio bootstrap: health, reflection, auth, load shedding, message limits, drain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from agentmesh.authenticator import Authenticator
from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.config import Settings, load_settings
from agentmesh.rpc.host import ServiceHost, ServiceSpec
from agentmesh.rpc.status import from_rpc_error
from agentmesh.telemetry import setup_telemetry
from agentmesh.v1 import (
    context_pb2,
    context_pb2_grpc,
    dispatcher_pb2,
    dispatcher_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
)
from context_svc.server import SPEC as CONTEXT_SPEC
from dispatcher_svc.server import SPEC as DISPATCHER_SPEC
from provider_svc.server import SPEC as PROVIDER_SPEC
from tool_svc.server import SPEC as TOOL_SPEC

SLOW_METHOD = "/test.Slow/Wait"
KEY = "test-key-" + "x" * 32


def make_settings(tmp_path: Path, **server: Any) -> Settings:
    return load_settings(
        overrides={
            "auth": {"key": KEY},
            "server": server,
            "telemetry": {"span_file": str(tmp_path / "spans.jsonl")},
        }
    )


def slow_handler(started: asyncio.Event, release: asyncio.Event) -> Any:
    """A generic service whose Wait call blocks until `release`, echoing its request."""

    async def wait(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        started.set()
        await release.wait()
        return request

    handler = grpc.unary_unary_rpc_method_handler(
        wait, request_deserializer=lambda b: b, response_serializer=lambda b: b
    )
    return grpc.method_handlers_generic_handler("test.Slow", {"Wait": handler})


HostFactory = Callable[..., Awaitable[ServiceHost]]


@pytest.fixture
async def host_factory(tmp_path: Path) -> AsyncIterator[HostFactory]:
    hosts: list[ServiceHost] = []

    async def make(spec: ServiceSpec | None = None, handler: Any = None, **server: Any) -> ServiceHost:
        settings = make_settings(tmp_path, **server)
        name = spec.name if spec else "tool"
        host = ServiceHost(
            name=name,
            settings=settings,
            telemetry=setup_telemetry(f"{name}_svc", settings),
            authenticator=Authenticator(settings.auth, settings.environment),
            method_roles=spec.method_roles if spec else {},
        )
        if spec is not None:
            await spec.setup(host)
        if handler is not None:
            host.server.add_generic_rpc_handlers((handler,))
        await host.start("127.0.0.1:0")
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        await host.stop(grace=0, drain_delay=0)
        host.telemetry.shutdown()


def token(roles: frozenset[str] = frozenset({"agent"})) -> list[tuple[str, str]]:
    settings_auth = load_settings(overrides={"auth": {"key": KEY}}).auth
    minted = Authenticator(settings_auth).mint(subject="tester", roles=roles)
    return [(IDENTITY_HEADER, minted)]


async def reflection_services(channel: grpc.aio.Channel) -> list[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    names: list[str] = []
    async for reply in stub.ServerReflectionInfo(iter([request]), timeout=5):
        names.extend(service.name for service in reply.list_services_response.service)
    return names


SERVICES = [
    (
        CONTEXT_SPEC,
        "agentmesh.v1.ContextService",
        context_pb2_grpc.ContextServiceStub,
        "GetSession",
        context_pb2.GetSessionRequest(),
    ),
    (
        TOOL_SPEC,
        "agentmesh.v1.ToolService",
        tool_pb2_grpc.ToolServiceStub,
        "ListTools",
        tool_pb2.ListToolsRequest(),
    ),
    (
        PROVIDER_SPEC,
        "agentmesh.v1.ProviderService",
        provider_pb2_grpc.ProviderServiceStub,
        "ListModels",
        provider_pb2.ListModelsRequest(),
    ),
    (
        DISPATCHER_SPEC,
        "agentmesh.v1.DispatcherService",
        dispatcher_pb2_grpc.DispatcherServiceStub,
        "ListAgents",
        dispatcher_pb2.ListAgentsRequest(),
    ),
]


@pytest.mark.parametrize(("spec", "full_name", "stub_class", "method", "request_message"), SERVICES)
async def test_each_service_has_health_reflection_and_auth(
    start_service: Any,
    spec: ServiceSpec,
    full_name: str,
    stub_class: Any,
    method: str,
    request_message: Any,
) -> None:
    # The real service (its Redis-backed domain included), as `python -m <svc>` would run it.
    service = await start_service(spec)
    async with grpc.aio.insecure_channel(service.target) as channel:
        # Reflection needs no token (grpcurl must work) and announces the service.
        names = await reflection_services(channel)
        assert full_name in names
        assert "grpc.health.v1.Health" in names
        # Health per service name and for the whole server, without a token.
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", full_name):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # Every other RPC needs a token.
        call = getattr(stub_class(channel), method)
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await call(request_message, timeout=5)
        assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_overload_sheds_with_retry_info_and_health_still_answers(host_factory: HostFactory) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    host = await host_factory(handler=slow_handler(started, release), max_concurrent_rpcs=2)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{host.port}") as channel:
        wait = channel.unary_unary(SLOW_METHOD)  # type: ignore[call-arg]
        in_flight = [asyncio.ensure_future(wait(b"x", metadata=token(), timeout=10)) for _ in range(2)]
        while host.limiter.in_flight < 2:
            await asyncio.sleep(0.01)
        with pytest.raises(grpc.aio.AioRpcError) as shed:
            await wait(b"y", metadata=token(), timeout=5)
        assert shed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        error = from_rpc_error(shed.value)
        assert error.retry_after is not None and error.retry_after > 0
        status = rpc_status.from_call(shed.value)  # type: ignore[arg-type]
        assert status is not None
        assert any(detail.type_url.endswith("google.rpc.RetryInfo") for detail in status.details)
        # Health is never shed: an overloaded replica is busy, not dead.
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        release.set()
        assert await asyncio.gather(*in_flight) == [b"x", b"x"]
        assert host.limiter.in_flight == 0
        # Capacity is back once the calls end.
        assert await wait(b"z", metadata=token(), timeout=5) == b"z"
        # A call that auth refuses after the limiter counted it is not counted forever.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await wait(b"anonymous", timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert host.limiter.in_flight == 0


async def test_oversized_message_is_refused(host_factory: HostFactory) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    release.set()
    host = await host_factory(handler=slow_handler(started, release), max_message_bytes=1024)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{host.port}") as channel:
        wait = channel.unary_unary(SLOW_METHOD)  # type: ignore[call-arg]
        assert await wait(b"a" * 512, metadata=token(), timeout=5) == b"a" * 512
        with pytest.raises(grpc.aio.AioRpcError) as too_big:
            await wait(b"a" * 4096, metadata=token(), timeout=5)
        assert too_big.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_stop_marks_not_serving_and_drains_in_flight_calls(host_factory: HostFactory) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    host = await host_factory(handler=slow_handler(started, release))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{host.port}") as channel:
        wait = channel.unary_unary(SLOW_METHOD)  # type: ignore[call-arg]
        in_flight = asyncio.ensure_future(wait(b"finish me", metadata=token(), timeout=20))
        await asyncio.wait_for(started.wait(), 5)
        stopping = asyncio.ensure_future(host.stop(grace=15))
        # NOT_SERVING is visible to the watchers that balancers use.
        while host.health._server_status.get("") != health_pb2.HealthCheckResponse.NOT_SERVING:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert not in_flight.done()
        release.set()
        assert await in_flight == b"finish me"
        await asyncio.wait_for(stopping, 15)
