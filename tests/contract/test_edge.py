"""One behaviour at the RPC edge, for every RPC of every service (enumerated from the descriptors).

Through the real ServiceHost of each service, unary and streaming RPCs alike:
- no token: UNAUTHENTICATED, even for undecodable bytes (nothing is decoded before auth), and
  nothing is logged at ERROR;
- a valid token and undecodable bytes: INVALID_ARGUMENT carrying an ErrorDetail;
- a servicer that raises something unexpected: INTERNAL whose message carries the request id and
  none of the exception's text, class or paths; the traceback goes to the log once;
- each REQUIRED field (google.api.field_behavior) left unset: INVALID_ARGUMENT naming it;
- every answer, success or error, carries the call's request id (`x-request-id`) in its initial
  metadata; an error also in its trailers and its ErrorDetail (issue 42).
And the channel retries exactly the RPCs the contracts mark IDEMPOTENT or NO_SIDE_EFFECTS.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest
from google.api import field_behavior_pb2  # type: ignore[import-untyped]
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.descriptor_pb2 import MethodOptions

from agentmesh.callctx import ECHO_HEADER, REQUEST_ID_HEADER
from agentmesh.config import load_settings
from agentmesh.errors import ErrorCode
from agentmesh.rpc.channels import service_config
from agentmesh.rpc.host import ServiceSpec
from agentmesh.rpc.status import from_rpc_error, rich_details
from agentmesh.v1 import context_pb2, dispatcher_pb2, provider_pb2, tool_pb2
from context_svc.server import SPEC as CONTEXT_SPEC
from context_svc.server import ContextServicer
from dispatcher_svc.server import SPEC as DISPATCHER_SPEC
from dispatcher_svc.server import DispatcherServicer
from provider_svc.server import SPEC as PROVIDER_SPEC
from provider_svc.server import ProviderServicer
from tests.conftest import RunningService
from tool_svc.server import SPEC as TOOL_SPEC
from tool_svc.server import ToolServicer

# A length-delimited field 1 that promises 5 bytes and carries 2: no message can parse it.
GARBAGE = b"\x0a\x05ab"
SECRET_TEXT = "kaboom at /etc/agentmesh/secret.key"

SERVICES: list[tuple[ServiceSpec, Any, type]] = [
    (CONTEXT_SPEC, context_pb2.DESCRIPTOR.services_by_name["ContextService"], ContextServicer),
    (TOOL_SPEC, tool_pb2.DESCRIPTOR.services_by_name["ToolService"], ToolServicer),
    (PROVIDER_SPEC, provider_pb2.DESCRIPTOR.services_by_name["ProviderService"], ProviderServicer),
    (DISPATCHER_SPEC, dispatcher_pb2.DESCRIPTOR.services_by_name["DispatcherService"], DispatcherServicer),
]
RPCS = [
    pytest.param(spec, method, servicer, id=f"{service.name}.{method.name}")
    for spec, service, servicer in SERVICES
    for method in service.methods
]


def test_every_service_method_is_enumerated() -> None:
    assert len(RPCS) == sum(len(service.methods) for _, service, _ in SERVICES) >= 25


async def _call(svc: RunningService, method: MethodDescriptor, payload: bytes, metadata: Any) -> None:
    """Sends raw bytes to `method` and drains its reply (a stream to its end)."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    channel: Any = svc.channel  # bytes in, bytes out: no (de)serializers
    if method.client_streaming:
        stream = channel.stream_stream if method.server_streaming else channel.stream_unary

        async def requests() -> AsyncIterator[bytes]:
            yield payload

        call = stream(path)(requests(), metadata=metadata, timeout=20)
    elif method.server_streaming:
        call = channel.unary_stream(path)(payload, metadata=metadata, timeout=20)
    else:
        await channel.unary_unary(path)(payload, metadata=metadata, timeout=20)
        return
    if method.server_streaming:
        async for _ in call:
            pass
    else:
        await call


Start = Callable[..., Awaitable[RunningService]]


def _md(pairs: Any) -> dict[str, Any]:
    return {key: value for key, value in pairs or ()}


