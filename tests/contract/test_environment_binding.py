"""A token is bound to its environment (docs/design.md §9), through the real edge of each service.

One key may sign for several environments; a service of environment `prod` refuses a token minted
for `dev` with that same key, on every RPC, as UNAUTHENTICATED naming both environments (never
INTERNAL, never the servicer), and accepts a `prod` token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf.descriptor import MethodDescriptor

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.errors import ErrorCode
from agentmesh.rpc.host import ServiceSpec
from agentmesh.rpc.status import from_rpc_error
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
from tests.conftest import RunningService
from tool_svc.server import SPEC as TOOL_SPEC

# A length-delimited field 1 that promises 5 bytes and carries 2: no message can parse it.
GARBAGE = b"\x0a\x05ab"
PROD = {"environment": "prod"}

Start = Callable[..., Awaitable[RunningService]]
Metadata = tuple[tuple[str, str], ...]


async def _raw_call(svc: RunningService, method: MethodDescriptor, metadata: Metadata) -> None:
    """Sends undecodable bytes to `method` (auth comes before decoding) and drains the reply."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    channel: Any = svc.channel
    if method.client_streaming:

        async def requests() -> AsyncIterator[bytes]:
            yield GARBAGE

        stream = channel.stream_stream if method.server_streaming else channel.stream_unary
        call = stream(path)(requests(), metadata=metadata, timeout=20)
    elif method.server_streaming:
        call = channel.unary_stream(path)(GARBAGE, metadata=metadata, timeout=20)
    else:
        await channel.unary_unary(path)(GARBAGE, metadata=metadata, timeout=20)
        return
    if method.server_streaming:
        async for _ in call:
            pass
    else:
        await call


async def _list_tools(svc: RunningService, md: Metadata) -> None:
    stub = tool_pb2_grpc.ToolServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    assert (await stub.ListTools(tool_pb2.ListToolsRequest(), metadata=md, timeout=20)).tools


async def _list_models(svc: RunningService, md: Metadata) -> None:
    stub = provider_pb2_grpc.ProviderServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    assert (await stub.ListModels(provider_pb2.ListModelsRequest(), metadata=md, timeout=20)).models


async def _list_agents(svc: RunningService, md: Metadata) -> None:
    stub = dispatcher_pb2_grpc.DispatcherServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    await stub.ListAgents(dispatcher_pb2.ListAgentsRequest(), metadata=md, timeout=20)


async def _create_session(svc: RunningService, md: Metadata) -> None:
    stub = context_pb2_grpc.ContextServiceStub(svc.channel)  # type: ignore[no-untyped-call]
    assert (
        await stub.CreateSession(context_pb2.CreateSessionRequest(goal="g"), metadata=md, timeout=20)
    ).session.session_id


SERVICES = [
    pytest.param(CONTEXT_SPEC, context_pb2, "ContextService", _create_session, id="context"),
    pytest.param(TOOL_SPEC, tool_pb2, "ToolService", _list_tools, id="tool"),
    pytest.param(PROVIDER_SPEC, provider_pb2, "ProviderService", _list_models, id="provider"),
    pytest.param(DISPATCHER_SPEC, dispatcher_pb2, "DispatcherService", _list_agents, id="dispatcher"),
]


@pytest.mark.parametrize(("spec", "module", "service", "call"), SERVICES)
async def test_a_prod_service_refuses_a_dev_token_on_every_rpc_and_accepts_a_prod_one(
    start_service: Start, spec: ServiceSpec, module: Any, service: str, call: Any
) -> None:
    svc = await start_service(spec, PROD)
    assert svc.settings.environment == "prod"
    # The same key, the same claims (admin holds every role), only the environment differs.
    dev: Metadata = ((IDENTITY_HEADER, svc.token(("admin",), subject="ops-admin", environment="dev")),)
    prod: Metadata = ((IDENTITY_HEADER, svc.token(("admin",), subject="ops-admin", environment="prod")),)
    methods = list(module.DESCRIPTOR.services_by_name[service].methods)
    assert methods
    for method in methods:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _raw_call(svc, method, dev)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, (method.name, refused.value.details())
        assert from_rpc_error(refused.value).code is ErrorCode.UNAUTHENTICATED
        details = refused.value.details() or ""
        assert "'dev'" in details and "'prod'" in details, details
        # The prod token passes the edge: the garbage is then refused for what it is.
        with pytest.raises(grpc.aio.AioRpcError) as decoded:
            await _raw_call(svc, method, prod)
        assert decoded.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method.name, decoded.value.details())
    # A real call: refused with the dev token, answered with the prod one (a token is verified once
    # and then remembered; the remembered prod token must not open the door to the dev one).
    await call(svc, prod)
    with pytest.raises(grpc.aio.AioRpcError) as again:
        await call(svc, dev)
    assert again.value.code() == grpc.StatusCode.UNAUTHENTICATED
    await call(svc, prod)


@pytest.mark.parametrize(("spec", "module", "service", "call"), SERVICES)
async def test_a_dev_service_refuses_a_prod_token(
    start_service: Start, spec: ServiceSpec, module: Any, service: str, call: Any
) -> None:
    svc = await start_service(spec)
    assert svc.settings.environment == "dev"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call(svc, ((IDENTITY_HEADER, svc.token(("admin",), subject="ops-admin", environment="prod")),))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "'prod'" in (refused.value.details() or "") and "'dev'" in (refused.value.details() or "")
    await call(svc, svc.metadata(("admin",), subject="ops-admin"))
