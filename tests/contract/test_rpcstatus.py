"""Rich gRPC statuses over a real grpc.aio server: what any client can read from our faults."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import grpc
import grpc.aio
import pytest
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status

from agentmesh.errors import AgentmeshError, ErrorClass, ErrorCode, Violation
from agentmesh.rpc.status import (
    DOMAIN,
    GRPC_STATUS,
    abort,
    from_rpc_error,
    rich_details,
)
from agentmesh.v1 import common_pb2

SERVICE = "agentmesh.test.Errors"
MAX_REQUEST_BYTES = 1024

Handler = Callable[[bytes, grpc.aio.ServicerContext[bytes, bytes]], Awaitable[bytes]]


def rich_error() -> AgentmeshError:
    return AgentmeshError(
        ErrorCode.SCHEMA_INVALID,
        "arguments of get_order violate its input schema",
        violations=[
            Violation(
                path="$.order_id",
                rule="pattern",
                expected=r"^ORD-\d{4}-\d{4}$",
                actual='"ord-2025-12"',
                hint="e.g. ORD-2025-0001",
            ),
            Violation(path="$.qty", rule="minimum", expected="1", actual="0"),
        ],
        retryable=True,
        retry_after=2.5,
        fallback_tool="search_orders",
        metadata={"tool": "get_order", "closest_tools": "get_order_v2"},
    )


async def _rich(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await abort(context, rich_error())


async def _by_code(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await abort(context, AgentmeshError(ErrorCode[request.decode()], f"raised {request.decode()}"))


async def _bare(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await context.abort(grpc.StatusCode[request.decode()], "redis is down")


async def _huge(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    violations = [Violation(path=f"$.v{i}", actual="x" * 2000, hint="h" * 2000) for i in range(40)]
    await abort(
        context,
        AgentmeshError(ErrorCode.SCHEMA_INVALID, "m" * 10_000, violations=violations, fallback_tool="other_tool"),
    )


async def _slow(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await asyncio.sleep(5)
    return request


async def _echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


def as_call(exc: grpc.RpcError) -> grpc.Call:
    # AioRpcError and the sync channel's errors implement the Call accessors from_call reads.
    return cast(grpc.Call, exc)


def details_bin(exc: grpc.RpcError) -> bytes:
    trailers: Any = exc.trailing_metadata()
    value: bytes = next(value for key, value in trailers if key == "grpc-status-details-bin")
    return value


HANDLERS: dict[str, Handler] = {
    "Rich": _rich,
    "ByCode": _by_code,
    "Bare": _bare,
    "Huge": _huge,
    "Slow": _slow,
    "Echo": _echo,
}


@pytest.fixture
async def target() -> AsyncIterator[str]:
    # No (de)serializers: the methods take and return raw bytes.
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in HANDLERS.items()}
    )
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES)])
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def call(target: str, method: str, request: bytes = b"", deadline_s: float = 5) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=None, response_deserializer=None)(
                request, timeout=deadline_s
            )
    return info.value


async def test_rich_error_round_trips_through_a_real_server(target: str) -> None:
    exc = await call(target, "Rich")
    sent = rich_error()
    assert exc.code() is GRPC_STATUS[ErrorCode.SCHEMA_INVALID] is grpc.StatusCode.INVALID_ARGUMENT
    assert exc.details() == sent.message

    got = from_rpc_error(exc)
    assert got.code is ErrorCode.SCHEMA_INVALID
    assert got.error_class is ErrorClass.CONTRACT
    assert got.violations == sent.violations
    assert got.retry_after == 2.5
    assert got.retryable is True
    assert got.fallback_tool == "search_orders"
    assert got.metadata == sent.metadata
    assert vars(got) == vars(sent)


async def test_standard_details_are_readable_without_agentmesh_code(target: str) -> None:
    exc = await call(target, "Rich")
    # What a client in another language does: decode google.rpc.Status from the trailer.
    status = rpc_status.from_call(as_call(exc))
    assert status is not None
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert status_pb2.Status.FromString(details_bin(exc)) == status

    by_type = {d.type_url.rsplit("/", 1)[-1]: d for d in status.details}
    assert set(by_type) == {
        "google.rpc.ErrorInfo",
        "google.rpc.RetryInfo",
        "google.rpc.BadRequest",
        "agentmesh.v1.ErrorDetail",
    }
    info = error_details_pb2.ErrorInfo()
    assert by_type["google.rpc.ErrorInfo"].Unpack(info)
    assert (info.reason, info.domain) == ("SCHEMA_INVALID", DOMAIN)
    assert dict(info.metadata) == {
        "error_class": "CONTRACT",
        "fallback_tool": "search_orders",
        "tool": "get_order",
        "closest_tools": "get_order_v2",
    }
    retry = error_details_pb2.RetryInfo()
    assert by_type["google.rpc.RetryInfo"].Unpack(retry)
    assert retry.retry_delay.ToMilliseconds() == 2500
    bad = error_details_pb2.BadRequest()
    assert by_type["google.rpc.BadRequest"].Unpack(bad)
    assert [(v.field, v.reason) for v in bad.field_violations] == [
        ("$.order_id", "PATTERN"),
        ("$.qty", "MINIMUM"),
    ]
    assert "hint: e.g. ORD-2025-0001" in bad.field_violations[0].description
    assert 'got "ord-2025-12"' in bad.field_violations[0].description


async def test_rich_details_helper_exposes_the_same_messages(target: str) -> None:
    rich = rich_details(await call(target, "Rich"))
    assert rich.error_info.reason == "SCHEMA_INVALID"
    assert rich.retry_info.retry_delay.ToMilliseconds() == 2500
    assert len(rich.bad_request.field_violations) == 2
    assert isinstance(rich.detail, common_pb2.ErrorDetail)
    assert rich.detail.code == common_pb2.ERROR_CODE_SCHEMA_INVALID


async def test_error_info_alone_is_enough(target: str) -> None:
    """A non-Python agentmesh peer may send only the standard details."""
    exc = await call(target, "Rich")
    status = rpc_status.from_call(as_call(exc))
    del status.details[-1]  # drop agentmesh.v1.ErrorDetail
    stripped = grpc.aio.AioRpcError(
        exc.code(),
        grpc.aio.Metadata(),
        grpc.aio.Metadata(("grpc-status-details-bin", status.SerializeToString())),
        exc.details(),
        None,
    )
    got = from_rpc_error(stripped)
    assert got.code is ErrorCode.SCHEMA_INVALID
    assert got.retry_after == 2.5
    assert got.fallback_tool == "search_orders"
    assert got.metadata == {"tool": "get_order", "closest_tools": "get_order_v2"}
    assert [(v.path, v.rule) for v in got.violations] == [("$.order_id", "pattern"), ("$.qty", "minimum")]


@pytest.mark.parametrize("code", [c for c in ErrorCode if c is not ErrorCode.UNSPECIFIED], ids=lambda c: c.name)
async def test_every_code_travels_with_its_grpc_status(target: str, code: ErrorCode) -> None:
    exc = await call(target, "ByCode", code.name.encode())
    assert exc.code() is GRPC_STATUS[code]
    got = from_rpc_error(exc)
    assert (got.code, got.message) == (code, f"raised {code.name}")
    assert rich_details(exc).error_info.metadata["error_class"] == got.error_class.name


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("UNAVAILABLE", ErrorCode.UNAVAILABLE),
        ("DEADLINE_EXCEEDED", ErrorCode.DEADLINE_EXCEEDED),
        ("RESOURCE_EXHAUSTED", ErrorCode.OVERLOADED),
        ("UNAUTHENTICATED", ErrorCode.UNAUTHENTICATED),
        ("PERMISSION_DENIED", ErrorCode.PERMISSION_DENIED),
        ("NOT_FOUND", ErrorCode.NOT_FOUND),
        ("INVALID_ARGUMENT", ErrorCode.INVALID_REQUEST),
        ("FAILED_PRECONDITION", ErrorCode.FAILED_PRECONDITION),
        ("CANCELLED", ErrorCode.CANCELLED),
        ("UNIMPLEMENTED", ErrorCode.INTERNAL),
        ("INTERNAL", ErrorCode.INTERNAL),
        ("UNKNOWN", ErrorCode.INTERNAL),
    ],
)
async def test_bare_status_maps_to_the_closest_code(target: str, status: str, expected: ErrorCode) -> None:
    exc = await call(target, "Bare", status.encode())
    assert rich_details(exc).status is None
    got = from_rpc_error(exc)
    assert got.code is expected
    assert got.message == "redis is down"
    assert got.metadata == {"grpc_status": status}


async def test_bare_unavailable_is_retryable(target: str) -> None:
    got = from_rpc_error(await call(target, "Bare", b"UNAVAILABLE"))
    assert got.code is ErrorCode.UNAVAILABLE
    assert got.error_class is ErrorClass.ENGINEERING
    assert got.retryable


async def test_unknown_method_is_internal(target: str) -> None:
    got = from_rpc_error(await call(target, "NoSuchMethod"))
    assert got.code is ErrorCode.INTERNAL
    assert got.metadata["grpc_status"] == "UNIMPLEMENTED"


async def test_client_deadline_is_deadline_exceeded(target: str) -> None:
    got = from_rpc_error(await call(target, "Slow", deadline_s=0.05))
    assert got.code is ErrorCode.DEADLINE_EXCEEDED


async def test_oversized_request_is_payload_too_large(target: str) -> None:
    got = from_rpc_error(await call(target, "Echo", b"x" * (MAX_REQUEST_BYTES * 4)))
    assert got.code is ErrorCode.PAYLOAD_TOO_LARGE


async def test_huge_error_still_arrives_typed(target: str) -> None:
    """Without shrinking, the trailer would exceed the client's 8 KiB metadata limit."""
    exc = await call(target, "Huge")
    assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT
    got = from_rpc_error(exc)
    assert got.code is ErrorCode.SCHEMA_INVALID
    assert got.fallback_tool == "other_tool"
    assert got.metadata["details_truncated"] == "true"
    assert 0 < len(got.violations) < 40


async def test_sync_client_errors_are_understood_too(target: str) -> None:
    def sync_call() -> grpc.RpcError:
        with grpc.insecure_channel(target) as channel:
            try:
                channel.unary_unary(f"/{SERVICE}/Rich", request_serializer=None, response_deserializer=None)(
                    b"", timeout=5
                )
            except grpc.RpcError as exc:
                return exc
        raise AssertionError("the call succeeded")

    exc = await asyncio.to_thread(sync_call)
    got = from_rpc_error(exc)
    assert vars(got) == vars(rich_error())
    assert rpc_status.from_call(as_call(exc)) is not None


def test_plain_rpc_error_without_call_methods_is_internal() -> None:
    got = from_rpc_error(grpc.RpcError("no call attached"))
    assert got.code is ErrorCode.INTERNAL