def assert_request_id_on_error(
    error: grpc.aio.AioRpcError, expected: str | None = None, *, server_streaming: bool = False
) -> str:
    """The failed call's request id is the same in its initial metadata, trailers and ErrorDetail.

    On a server-streaming call that fails before its first message, grpc.aio's client may hand over the
    status before the initial metadata it received (two batches; `_AioCall._set_status` then fills the
    initial metadata with an empty tuple and drops the late one), so there the initial metadata is checked
    when grpc delivered it; the trailers and the ErrorDetail always carry the id.
    """
    initial = _md(error.initial_metadata()).get(REQUEST_ID_HEADER)
    trailing = _md(error.trailing_metadata()).get(REQUEST_ID_HEADER)
    detail = rich_details(error).detail
    if not (server_streaming and not error.initial_metadata()):
        assert initial, f"no {REQUEST_ID_HEADER} in the initial metadata: {error.initial_metadata()}"
        assert initial == trailing
    assert trailing, f"no {REQUEST_ID_HEADER} in the trailers: {error.trailing_metadata()}"
    assert detail is not None and detail.request_id == trailing
    if expected is not None:
        assert trailing == expected
    return str(trailing)


@pytest.fixture
async def started(start_service: Start) -> AsyncIterator[Callable[[ServiceSpec], Awaitable[RunningService]]]:
    cache: dict[str, RunningService] = {}

    async def get(spec: ServiceSpec) -> RunningService:
        if spec.name not in cache:
            cache[spec.name] = await start_service(spec)
        return cache[spec.name]

    yield get


def _admin(svc: RunningService) -> Any:
    # admin holds every role a method may require (admin implies operator).
    return svc.metadata(roles=("admin",))


@pytest.mark.parametrize(("spec", "method", "servicer"), RPCS)
async def test_no_token_is_unauthenticated_before_anything_is_decoded(
    started: Any, spec: ServiceSpec, method: MethodDescriptor, servicer: type, caplog: pytest.LogCaptureFixture
) -> None:
    svc = await started(spec)
    caplog.clear()
    with caplog.at_level(logging.INFO), pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(svc, method, GARBAGE, metadata=())
    # Undecodable bytes, yet UNAUTHENTICATED: the edge never decoded them.
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value.details()
    assert from_rpc_error(info.value).code is ErrorCode.UNAUTHENTICATED
    assert_request_id_on_error(info.value, server_streaming=method.server_streaming)  # minted at the edge, and said
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


@pytest.mark.parametrize(("spec", "method", "servicer"), RPCS)
async def test_undecodable_bytes_are_invalid_argument_with_an_error_detail(
    started: Any, spec: ServiceSpec, method: MethodDescriptor, servicer: type, caplog: pytest.LogCaptureFixture
) -> None:
    svc = await started(spec)
    caplog.clear()
    with caplog.at_level(logging.INFO), pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(svc, method, GARBAGE, metadata=_admin(svc))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    rich = rich_details(info.value)
    assert rich.detail is not None and rich.error_info is not None
    assert rich.error_info.reason == "INVALID_REQUEST"
    assert method.input_type.full_name in rich.detail.message
    assert rich.bad_request is not None
    assert [v.field for v in rich.bad_request.field_violations] == ["request"]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert_request_id_on_error(info.value, server_streaming=method.server_streaming)


