"""AuthInterceptor on a real grpc.aio server: tokens, roles, streams, health and reflection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc
from pydantic import SecretStr

from agentmesh import callctx
from agentmesh.authenticator import Authenticator
from agentmesh.config import AuthSettings
from agentmesh.errors import ErrorCode
from agentmesh.identity_value import Identity, current_identity, require_identity
from agentmesh.rpc import status as rpcstatus
from agentmesh.rpc.auth import AuthInterceptor
from agentmesh.rpc.interceptors import EdgeInterceptor
from agentmesh.v1 import dispatcher_pb2, dispatcher_pb2_grpc

KEY = "contract-test-key-0123456789abcdef"
SERVICE = "agentmesh.v1.DispatcherService"
RESOLVE_APPROVAL = f"/{SERVICE}/ResolveApproval"


def resolve_request() -> dispatcher_pb2.DispatcherServiceResolveApprovalRequest:
    """A ResolveApproval request with its REQUIRED fields set (the edge refuses one without)."""
    return dispatcher_pb2.DispatcherServiceResolveApprovalRequest(
        task_id="t1", approval_id="apr_1", arguments_sha256="0" * 64
    )


class Dispatcher(dispatcher_pb2_grpc.DispatcherServiceServicer):
    """Echoes what the auth layer gave the servicer, so tests see the identity came from the token."""

    def __init__(self) -> None:
        self.seen: list[Identity | None] = []
        self.forwarded_tokens: list[str | None] = []

    def _record(self) -> Identity:
        identity = current_identity()
        self.seen.append(identity)
        self.forwarded_tokens.append(callctx.identity_token_var.get())
        return require_identity()

    async def ListAgents(self, request: Any, context: Any) -> dispatcher_pb2.ListAgentsResponse:
        self._record()
        return dispatcher_pb2.ListAgentsResponse()

    async def GetTask(self, request: Any, context: Any) -> dispatcher_pb2.GetTaskResponse:
        identity = self._record()
        return dispatcher_pb2.GetTaskResponse(
            task=dispatcher_pb2.Task(task_id=identity.task_id, agent_id=identity.subject)
        )

    async def ResolveApproval(
        self, request: Any, context: Any
    ) -> dispatcher_pb2.DispatcherServiceResolveApprovalResponse:
        self._record()
        return dispatcher_pb2.DispatcherServiceResolveApprovalResponse()

    async def WatchTask(self, request: Any, context: Any) -> AsyncIterator[dispatcher_pb2.WatchTaskResponse]:
        identity = self._record()
        for sequence in (1, 2):
            yield dispatcher_pb2.WatchTaskResponse(
                event=dispatcher_pb2.TaskEvent(task_id=request.task_id, sequence=sequence, message=identity.subject)
            )


class Harness:
    def __init__(self, authenticator: Authenticator, channel: grpc.aio.Channel, servicer: Dispatcher) -> None:
        self.authenticator = authenticator
        self.channel = channel
        self.servicer = servicer
        self.stub = dispatcher_pb2_grpc.DispatcherServiceStub(channel)  # type: ignore[no-untyped-call]

    def token(self, **claims: Any) -> str:
        claims.setdefault("subject", "sre-bot")
        claims.setdefault("roles", {"agent"})
        return self.authenticator.mint(**claims)


Start = Callable[[AuthSettings], Awaitable[Harness]]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    servers: list[grpc.aio.Server] = []
    channels: list[grpc.aio.Channel] = []

    async def _start(settings: AuthSettings) -> Harness:
        authenticator = Authenticator(settings, environment="dev")
        server = grpc.aio.server(
            interceptors=[EdgeInterceptor(AuthInterceptor(authenticator, {RESOLVE_APPROVAL: frozenset({"operator"})}))]
        )
        servicer = Dispatcher()
        dispatcher_pb2_grpc.add_DispatcherServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        # The aio servicer: the sync one would block the event loop on Watch.
        health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
        await health_servicer.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection((SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        channels.append(channel)
        return Harness(authenticator, channel, servicer)

    yield _start
    for channel in channels:
        await channel.close(None)
    for server in servers:
        await server.stop(None)


@pytest.fixture
async def enabled(start: Start) -> Harness:
    return await start(AuthSettings(mode="enabled", key=SecretStr(KEY)))


def md(token: str) -> tuple[tuple[str, str]]:
    return ((callctx.IDENTITY_HEADER, token),)


async def assert_fails(call: Awaitable[Any], status: grpc.StatusCode, text: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == status, info.value.details()
    assert text in (info.value.details() or "")
    return info.value


async def test_call_without_token_is_unauthenticated(enabled: Harness) -> None:
    err = await assert_fails(
        enabled.stub.ListAgents(dispatcher_pb2.ListAgentsRequest()),
        grpc.StatusCode.UNAUTHENTICATED,
        "missing identity token",
    )
    # The rich status carries the agentmesh code, so clients decode a typed error.
    assert rpcstatus.from_rpc_error(err).code == ErrorCode.UNAUTHENTICATED
    assert enabled.servicer.seen == []


async def test_forged_token_is_unauthenticated(enabled: Harness) -> None:
    forged = Authenticator(AuthSettings(mode="enabled", key=SecretStr("attacker"))).mint(
        subject="root", roles={"admin"}
    )
    await assert_fails(
        enabled.stub.ListAgents(dispatcher_pb2.ListAgentsRequest(), metadata=md(forged)),
        grpc.StatusCode.UNAUTHENTICATED,
        "bad signature",
    )
    assert enabled.servicer.seen == []


async def test_expired_token_is_unauthenticated(enabled: Harness) -> None:
    expired = enabled.token(ttl_s=60, now=1_000_000)
    await assert_fails(
        enabled.stub.ListAgents(dispatcher_pb2.ListAgentsRequest(), metadata=md(expired)),
        grpc.StatusCode.UNAUTHENTICATED,
        "token expired at",
    )


async def test_malformed_token_is_unauthenticated(enabled: Harness) -> None:
    await assert_fails(
        enabled.stub.ListAgents(dispatcher_pb2.ListAgentsRequest(), metadata=md("not-a-token")),
        grpc.StatusCode.UNAUTHENTICATED,
        "malformed token",
    )


async def test_agent_token_on_operator_rpc_is_permission_denied(enabled: Harness) -> None:
    err = await assert_fails(
        enabled.stub.ResolveApproval(resolve_request(), metadata=md(enabled.token())),
        grpc.StatusCode.PERMISSION_DENIED,
        "requires role operator",
    )
    decoded = rpcstatus.from_rpc_error(err)
    assert decoded.code == ErrorCode.PERMISSION_DENIED
    assert decoded.missing_permission == "role:operator"
    assert enabled.servicer.seen == []


@pytest.mark.parametrize("role", ["operator", "admin"])
async def test_operator_and_admin_tokens_pass_the_operator_rpc(enabled: Harness, role: str) -> None:
    token = enabled.token(subject="alice", roles={role})
    await enabled.stub.ResolveApproval(resolve_request(), metadata=md(token))
    [identity] = enabled.servicer.seen
    assert identity is not None
    assert identity.subject == "alice"


async def test_servicer_sees_the_identity_from_the_token(enabled: Harness) -> None:
    token = enabled.token(subject="sre-bot", agent_id="sre-bot", task_id="t-42", permissions=("dev:ops:read",))
    response = await enabled.stub.GetTask(dispatcher_pb2.GetTaskRequest(task_id="ignored"), metadata=md(token))
    assert response.task.agent_id == "sre-bot"
    assert response.task.task_id == "t-42"
    [identity] = enabled.servicer.seen
    assert identity is not None
    assert identity.permissions == ("dev:ops:read",)
    # The same raw token is what client interceptors forward downstream.
    assert enabled.servicer.forwarded_tokens == [token]


async def test_identity_does_not_leak_between_calls(enabled: Harness) -> None:
    await enabled.stub.ListAgents(dispatcher_pb2.ListAgentsRequest(), metadata=md(enabled.token(subject="a")))
    await enabled.stub.ListAgents(dispatcher_pb2.ListAgentsRequest(), metadata=md(enabled.token(subject="b")))
    assert [identity.subject for identity in enabled.servicer.seen if identity] == ["a", "b"]
    assert current_identity() is None


async def test_server_streaming_rpc_is_authenticated(enabled: Harness) -> None:
    stream = enabled.stub.WatchTask(dispatcher_pb2.WatchTaskRequest(task_id="t-1"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stream:
            pass
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert enabled.servicer.seen == []

    token = enabled.token(subject="sre-bot")
    events = [
        response.event
        async for response in enabled.stub.WatchTask(dispatcher_pb2.WatchTaskRequest(task_id="t-1"), metadata=md(token))
    ]
    assert [(e.sequence, e.message) for e in events] == [(1, "sre-bot"), (2, "sre-bot")]


async def test_health_check_needs_no_token(enabled: Harness) -> None:
    stub = health_pb2_grpc.HealthStub(enabled.channel)
    response = await stub.Check(health_pb2.HealthCheckRequest(service=SERVICE))
    assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_needs_no_token(enabled: Harness) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(enabled.channel)
    call = stub.ServerReflectionInfo()
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    response = await call.read()
    await call.done_writing()
    names = {service.name for service in response.list_services_response.service}
    assert SERVICE in names


async def test_disabled_mode_lets_a_call_without_token_pass(start: Start) -> None:
    harness = await start(AuthSettings(mode="disabled"))
    response = await harness.stub.GetTask(dispatcher_pb2.GetTaskRequest(task_id="t1"))
    assert response.task.agent_id == "dev"
    # The dev identity holds every role, so operator-only methods pass too.
    await harness.stub.ResolveApproval(resolve_request())
    assert harness.servicer.forwarded_tokens == [None, None]