def _raising(method: MethodDescriptor) -> Any:
    if method.server_streaming:

        async def stream(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            raise RuntimeError(SECRET_TEXT)
            yield  # an async generator, as the real method is

        return stream

    async def unary(self: Any, request: Any, context: Any) -> Any:
        raise RuntimeError(SECRET_TEXT)

    return unary


@pytest.mark.parametrize(("spec", "method", "servicer"), RPCS)
async def test_an_unexpected_exception_is_internal_without_its_text(
    start_service: Start,
    spec: ServiceSpec,
    method: MethodDescriptor,
    servicer: type,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(servicer, method.name, _raising(method))
    svc = await start_service(spec)
    metadata = (*_admin(svc), (REQUEST_ID_HEADER, "edge-test-rid-1"))
    with caplog.at_level(logging.ERROR), pytest.raises(grpc.aio.AioRpcError) as info:
        # Every REQUIRED field set, so the request reaches the servicer.
        await _call(svc, method, _filled(method.input_type).SerializeToString(), metadata=metadata)
    assert info.value.code() == grpc.StatusCode.INTERNAL
    details = info.value.details() or ""
    assert "edge-test-rid-1" in details
    for leaked in ("kaboom", "/etc/", "secret", "RuntimeError", "Traceback", ".py"):
        assert leaked not in details, details
    assert from_rpc_error(info.value).code is ErrorCode.INTERNAL
    assert_request_id_on_error(info.value, "edge-test-rid-1", server_streaming=method.server_streaming)
    # Logged once, with the traceback (masked: agentmesh.redacted), for the operator.
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR and "Traceback" in r.getMessage()]
    assert len(logged) == 1
    assert SECRET_TEXT in logged[0].getMessage()


SUCCEEDING: list[tuple[ServiceSpec, str, Any]] = [
    (TOOL_SPEC, "/agentmesh.v1.ToolService/ListTools", tool_pb2.ListToolsRequest()),
    (PROVIDER_SPEC, "/agentmesh.v1.ProviderService/ListModels", provider_pb2.ListModelsRequest()),
    (DISPATCHER_SPEC, "/agentmesh.v1.DispatcherService/ListAgents", dispatcher_pb2.ListAgentsRequest()),
]


@pytest.mark.parametrize(("spec", "path", "request_message"), SUCCEEDING, ids=[p for _, p, _ in SUCCEEDING])
async def test_a_successful_answer_carries_the_request_id(
    started: Any, spec: ServiceSpec, path: str, request_message: Any
) -> None:
    svc = await started(spec)
    channel: Any = svc.channel
    call = channel.unary_unary(path)(
        request_message.SerializeToString(), metadata=(*_admin(svc), (REQUEST_ID_HEADER, "ok-rid-1")), timeout=20
    )
    await call
    assert _md(await call.initial_metadata()).get(REQUEST_ID_HEADER) == "ok-rid-1"
    # Without one sent, the id the edge minted (and put on its spans and log lines).
    minted = channel.unary_unary(path)(request_message.SerializeToString(), metadata=_admin(svc), timeout=20)
    await minted
    assert len(_md(await minted.initial_metadata()).get(REQUEST_ID_HEADER, "")) == 32


async def test_our_own_clients_decline_the_echo_on_success_but_not_on_error(started: Any) -> None:
    """`x-agentmesh-echo: 0` (what agentmesh.rpc.channels sends): a successful unary reply carries no
    x-request-id in its initial metadata (a write less per call, issue 45); an error still does."""
    svc = await started(TOOL_SPEC)
    channel: Any = svc.channel
    path = "/agentmesh.v1.ToolService/ListTools"
    declined = (*_admin(svc), (REQUEST_ID_HEADER, "quiet-rid-1"), (ECHO_HEADER, "0"))
    call = channel.unary_unary(path)(tool_pb2.ListToolsRequest().SerializeToString(), metadata=declined, timeout=20)
    await call
    assert REQUEST_ID_HEADER not in _md(await call.initial_metadata())
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await channel.unary_unary(path)(GARBAGE, metadata=declined, timeout=20)
    assert_request_id_on_error(info.value, "quiet-rid-1")


def test_our_client_interceptor_declines_the_echo() -> None:
    from agentmesh.rpc.channels import client_interceptors

    details = grpc.aio.ClientCallDetails("/agentmesh.v1.ToolService/ListTools", 5.0, grpc.aio.Metadata(), None, None)
    prepared, _ = client_interceptors(load_settings(overrides={"auth": {"mode": "disabled"}}))[0].prepare(details)
    assert prepared.metadata.get(ECHO_HEADER) == "0"


async def test_a_stream_carries_the_request_id_before_its_first_message(started: Any) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    svc = await started(TOOL_SPEC)
    stream = health_pb2_grpc.HealthStub(svc.channel).Watch(
        health_pb2.HealthCheckRequest(service=""), metadata=((REQUEST_ID_HEADER, "watch-rid-1"),), timeout=20
    )
    assert _md(await stream.initial_metadata()).get(REQUEST_ID_HEADER) == "watch-rid-1"
    first = await stream.read()
    assert first.status == health_pb2.HealthCheckResponse.SERVING
    stream.cancel()


# --- REQUIRED fields (google.api.field_behavior), enforced by the edge for every RPC -----------------


def _required(field: Any) -> bool:
    return field_behavior_pb2.REQUIRED in field.GetOptions().Extensions[field_behavior_pb2.field_behavior]


def _filled(descriptor: Any) -> Any:
    """A message of `descriptor` with every REQUIRED field set, recursively (a plausible value)."""
    message = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not _required(field):
            continue
        if field.message_type is not None:
            value = _filled(field.message_type)
            if field.is_repeated:
                getattr(message, field.name).add().CopyFrom(value)
            else:
                getattr(message, field.name).CopyFrom(value)
        elif field.enum_type is not None:
            setattr(message, field.name, field.enum_type.values[-1].number)
        elif field.type == field.TYPE_STRING:
            if field.is_repeated:
                getattr(message, field.name).append("x")
            else:
                setattr(message, field.name, "x")
        elif field.type in (field.TYPE_INT32, field.TYPE_INT64) and not field.is_repeated:
            setattr(message, field.name, 1)
        else:
            raise AssertionError(f"no plausible value for REQUIRED {field.full_name}")
    return message


def _required_paths(descriptor: Any, prefix: str = "") -> list[str]:
    paths = []
    for field in descriptor.fields:
        if _required(field):
            paths.append(f"{prefix}{field.name}")
            if field.message_type is not None:
                index = "[0]" if field.is_repeated else ""
                paths += _required_paths(field.message_type, f"{prefix}{field.name}{index}.")
    return paths


def _without(message: Any, path: str) -> Any:
    """A copy of `message` with the field at `path` (a.b[0].c) cleared."""
    copy = type(message)()
    copy.CopyFrom(message)
    *parents, last = path.split(".")
    target = copy
    for part in parents:
        name, _, index = part.partition("[")
        target = getattr(target, name)[int(index.rstrip("]"))] if index else getattr(target, name)
    target.ClearField(last)
    return copy


REQUIRED_CASES = [
    pytest.param(spec, method, path, id=f"{method.containing_service.name}.{method.name}:{path}")
    for spec, service, _ in SERVICES
    for method in service.methods
    for path in _required_paths(method.input_type)
]


def test_the_contracts_mark_required_fields() -> None:
    assert len(REQUIRED_CASES) >= 25


@pytest.mark.parametrize(("spec", "method", "path"), REQUIRED_CASES)
async def test_each_missing_required_field_is_invalid_argument_naming_it(
    started: Any, spec: ServiceSpec, method: MethodDescriptor, path: str
) -> None:
    svc = await started(spec)
    request = _without(_filled(method.input_type), path)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(svc, method, request.SerializeToString(), metadata=_admin(svc))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    rich = rich_details(info.value)
    assert rich.bad_request is not None
    assert [v.field for v in rich.bad_request.field_violations] == [path]
    assert rich.detail is not None and path in rich.detail.message


# --- retries: the client's retry-safe set is what the contracts mark ---------------------------------


def test_the_retry_safe_methods_are_the_rpcs_marked_idempotent_or_without_side_effects() -> None:
    safe = (MethodOptions.IDEMPOTENT, MethodOptions.NO_SIDE_EFFECTS)
    marked = {
        (service.full_name, method.name)
        for _, service, _ in SERVICES
        for method in service.methods
        if method.GetOptions().idempotency_level in safe
    }
    config = json.loads(service_config(load_settings(overrides={"auth": {"mode": "disabled"}})))
    retried = {(n["service"], n["method"]) for n in config["methodConfig"][0]["name"]}
    assert retried == marked | {("grpc.health.v1.Health", "Check")}
    # Side effects are never retried by the channel.
    for unsafe in ("ExecuteTool", "Generate", "StartTask", "RunTask", "AppendMessage", "AppendToolResult"):
        assert all(method != unsafe for _, method in retried)
